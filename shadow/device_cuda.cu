// The CUDA runtime behind shadow/device.h's group logic. Every call first
// makes the group's device current for this thread (the shadow pool's
// threads serve groups on any device). The sync stream is created
// non-blocking at the lowest priority the device has, so a round's copies
// and delta kernel yield to the training stream's work and never
// synchronize with the legacy default stream.
#include "shadow/device.h"
#include "shadow/kernels_cuda.h"

#include <cuda_runtime.h>

#include <stdio.h>
#include <string.h>

namespace {

thread_local char why_text[160];

int count(const char **why) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err == cudaErrorInsufficientDriver) {
        // The runtime says this both when there is no driver at all and
        // when it is too old: tell the two apart.
        int driver = 0, runtime = 0;
        cudaDriverGetVersion(&driver);
        cudaRuntimeGetVersion(&runtime);
        if (driver == 0)
            snprintf(why_text, sizeof why_text,
                     "no NVIDIA driver is installed (libcuda.so.1 not found)");
        else
            snprintf(why_text, sizeof why_text,
                     "the NVIDIA driver supports CUDA %d.%d, older than this library's runtime "
                     "%d.%d",
                     driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
        *why = why_text;
        cudaGetLastError(); // not sticky: clear it
        return 0;
    }
    if (err != cudaSuccess) {
        *why = cudaGetErrorString(err); // "no CUDA-capable device is detected", ...
        cudaGetLastError();
        return 0;
    }
    if (n == 0)
        *why = "cudaGetDeviceCount found none";
    return n;
}

const char *error_string(int err) {
    return cudaGetErrorString((cudaError_t)err);
}

int device_alloc(int ordinal, size_t bytes, void **out) {
    cudaError_t err = cudaSetDevice(ordinal);
    if (err == cudaSuccess)
        err = cudaMalloc(out, bytes);
    if (err == cudaSuccess)
        err = cudaMemset(*out, 0, bytes);
    return (int)err;
}

void device_free(int ordinal, void *p) {
    cudaSetDevice(ordinal);
    cudaFree(p);
}

int host_alloc(size_t bytes, void **out) {
    // Portable: pinned for every device's context, not only the current one.
    return (int)cudaHostAlloc(out, bytes, cudaHostAllocPortable);
}

void host_free(void *p) {
    cudaFreeHost(p);
}

int host_register(void *p, size_t bytes) {
    return (int)cudaHostRegister(p, bytes, cudaHostRegisterPortable);
}

void host_unregister(void *p) {
    cudaHostUnregister(p);
}

int stream_create(int ordinal, void **out) {
    int least = 0, greatest = 0;
    cudaError_t err = cudaSetDevice(ordinal);
    if (err == cudaSuccess)
        err = cudaDeviceGetStreamPriorityRange(&least, &greatest);
    cudaStream_t s = nullptr;
    // "least" is the lowest priority (the numerically greatest value).
    if (err == cudaSuccess)
        err = cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, least);
    if (err == cudaSuccess)
        *out = (void *)s;
    return (int)err;
}

void stream_destroy(int ordinal, void *stream) {
    cudaSetDevice(ordinal);
    cudaStreamDestroy((cudaStream_t)stream);
}

int copy(int ordinal, void *stream, void *dst, const void *src, size_t bytes, cudaMemcpyKind k) {
    cudaError_t err = cudaSetDevice(ordinal);
    if (err == cudaSuccess)
        err = cudaMemcpyAsync(dst, src, bytes, k, (cudaStream_t)stream);
    return (int)err;
}

int copy_to_host(int ordinal, void *stream, void *dst, const void *src, size_t bytes) {
    return copy(ordinal, stream, dst, src, bytes, cudaMemcpyDeviceToHost);
}

int copy_to_device(int ordinal, void *stream, void *dst, const void *src, size_t bytes) {
    return copy(ordinal, stream, dst, src, bytes, cudaMemcpyHostToDevice);
}

int add_scaled(int ordinal, void *stream, float *live, const float *d, float scale, size_t n) {
    cudaError_t err = cudaSetDevice(ordinal);
    if (err != cudaSuccess)
        return (int)err;
    return ss__cuda_live_add_scaled(stream, live, d, scale, n);
}

int stream_sync(int ordinal, void *stream) {
    cudaError_t err = cudaSetDevice(ordinal);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize((cudaStream_t)stream);
    return (int)err;
}

int event_create(int ordinal, void **out) {
    cudaEvent_t ev = nullptr;
    cudaError_t err = cudaSetDevice(ordinal);
    if (err == cudaSuccess)
        err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (err == cudaSuccess)
        *out = (void *)ev;
    return (int)err;
}

void event_destroy(int ordinal, void *ev) {
    cudaSetDevice(ordinal);
    cudaEventDestroy((cudaEvent_t)ev);
}

int event_record(int ordinal, void *ev, void *stream) {
    cudaError_t err = cudaSetDevice(ordinal);
    if (err == cudaSuccess)
        err = cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream);
    return (int)err;
}

int event_sync(int ordinal, void *ev) {
    cudaError_t err = cudaSetDevice(ordinal);
    if (err == cudaSuccess)
        err = cudaEventSynchronize((cudaEvent_t)ev);
    return (int)err;
}

static_assert(sizeof(cudaIpcMemHandle_t) == SS_DEVICE_IPC_HANDLE_BYTES,
              "SS_DEVICE_IPC_HANDLE_BYTES is cudaIpcMemHandle_t's size");

int ipc_get(int ordinal, void *p, unsigned char handle[SS_DEVICE_IPC_HANDLE_BYTES]) {
    cudaIpcMemHandle_t h;
    cudaError_t err = cudaSetDevice(ordinal);
    if (err == cudaSuccess)
        err = cudaIpcGetMemHandle(&h, p);
    if (err == cudaSuccess)
        memcpy(handle, &h, sizeof h);
    return (int)err;
}

int ipc_open(int ordinal, const unsigned char handle[SS_DEVICE_IPC_HANDLE_BYTES], void **out) {
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof h);
    cudaError_t err = cudaSetDevice(ordinal);
    if (err == cudaSuccess)
        err = cudaIpcOpenMemHandle(out, h, cudaIpcMemLazyEnablePeerAccess);
    return (int)err;
}

void ipc_close(int ordinal, void *p) {
    cudaSetDevice(ordinal);
    cudaIpcCloseMemHandle(p);
}

} // namespace

extern "C" const ss__device_backend ss__device_backend_cuda = {
    "cuda",         count,         error_string,    device_alloc,  device_free,    host_alloc,
    host_free,      host_register, host_unregister, stream_create, stream_destroy, copy_to_host,
    copy_to_device, add_scaled,    stream_sync,     event_create,  event_destroy,  event_record,
    event_sync,     ipc_get,       ipc_open,        ipc_close,
};
