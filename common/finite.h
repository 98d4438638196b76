/* The finiteness check every request path runs on the floats it accepts
 * (dense snapshots, peers' models, embedding gradients and rows), and the
 * elastic rate's range, the same wherever an alpha is taken. */
#ifndef SHADOWSYNC_FINITE_H
#define SHADOWSYNC_FINITE_H

#include <stdbool.h>
#include <stddef.h>

/* 1 if every one of the n floats is finite (no NaN, no Inf), else 0. */
int ss__all_finite(const float *restrict x, size_t n);
/* The index of the first float that is not finite (n: none), for the
 * message once a check refused: it stops there, so it does not vectorize. */
size_t ss__first_non_finite(const float *x, size_t n);

/* The elastic rate (S-EASGD's alpha, a cached table's emb_alpha): in
 * (0, 1] (NaN is not). */
#define SS_ALPHA_RANGE "(0, 1]"
static inline bool ss__alpha_valid(float alpha) {
    return alpha > 0.0f && alpha <= 1.0f;
}

#endif
