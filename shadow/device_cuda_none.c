/* The CUDA backend of a build without nvcc: no device, and why. */
#include "shadow/device.h"

static int count(const char **why) {
    *why = "libshadowsync was built without CUDA (CMake found no nvcc, or -DSS_CUDA=OFF)";
    return 0;
}

static const char *error_string(int err) {
    (void)err;
    return "built without CUDA";
}

static int unsupported_alloc(int ordinal, size_t bytes, void **out) {
    (void)ordinal, (void)bytes, (void)out;
    return 1;
}

static void unsupported_free(int ordinal, void *p) {
    (void)ordinal, (void)p;
}

static int unsupported_host_alloc(size_t bytes, void **out) {
    (void)bytes, (void)out;
    return 1;
}

static void unsupported_host_free(void *p) {
    (void)p;
}

static int unsupported_stream(int ordinal, void **out) {
    (void)ordinal, (void)out;
    return 1;
}

static int unsupported_copy(int ordinal, void *stream, void *dst, const void *src, size_t bytes) {
    (void)ordinal, (void)stream, (void)dst, (void)src, (void)bytes;
    return 1;
}

static int unsupported_add(int ordinal, void *stream, float *live, const float *d, float scale,
                           size_t n) {
    (void)ordinal, (void)stream, (void)live, (void)d, (void)scale, (void)n;
    return 1;
}

static int unsupported_sync(int ordinal, void *stream) {
    (void)ordinal, (void)stream;
    return 1;
}

static int unsupported_ipc_get(int ordinal, void *p,
                               unsigned char handle[SS_DEVICE_IPC_HANDLE_BYTES]) {
    (void)ordinal, (void)p, (void)handle;
    return 1;
}

static int unsupported_ipc_open(int ordinal, const unsigned char handle[SS_DEVICE_IPC_HANDLE_BYTES],
                                void **out) {
    (void)ordinal, (void)handle, (void)out;
    return 1;
}

static int unsupported_host_register(void *p, size_t bytes) {
    (void)p, (void)bytes;
    return 1;
}

static int unsupported_event_record(int ordinal, void *ev, void *stream) {
    (void)ordinal, (void)ev, (void)stream;
    return 1;
}

const ss__device_backend ss__device_backend_cuda = {
    .name = "none",
    .count = count,
    .error_string = error_string,
    .device_alloc = unsupported_alloc,
    .device_free = unsupported_free,
    .host_alloc = unsupported_host_alloc,
    .host_free = unsupported_host_free,
    .host_register = unsupported_host_register,
    .host_unregister = unsupported_host_free,
    .stream_create = unsupported_stream,
    .stream_destroy = unsupported_free,
    .copy_to_host = unsupported_copy,
    .copy_to_device = unsupported_copy,
    .add_scaled = unsupported_add,
    .stream_sync = unsupported_sync,
    .event_create = unsupported_stream,
    .event_destroy = unsupported_free,
    .event_record = unsupported_event_record,
    .event_sync = unsupported_sync,
    .ipc_get = unsupported_ipc_get,
    .ipc_open = unsupported_ipc_open,
    .ipc_close = unsupported_free,
};
