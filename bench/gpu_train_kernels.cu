// The GPU trainer's element-wise kernels (contracts: gpu_train_kernels.h).
#include "bench/gpu_train_kernels.h"

#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

int blocks(size_t n) {
    size_t b = (n + kThreads - 1) / kThreads;
    return b > 65535 ? 65535 : (b == 0 ? 1 : (int)b);
}

__global__ void bias_relu(const float *__restrict__ z, const float *__restrict__ bias,
                          float *__restrict__ a, int H, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = z[i] + bias[i % (size_t)H];
        a[i] = v > 0.0f ? v : 0.0f;
    }
}

__global__ void logistic_grad(const float *__restrict__ logit, const float *__restrict__ b2,
                              const float *__restrict__ y, float *__restrict__ g, float *loss,
                              int B) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B)
        return;
    float t = logit[b] + *b2;
    float p = 1.0f / (1.0f + expf(-t));
    g[b] = (p - y[b]) / (float)B;
    // log(1 + e^t) - y t, computed stably.
    float l = fmaxf(t, 0.0f) + log1pf(expf(-fabsf(t))) - y[b] * t;
    atomicAdd(loss, l);
}

__global__ void relu_backward(const float *__restrict__ a, const float *__restrict__ w2,
                              const float *__restrict__ g, float *__restrict__ da, int H,
                              size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t h = i % (size_t)H, b = i / (size_t)H;
        da[i] = a[i] > 0.0f ? w2[h] * g[b] : 0.0f;
    }
}

__global__ void sum(const float *__restrict__ x, float *out, int n) {
    __shared__ float part[kThreads];
    float s = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        s += x[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w)
            part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicAdd(out, part[0]);
}

__global__ void fill(float *x, float v, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = v;
}

int launched() {
    return (int)cudaGetLastError();
}

} // namespace

extern "C" int gt_bias_relu(void *stream, const float *z, const float *bias, float *a, int H,
                            int B) {
    size_t n = (size_t)H * (size_t)B;
    bias_relu<<<blocks(n), kThreads, 0, (cudaStream_t)stream>>>(z, bias, a, H, n);
    return launched();
}

extern "C" int gt_logistic_grad(void *stream, const float *logit, const float *b2, const float *y,
                                float *g, float *loss, int B) {
    logistic_grad<<<blocks((size_t)B), kThreads, 0, (cudaStream_t)stream>>>(logit, b2, y, g, loss,
                                                                            B);
    return launched();
}

extern "C" int gt_relu_backward(void *stream, const float *a, const float *w2, const float *g,
                                float *da, int H, int B) {
    size_t n = (size_t)H * (size_t)B;
    relu_backward<<<blocks(n), kThreads, 0, (cudaStream_t)stream>>>(a, w2, g, da, H, n);
    return launched();
}

extern "C" int gt_sum(void *stream, const float *x, float *out, int n) {
    const int b = blocks((size_t)n) < 64 ? blocks((size_t)n) : 64;
    sum<<<b, kThreads, 0, (cudaStream_t)stream>>>(x, out, n);
    return launched();
}

extern "C" int gt_fill(void *stream, float *x, float v, size_t n) {
    fill<<<blocks(n), kThreads, 0, (cudaStream_t)stream>>>(x, v, n);
    return launched();
}
