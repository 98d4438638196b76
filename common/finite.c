/* See finite.h. */
#include "common/finite.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

/* Bit test instead of isfinite(), and no early exit, so the loop
 * vectorizes: an exponent of all ones means Inf or NaN. Inlined into one
 * copy per instruction set below. */
static inline __attribute__((always_inline)) int finite_loop(const float *restrict x, size_t n) {
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        bad |= ((bits & 0x7f800000u) == 0x7f800000u);
    }
    return bad == 0;
}

static int finite_sse2(const float *restrict x, size_t n) {
    return finite_loop(x, n);
}

__attribute__((target("avx2"))) static int finite_avx2(const float *restrict x, size_t n) {
    return finite_loop(x, n);
}

__attribute__((target("avx512f"))) static int finite_avx512(const float *restrict x, size_t n) {
    return finite_loop(x, n);
}

typedef int (*finite_fn)(const float *restrict, size_t);

/* The widest copy this CPU runs, picked on the first call: a push of
 * 4,096 rows of dim 64 checks 1 MiB of gradients first, and the scratch
 * driver's pushes ran 8-10% faster than with SSE2 alone (five alternating
 * pairs, 1M rows). Not target_clones: its ifunc resolver runs while the
 * program is relocated, before ThreadSanitizer's runtime is up, and every
 * binary of the TSan build crashed at start. */
static finite_fn pick(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return finite_avx512;
    if (__builtin_cpu_supports("avx2"))
        return finite_avx2;
    return finite_sse2;
}

size_t ss__first_non_finite(const float *x, size_t n) {
    size_t i = 0;
    while (i < n && isfinite(x[i]))
        i++;
    return i;
}

int ss__all_finite(const float *restrict x, size_t n) {
    static _Atomic(finite_fn) chosen;
    finite_fn f = atomic_load_explicit(&chosen, memory_order_relaxed);
    if (!f) {
        f = pick();
        atomic_store_explicit(&chosen, f, memory_order_relaxed);
    }
    return f(x, n);
}
