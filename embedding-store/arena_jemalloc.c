/* Slabs of rows in a jemalloc arena of their own (see row_arena_internal.h). */
#include <jemalloc/jemalloc.h>
#include <stdio.h>
#include <stdlib.h>

#include "embedding-store/row_arena_internal.h"

struct ss__row_arena {
    unsigned index;
    int flags;
};

ss__row_arena *ss__row_arena_create(void) {
    ss__row_arena *a = calloc(1, sizeof *a);
    size_t sz = sizeof a->index;
    if (!a || mallctl("arenas.create", &a->index, &sz, NULL, 0) != 0) {
        free(a);
        return NULL;
    }
    /* No thread cache: every slab goes to and from this arena only, so the
     * arena can be destroyed with all its slabs at once. */
    a->flags = (int)(MALLOCX_ARENA(a->index) | MALLOCX_TCACHE_NONE);
    return a;
}

void *ss__row_arena_alloc(ss__row_arena *a, size_t bytes) {
    return mallocx(bytes, a->flags);
}

void ss__row_arena_free(ss__row_arena *a, void *slab) {
    dallocx(slab, a->flags);
}

bool ss__row_arena_frees_all(void) {
    return true;
}

void ss__row_arena_destroy(ss__row_arena *a) {
    if (!a)
        return;
    char name[64];
    snprintf(name, sizeof name, "arena.%u.destroy", a->index);
    /* Should it fail, the slabs leak inside the arena rather than being
     * freed one by one behind its back. */
    (void)mallctl(name, NULL, NULL, NULL, 0);
    free(a);
}

uint64_t ss__row_arena_allocated(const ss__row_arena *a) {
    uint64_t epoch = 1;
    size_t sz = sizeof epoch;
    if (mallctl("epoch", &epoch, &sz, &epoch, sz) != 0)
        return 0;
    char name[96];
    size_t small = 0, large = 0;
    sz = sizeof small;
    snprintf(name, sizeof name, "stats.arenas.%u.small.allocated", a->index);
    if (mallctl(name, &small, &sz, NULL, 0) != 0)
        return 0;
    snprintf(name, sizeof name, "stats.arenas.%u.large.allocated", a->index);
    if (mallctl(name, &large, &sz, NULL, 0) != 0)
        return 0;
    return (uint64_t)small + (uint64_t)large;
}
