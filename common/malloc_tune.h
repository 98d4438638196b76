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

/* jemalloc's settings for the PS: defined as `const char *malloc_conf =
 * SS_JEMALLOC_CONF;` in its main file (jemalloc reads that symbol at
 * start; MALLOC_CONF in the environment still overrides it).
 *  - background_thread, dirty_decay_ms:1000, muzzy_decay_ms:0: by default
 *    jemalloc returns freed pages only when the process allocates again,
 *    so a burst (a token-less client's large requests, refused but partly
 *    received before the refusal) would stay resident for good in an idle
 *    PS; a background thread returns pages unused for about a second.
 *  - narenas:1: with the default 4 x cores arenas each keeps its own freed
 *    megabyte buffers, and a buffer freed by one gRPC thread is not reused
 *    by another. Small allocations come from per-thread caches anyway, and
 *    the embedding rows have arenas of their own. */
#define SS_JEMALLOC_CONF "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,narenas:1"

#endif
