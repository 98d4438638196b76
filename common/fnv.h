/* FNV-1a, 64 bits: the checksum that seals the files the daemons write
 * (dense checkpoints, embedding deltas), so that a torn or corrupted file
 * is refused instead of loaded. Not for adversaries: files are private. */
#ifndef SS_COMMON_FNV_H
#define SS_COMMON_FNV_H

#include <stddef.h>
#include <stdint.h>

#define SS_FNV_OFFSET 14695981039346656037ull

static inline uint64_t ss__fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

#endif
