/* Small deterministic RNGs for data generation and initialization:
 * splitmix64 for hashing/seeding, xoshiro256** for streams. */
#ifndef SS_CTR_RNG_H
#define SS_CTR_RNG_H

#include <math.h>
#include <stdint.h>

#include "common/hash.h"

/* Hash of a few integers, for values that must be a pure function of ids. */
static inline uint64_t ss__hash3(uint64_t a, uint64_t b, uint64_t c) {
    return ss__splitmix64(ss__splitmix64(ss__splitmix64(a) ^ b) ^ c);
}

/* Uniform in [0, 1) from 53 random bits. */
static inline double ss__u01(uint64_t bits) {
    return (double)(bits >> 11) * 0x1.0p-53;
}

typedef struct ss__rng {
    uint64_t s[4];
} ss__rng;

static inline void ss__rng_seed(ss__rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) {
        seed = ss__splitmix64(seed);
        r->s[i] = seed;
    }
}

static inline uint64_t ss__rng_next(ss__rng *r) {
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5;
    uint64_t result = ((x << 7) | (x >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

static inline double ss__rng_uniform(ss__rng *r) {
    return ss__u01(ss__rng_next(r));
}

/* Box-Muller: a standard normal of two uniforms in [0, 1). */
static inline double ss__normal_of(double u1, double u2) {
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Standard normal by Box-Muller (one value per call; simplicity over speed). */
static inline double ss__rng_normal(ss__rng *r) {
    double u1 = ss__rng_uniform(r), u2 = ss__rng_uniform(r);
    return ss__normal_of(u1, u2);
}

/* Standard normal that is a pure function of a hash value. */
static inline double ss__hash_normal(uint64_t h) {
    return ss__normal_of(ss__u01(ss__splitmix64(h)), ss__u01(ss__splitmix64(h ^ 0x5bd1e995ull)));
}

#endif
