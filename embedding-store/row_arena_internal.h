/* Where a table's slabs of rows are allocated (private to embedding-store/).
 * Two implementations, chosen at link time:
 *  - arena_jemalloc.c: a jemalloc arena per table (the parameter server
 *    and the tools): accounted by jemalloc, destroyed with every row;
 *  - arena_libc.c: plain malloc (libshadowsync, which is loaded into
 *    users' processes: a shared library that brings jemalloc would put
 *    jemalloc's operator new/delete in front of the host's libc malloc,
 *    mixing allocators in the host; we saw glibc abort on it). */
#ifndef SS_ROW_ARENA_H
#define SS_ROW_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ss__row_arena ss__row_arena;

/* A table's rows come in slabs (table.c): one allocation holds many rows. */
ss__row_arena *ss__row_arena_create(void);
void *ss__row_arena_alloc(ss__row_arena *a, size_t bytes);
void ss__row_arena_free(ss__row_arena *a, void *slab);
/* true: destroy frees every slab still allocated; false: free them first. */
bool ss__row_arena_frees_all(void);
void ss__row_arena_destroy(ss__row_arena *a);
/* The allocator's own count of the arena's bytes; 0 when unknown. */
uint64_t ss__row_arena_allocated(const ss__row_arena *a);

#endif
