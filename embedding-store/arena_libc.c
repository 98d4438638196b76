/* Rows from the process's malloc (see row_arena.h for why). */
#include <stdlib.h>

#include "embedding-store/row_arena_internal.h"

struct ss__row_arena {
    size_t row_size;
};

ss__row_arena *ss__row_arena_create(size_t row_size) {
    ss__row_arena *a = calloc(1, sizeof *a);
    if (a)
        a->row_size = row_size;
    return a;
}

void *ss__row_arena_alloc(ss__row_arena *a) {
    return malloc(a->row_size);
}

void ss__row_arena_free(ss__row_arena *a, void *row) {
    (void)a;
    free(row);
}

bool ss__row_arena_frees_all(void) {
    return false;
}

void ss__row_arena_destroy(ss__row_arena *a) {
    free(a);
}

size_t ss__row_arena_row_bytes(const ss__row_arena *a) {
    /* glibc: 8 bytes of header, 16-byte granules, 32 at least */
    size_t n = (a->row_size + 8 + 15) & ~(size_t)15;
    return n < 32 ? 32 : n;
}

uint64_t ss__row_arena_allocated(const ss__row_arena *a) {
    (void)a;
    return 0;
}
