/* Slabs of rows from the process's malloc (see row_arena_internal.h for why). */
#include <stdlib.h>

#include "embedding-store/row_arena_internal.h"

struct ss__row_arena {
    char unused; /* malloc keeps no state of ours */
};

ss__row_arena *ss__row_arena_create(void) {
    return calloc(1, sizeof(ss__row_arena));
}

void *ss__row_arena_alloc(ss__row_arena *a, size_t bytes) {
    (void)a;
    return malloc(bytes);
}

void ss__row_arena_free(ss__row_arena *a, void *slab) {
    (void)a;
    free(slab);
}

bool ss__row_arena_frees_all(void) {
    return false;
}

void ss__row_arena_destroy(ss__row_arena *a) {
    free(a);
}

uint64_t ss__row_arena_allocated(const ss__row_arena *a) {
    (void)a;
    return 0;
}
