/* The shadow pool's kernels on a CUDA device: the same contracts as the
 * pure kernels of shadow/kernels.h (and the live add-scaled one), over
 * device pointers, launched on the caller's stream (a cudaStream_t passed
 * as void *). Each returns 0 or the cudaError_t of the launch. Built only
 * where CMake finds nvcc (SS_HAVE_CUDA). */
#ifndef SHADOWSYNC_KERNELS_CUDA_H
#define SHADOWSYNC_KERNELS_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* live[i] += scale * d[i]: the delta a round applies (racy with the
 * trainer's kernels by design, as ss__kernel_live_add_scaled). */
int ss__cuda_live_add_scaled(void *stream, float *live, const float *d, float scale, size_t n);
/* Elastic exchange: d = alpha (s - c); c += d. */
int ss__cuda_elastic_exchange(void *stream, const float *s, float *c, float *d, float alpha,
                              size_t n);
/* acc[i] += x[i], and x[i] *= scale: a mean is k accumulates and a scale. */
int ss__cuda_accumulate(void *stream, float *acc, const float *x, size_t n);
int ss__cuda_scale(void *stream, float *x, float scale, size_t n);
/* out[i] = a[i] - b[i]: an MA member's delta (mean - snapshot). */
int ss__cuda_sub(void *stream, float *out, const float *a, const float *b, size_t n);

#ifdef __cplusplus
}
#endif

#endif
