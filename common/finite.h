/* The finiteness check every request path runs on the floats it accepts
 * (dense snapshots, peers' models, embedding gradients and rows). */
#ifndef SHADOWSYNC_FINITE_H
#define SHADOWSYNC_FINITE_H

#include <stddef.h>

/* 1 if every one of the n floats is finite (no NaN, no Inf), else 0. */
int ss__all_finite(const float *restrict x, size_t n);

#endif
