/* The GPU trainer's own kernels (bench/gpu_train.c): the parts of a
 * two-layer MLP's step that are not matrix products (those are cuBLAS).
 * Column-major, one example per column; each launches on the given
 * stream and returns 0 or the launch's cudaError_t. */
#ifndef SHADOWSYNC_BENCH_GPU_TRAIN_KERNELS_H
#define SHADOWSYNC_BENCH_GPU_TRAIN_KERNELS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* a[h + H*b] = max(0, z[h + H*b] + bias[h]) for h < H, b < B. */
int gt_bias_relu(void *stream, const float *z, const float *bias, float *a, int H, int B);
/* p = sigmoid(logit[b] + *b2); g[b] = (p - y[b]) / B; *loss += logloss
 * (summed over the batch, for the progress line). */
int gt_logistic_grad(void *stream, const float *logit, const float *b2, const float *y, float *g,
                     float *loss, int B);
/* da[h + H*b] = (a[h + H*b] > 0) * w2[h] * g[b]. */
int gt_relu_backward(void *stream, const float *a, const float *w2, const float *g, float *da,
                     int H, int B);
/* *out = sum of x[0..n). */
int gt_sum(void *stream, const float *x, float *out, int n);
/* x[i] = v for i < n. */
int gt_fill(void *stream, float *x, float v, size_t n);

#ifdef __cplusplus
}
#endif

#endif
