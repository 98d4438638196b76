/* A cursor over bytes in memory, for the decoders of the daemons' own
 * files (dense checkpoints, deltas): every read checks what is left
 * first, so a truncated or lying file ends the parse instead of reading
 * past the buffer. */
#ifndef SS_COMMON_BYTE_READER_H
#define SS_COMMON_BYTE_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

typedef struct ss__byte_reader {
    const unsigned char *p, *end;
} ss__byte_reader;

static inline size_t ss__bytes_left(const ss__byte_reader *r) {
    return (size_t)(r->end - r->p);
}

/* Copies the next n bytes to out and moves past them; false (and nothing
 * read) when fewer are left. */
static inline bool ss__take(ss__byte_reader *r, void *out, size_t n) {
    if (ss__bytes_left(r) < n)
        return false;
    memcpy(out, r->p, n);
    r->p += n;
    return true;
}

#endif
