/* shadowsync-bench-gpu-kernels: the shadow pool's device kernels
 * (shadow/kernels_cuda.cu) against the device's own copy, and a device
 * group's round copies against plain pinned copies, measured in the same
 * run on the same buffers. Prints, per kernel, the bytes it moves per
 * second and that as a ratio to a device-to-device cudaMemcpyAsync (which
 * reads and writes every byte once: the memory bandwidth this device
 * reaches), then the time of one round's snapshot and delta apply
 * (shadow/device.c) for a group of --floats against a pinned
 * device-to-host plus host-to-device cudaMemcpy of the same bytes. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "common/clock.h"
#include "common/flags.h"
#include "shadow/device.h"
#include "shadow/kernels_cuda.h"

static const ss__program program = {
    "shadowsync-bench-gpu-kernels",
    "The shadow pool's CUDA kernels (elastic, add-scaled, accumulate, scale, sub) as a ratio to a "
    "device-to-device copy's bandwidth, and a device group's round copies against pinned copies."};

static int failed(cudaError_t err, const char *what) {
    if (err == cudaSuccess)
        return 0;
    fprintf(stderr, "shadowsync-bench-gpu-kernels: %s: %s\n", what, cudaGetErrorString(err));
    return 1;
}

typedef enum { K_COPY, K_ELASTIC, K_ADD, K_ACC, K_SCALE, K_SUB, K_COUNT } kernel;
static const char *const names[K_COUNT] = {"memcpy_d2d", "elastic", "add_scaled",
                                           "accumulate", "scale",   "sub"};
/* Floats read plus written per element. */
static const int traffic[K_COUNT] = {2, 4, 3, 3, 2, 3};

static int launch(kernel k, cudaStream_t s, float *a, float *b, float *c, size_t n) {
    switch (k) {
    case K_COPY:
        return (int)cudaMemcpyAsync(a, b, n * sizeof(float), cudaMemcpyDeviceToDevice, s);
    case K_ELASTIC:
        return ss__cuda_elastic_exchange(s, a, b, c, 0.5f, n);
    case K_ADD:
        return ss__cuda_live_add_scaled(s, a, b, -1e-3f, n);
    case K_ACC:
        return ss__cuda_accumulate(s, a, b, n);
    case K_SCALE:
        return ss__cuda_scale(s, a, 0.999f, n);
    case K_SUB:
        return ss__cuda_sub(s, a, b, c, n);
    default:
        return 1;
    }
}

/* Random floats in [-1, 1) (never zeros: they can run faster than real
 * data and hide unwritten outputs). */
static void random_floats(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / (double)(1ull << 23) - 1.0);
    }
}

static int fill_random(float *dev, size_t n, uint64_t seed) {
    float *h = malloc(n * sizeof(float));
    if (!h)
        return 1;
    random_floats(h, n, seed);
    int bad = failed(cudaMemcpy(dev, h, n * sizeof(float), cudaMemcpyHostToDevice), "upload");
    free(h);
    return bad;
}

static double seconds_between(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    return ms / 1e3;
}

int main(int argc, char **argv) {
    int64_t device = 0, floats = 1 << 26, reps = 20, group_floats = 1 << 24;
    ss__flag flags[] = {
        {"device", SS_FLAG_INT, &device, "CUDA device ordinal", NULL, 0, 1024},
        {"floats", SS_FLAG_INT, &floats, "elements per kernel launch", NULL, 1024, 1ll << 32},
        {"reps", SS_FLAG_INT, &reps, "launches timed per kernel (best taken)", NULL, 1, 10000},
        {"group-floats", SS_FLAG_INT, &group_floats, "the device group of the round timing", NULL,
         1, 1ll << 32},
    };
    int code = ss__flags_cli(&program, flags, sizeof flags / sizeof *flags, argc, argv);
    if (code >= 0)
        return code;
    const char *why = "";
    if (ss__device_count(&why) <= (int)device) {
        fprintf(stderr, "shadowsync-bench-gpu-kernels: device %d: %s\n", (int)device,
                *why ? why : "no such device");
        return 2;
    }
    const size_t n = (size_t)floats;
    struct cudaDeviceProp prop;
    float *a, *b, *c;
    cudaStream_t s;
    cudaEvent_t e0, e1;
    if (failed(cudaSetDevice((int)device), "cudaSetDevice") ||
        failed(cudaGetDeviceProperties(&prop, (int)device), "properties") ||
        failed(cudaMalloc((void **)&a, n * sizeof(float)), "cudaMalloc") ||
        failed(cudaMalloc((void **)&b, n * sizeof(float)), "cudaMalloc") ||
        failed(cudaMalloc((void **)&c, n * sizeof(float)), "cudaMalloc") || fill_random(a, n, 1) ||
        fill_random(b, n, 2) || fill_random(c, n, 3) || failed(cudaStreamCreate(&s), "stream") ||
        failed(cudaEventCreate(&e0), "event") || failed(cudaEventCreate(&e1), "event"))
        return 1;
    printf("device: %s, %.1f GiB, %d SMs; %zu floats per launch, best of %d\n", prop.name,
           (double)prop.totalGlobalMem / (1 << 30), prop.multiProcessorCount, n, (int)reps);
    double gbps[K_COUNT];
    for (int k = 0; k < K_COUNT; k++) {
        double best = 1e30;
        for (int r = 0; r <= reps; r++) { /* the first is a warm-up */
            if (failed(cudaEventRecord(e0, s), "record") || launch((kernel)k, s, a, b, c, n) != 0 ||
                failed(cudaEventRecord(e1, s), "record") ||
                failed(cudaEventSynchronize(e1), names[k]))
                return 1;
            double t = seconds_between(e0, e1);
            if (r > 0 && t < best)
                best = t;
        }
        gbps[k] = (double)traffic[k] * (double)n * sizeof(float) / best / 1e9;
        printf("kernel=%-10s GB/s=%7.1f ratio_to_memcpy=%.3f\n", names[k], gbps[k],
               gbps[k] / gbps[K_COPY]);
    }
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);

    /* One round's device work: a snapshot down and a delta up and applied,
     * from plain host memory (through the staging buffers: a user's
     * ss_dense_read) and from page-locked memory (the engine's round
     * buffers), against a pinned copy each way of the same bytes. */
    const size_t gn = (size_t)group_floats;
    ss__device_group *g;
    char gwhy[300] = "";
    if (ss__device_group_create((int)device, gn, &g, gwhy, sizeof gwhy) != SS_OK) {
        fprintf(stderr, "shadowsync-bench-gpu-kernels: %s\n", gwhy);
        return 1;
    }
    float *host = malloc(gn * sizeof(float)), *pinned, *dev;
    if (!host || failed(cudaMallocHost((void **)&pinned, gn * sizeof(float)), "pinned") ||
        failed(cudaMalloc((void **)&dev, gn * sizeof(float)), "cudaMalloc"))
        return 1;
    random_floats(host, gn, 4);
    double best_staged = 1e30, best_round = 1e30, best_copy = 1e30;
    ss__device_pin pin = {0};
    for (int r = 0; r <= 2 * reps + 1; r++) {
        /* reps + 1 staged rounds, then reps + 1 from the pinned buffer;
         * the first of each is a warm-up. */
        if (r == reps + 1 && ss__device_group_pin(g, host, gn, &pin) != SS_OK) {
            fprintf(stderr, "shadowsync-bench-gpu-kernels: %s\n", ss__device_last_error());
            return 1;
        }
        uint64_t t0 = ss__now_ns();
        if (ss__device_group_snapshot(g, host) != SS_OK ||
            ss__device_group_add_scaled(g, host, 0.0f) != SS_OK) {
            fprintf(stderr, "shadowsync-bench-gpu-kernels: %s\n", ss__device_last_error());
            return 1;
        }
        uint64_t t1 = ss__now_ns();
        if (failed(cudaMemcpy(pinned, dev, gn * sizeof(float), cudaMemcpyDeviceToHost), "d2h") ||
            failed(cudaMemcpy(dev, pinned, gn * sizeof(float), cudaMemcpyHostToDevice), "h2d"))
            return 1;
        uint64_t t2 = ss__now_ns();
        double *best = r <= reps ? &best_staged : &best_round;
        if (r != 0 && r != reps + 1 && (double)(t1 - t0) < *best)
            *best = (double)(t1 - t0);
        if (r > 0 && (double)(t2 - t1) < best_copy)
            best_copy = (double)(t2 - t1);
    }
    printf("round: group_floats=%zu snapshot+apply_ms=%.3f (staged: %.3f) pinned_d2h+h2d_ms=%.3f "
           "ratio=%.3f\n",
           gn, best_round / 1e6, best_staged / 1e6, best_copy / 1e6, best_copy / best_round);
    ss__device_unpin(&pin);
    ss__device_group_destroy(g);
    cudaFreeHost(pinned);
    cudaFree(dev);
    free(host);
    return 0;
}
