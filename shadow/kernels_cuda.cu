// The shadow pool's kernels on the device (contracts: shadow/kernels_cuda.h).
// Grid-stride loops over float4 where the pointers allow it: these kernels
// are bound by memory bandwidth, and bench/gpu-kernels measures them
// against a device-to-device copy of the same bytes.
#include "shadow/kernels_cuda.h"

#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int kThreads = 256;

// Enough blocks to fill the current device a few times over; the loops
// stride. (The attribute query is cheap next to a launch.)
int blocks_for(size_t work) {
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        sms <= 0)
        sms = 80;
    size_t want = (work + kThreads - 1) / kThreads;
    size_t cap = (size_t)sms * 8;
    if (want > cap)
        want = cap;
    return want == 0 ? 1 : (int)want;
}

bool aligned16(const void *p) {
    return ((uintptr_t)p & 15u) == 0;
}

__global__ void add_scaled_kernel(float *live, const float *__restrict__ d, float scale, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        live[i] += scale * d[i];
}

__global__ void add_scaled_kernel4(float4 *live, const float4 *__restrict__ d, float scale,
                                   size_t n4) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 x = live[i], y = d[i];
        x.x += scale * y.x;
        x.y += scale * y.y;
        x.z += scale * y.z;
        x.w += scale * y.w;
        live[i] = x;
    }
}

__global__ void elastic_kernel(const float *__restrict__ s, float *__restrict__ c,
                               float *__restrict__ d, float alpha, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float di = alpha * (s[i] - c[i]);
        d[i] = di;
        c[i] += di;
    }
}

__global__ void elastic_kernel4(const float4 *__restrict__ s, float4 *__restrict__ c,
                                float4 *__restrict__ d, float alpha, size_t n4) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 si = s[i], ci = c[i], di;
        di.x = alpha * (si.x - ci.x);
        di.y = alpha * (si.y - ci.y);
        di.z = alpha * (si.z - ci.z);
        di.w = alpha * (si.w - ci.w);
        ci.x += di.x;
        ci.y += di.y;
        ci.z += di.z;
        ci.w += di.w;
        d[i] = di;
        c[i] = ci;
    }
}

__global__ void accumulate_kernel(float *__restrict__ acc, const float *__restrict__ x, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        acc[i] += x[i];
}

__global__ void accumulate_kernel4(float4 *__restrict__ acc, const float4 *__restrict__ x,
                                   size_t n4) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 a = acc[i], y = x[i];
        a.x += y.x;
        a.y += y.y;
        a.z += y.z;
        a.w += y.w;
        acc[i] = a;
    }
}

__global__ void scale_kernel(float *__restrict__ x, float scale, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] *= scale;
}

__global__ void scale_kernel4(float4 *__restrict__ x, float scale, size_t n4) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = x[i];
        v.x *= scale;
        v.y *= scale;
        v.z *= scale;
        v.w *= scale;
        x[i] = v;
    }
}

__global__ void sub_kernel(float *__restrict__ out, const float *__restrict__ a,
                           const float *__restrict__ b, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = a[i] - b[i];
}

__global__ void sub_kernel4(float4 *__restrict__ out, const float4 *__restrict__ a,
                            const float4 *__restrict__ b, size_t n4) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 x = a[i], y = b[i], d;
        d.x = x.x - y.x;
        d.y = x.y - y.y;
        d.z = x.z - y.z;
        d.w = x.w - y.w;
        out[i] = d;
    }
}

int launched() {
    return (int)cudaGetLastError();
}

} // namespace

extern "C" int ss__cuda_live_add_scaled(void *stream, float *live, const float *d, float scale,
                                        size_t n) {
    cudaStream_t s = (cudaStream_t)stream;
    if (n == 0)
        return 0;
    size_t n4 = aligned16(live) && aligned16(d) ? n / 4 : 0;
    if (n4 > 0)
        add_scaled_kernel4<<<blocks_for(n4), kThreads, 0, s>>>((float4 *)live, (const float4 *)d,
                                                               scale, n4);
    if (n > n4 * 4)
        add_scaled_kernel<<<blocks_for(n - n4 * 4), kThreads, 0, s>>>(live + n4 * 4, d + n4 * 4,
                                                                      scale, n - n4 * 4);
    return launched();
}

extern "C" int ss__cuda_elastic_exchange(void *stream, const float *s, float *c, float *d,
                                         float alpha, size_t n) {
    cudaStream_t st = (cudaStream_t)stream;
    if (n == 0)
        return 0;
    size_t n4 = aligned16(s) && aligned16(c) && aligned16(d) ? n / 4 : 0;
    if (n4 > 0)
        elastic_kernel4<<<blocks_for(n4), kThreads, 0, st>>>((const float4 *)s, (float4 *)c,
                                                             (float4 *)d, alpha, n4);
    if (n > n4 * 4)
        elastic_kernel<<<blocks_for(n - n4 * 4), kThreads, 0, st>>>(s + n4 * 4, c + n4 * 4,
                                                                    d + n4 * 4, alpha, n - n4 * 4);
    return launched();
}

extern "C" int ss__cuda_accumulate(void *stream, float *acc, const float *x, size_t n) {
    cudaStream_t s = (cudaStream_t)stream;
    size_t n4 = aligned16(acc) && aligned16(x) ? n / 4 : 0;
    if (n4 > 0)
        accumulate_kernel4<<<blocks_for(n4), kThreads, 0, s>>>((float4 *)acc, (const float4 *)x,
                                                               n4);
    if (n > n4 * 4)
        accumulate_kernel<<<blocks_for(n - n4 * 4), kThreads, 0, s>>>(acc + n4 * 4, x + n4 * 4,
                                                                      n - n4 * 4);
    return launched();
}

extern "C" int ss__cuda_scale(void *stream, float *x, float scale, size_t n) {
    cudaStream_t s = (cudaStream_t)stream;
    size_t n4 = aligned16(x) ? n / 4 : 0;
    if (n4 > 0)
        scale_kernel4<<<blocks_for(n4), kThreads, 0, s>>>((float4 *)x, scale, n4);
    if (n > n4 * 4)
        scale_kernel<<<blocks_for(n - n4 * 4), kThreads, 0, s>>>(x + n4 * 4, scale, n - n4 * 4);
    return launched();
}

extern "C" int ss__cuda_sub(void *stream, float *out, const float *a, const float *b, size_t n) {
    cudaStream_t s = (cudaStream_t)stream;
    size_t n4 = aligned16(out) && aligned16(a) && aligned16(b) ? n / 4 : 0;
    if (n4 > 0)
        sub_kernel4<<<blocks_for(n4), kThreads, 0, s>>>((float4 *)out, (const float4 *)a,
                                                        (const float4 *)b, n4);
    if (n > n4 * 4)
        sub_kernel<<<blocks_for(n - n4 * 4), kThreads, 0, s>>>(out + n4 * 4, a + n4 * 4, b + n4 * 4,
                                                               n - n4 * 4);
    return launched();
}
