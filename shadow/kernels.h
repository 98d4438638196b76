/* Vector kernels over float32 arrays.
 *
 * Two kinds live here:
 *  - "live" kernels read or write a replica that Hogwild workers write at
 *    the same time. They race by design (torn reads are fine, see
 *    docs/ARCHITECTURE.md, "The algorithms"). They are the ONLY code allowed to touch a live
 *    replica, so ThreadSanitizer suppressions (tests/tsan.supp) name
 *    exactly these functions: ss__kernel_live_*.
 *  - pure kernels over private buffers (snapshots, central variables,
 *    messages), which never race.
 *
 * All loops are simple and restrict-qualified so GCC vectorizes them at -O3. */
#ifndef SHADOWSYNC_KERNELS_H
#define SHADOWSYNC_KERNELS_H

#include <stddef.h>

/* ---- live kernels (racy by design) ---- */

/* dst[i] = live[i]: a plain copy of the live replica. */
void ss__kernel_live_snapshot(float *restrict dst, const float *live, size_t n);
/* live[i] += scale * d[i]: apply a delta, keeping concurrent worker updates. */
void ss__kernel_live_add_scaled(float *live, const float *restrict d, float scale, size_t n);
/* y[r] = b[r] + sum_c W[r*cols+c] x[c], with W and b live (forward pass). */
void ss__kernel_live_matvec(const float *W, const float *b, const float *restrict x,
                            float *restrict y, size_t rows, size_t cols);
/* dx[c] = sum_r W[r*cols+c] dy[r], with W live (backward pass). */
void ss__kernel_live_matvec_t(const float *W, const float *restrict dy, float *restrict dx,
                              size_t rows, size_t cols);

/* Optimizer steps on a live replica with the trainer's own state (m, v,
 * acc race like the replica: a lost update of the state only mis-scales
 * one element's step). g is a gradient sum, scaled by gscale (1/batch).
 * Adam: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; x -= lr_t m / (sqrt v
 * + eps), lr_t carrying the bias correction. */
void ss__kernel_live_adam(float *live, float *m, float *v, const float *restrict g, float gscale,
                          float lr_t, float b1, float b2, float eps, size_t n);
/* Adagrad: acc += g^2; x -= lr g / (sqrt acc + eps). */
void ss__kernel_live_adagrad(float *live, float *acc, const float *restrict g, float gscale,
                             float lr, float eps, size_t n);
/* Row-wise Adagrad (one accumulator per embedding row, as the embedding
 * store's): *acc += mean(g^2); x -= lr g / (sqrt *acc + eps). */
void ss__kernel_live_adagrad_row(float *live, float *acc, const float *restrict g, float lr,
                                 float eps, size_t n);

/* ---- pure kernels ---- */

/* Elastic exchange (S-EASGD, server side): d = alpha (s - c); c += d. */
void ss__kernel_elastic_exchange(const float *restrict s, float *restrict c, float *restrict d,
                                 float alpha, size_t n);
/* y[i] += a * x[i] (private buffers). */
void ss__kernel_axpy(float *restrict y, const float *restrict x, float a, size_t n);
/* acc[i] += x[i]. */
void ss__kernel_accumulate(float *restrict acc, const float *restrict x, size_t n);
/* x[i] *= scale, in place (scale = 1/N turns a sum into a mean). */
void ss__kernel_scale(float *restrict x, float scale, size_t n);
/* out[i] = a[i] - b[i]. */
void ss__kernel_sub(float *restrict out, const float *restrict a, const float *restrict b,
                    size_t n);
/* In one pass: *dist2 = sum of (a[i]-b[i])^2, *b2 = sum of b[i]^2 (double). */
void ss__kernel_dist2_norm2(const float *restrict a, const float *restrict b, size_t n,
                            double *dist2, double *b2);
/* An S-EASGD round's distances from its snapshot s and delta d = alpha (s - c),
 * in one pass and in double: *dist2 = |s - c|^2 = sum (d[i]/alpha)^2 and
 * *centre2 = |c|^2 = sum (s[i] - d[i]/alpha)^2. */
void ss__kernel_easgd_divergence(const float *restrict s, const float *restrict d, float alpha,
                                 size_t n, double *dist2, double *centre2);

#endif
