/* Process-wide allocator settings for the daemons and tools that move
 * bulk floats. */
#ifndef SS_COMMON_MALLOC_TUNE_H
#define SS_COMMON_MALLOC_TUNE_H

/* Every sync round allocates and frees buffers of megabytes (chunk
 * requests and replies). glibc serves those with fresh mmap()s and gives
 * them back at once, so each round pays page faults and the kernel's
 * zeroing for every byte again: under perf, page faults were a quarter of
 * the agent's CPU. This keeps such buffers in the heap (mmap only above
 * 256 MiB, trim above 1 GiB) so that the next round reuses them. For
 * programs only: a library must not change its host's allocator. */
void ss__malloc_keep_large_buffers(void);

#endif
