/* One 64-bit mixer for hash tables, sketches and values that must be a
 * pure function of ids: splitmix64's finalizer (Stafford's variant 13),
 * every bit of the input reaching every bit of the output. */
#ifndef SS_COMMON_HASH_H
#define SS_COMMON_HASH_H

#include <stdint.h>

#define SS_GOLDEN64 0x9e3779b97f4a7c15ull /* 2^64 / phi: Fibonacci hashing's step */

static inline uint64_t ss__mix64(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* splitmix64's output for state x: a seed's stream, or the hash of x. */
static inline uint64_t ss__splitmix64(uint64_t x) {
    return ss__mix64(x + SS_GOLDEN64);
}

#endif
