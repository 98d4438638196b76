/* A stand-in for the CUDA backend of shadow/device.h, for machines without
 * a GPU: "device" memory is host memory, a stream is a counter, copies are
 * memcpy and the delta kernel a loop. It exercises the device groups'
 * logic (staging, the order of copies and kernel, the engine's and the
 * hooks' device paths, failures) everywhere; the CUDA backend itself runs
 * only where a GPU is (tests/test_device.c's real-device tests). */
#ifndef SS_TESTS_DEVICE_STANDIN_H
#define SS_TESTS_DEVICE_STANDIN_H

#include <stdlib.h>
#include <string.h>

#include "shadow/device.h"

enum { STANDIN_DEVICES = 2, STANDIN_ERR = 7 };

/* Calls seen, and the next call of each kind to fail (0: none). */
static struct {
    int to_host, to_device, kernels, syncs, streams;
    int fail_to_host, fail_kernel;
    int exported, opened, closed; /* CUDA IPC */
    int events;                   /* alive */
    int pinned;                   /* host ranges registered */
    const void *last_upload_from; /* host memory the last upload read */
} standin;

static int standin_count(const char **why) {
    (void)why;
    return STANDIN_DEVICES;
}
static const char *standin_error(int err) {
    return err == STANDIN_ERR ? "stand-in failure injected by the test" : "stand-in error";
}
static int standin_alloc(int ordinal, size_t bytes, void **out) {
    (void)ordinal;
    *out = calloc(1, bytes);
    return *out ? 0 : 2;
}
static void standin_free(int ordinal, void *p) {
    (void)ordinal;
    free(p);
}
static int standin_host_alloc(size_t bytes, void **out) {
    return standin_alloc(0, bytes, out);
}
static void standin_host_free(void *p) {
    free(p);
}
/* Host memory is what it is: registering only counts. */
static int standin_host_register(void *p, size_t bytes) {
    (void)p, (void)bytes;
    standin.pinned++;
    return 0;
}
static void standin_host_unregister(void *p) {
    (void)p;
    standin.pinned--;
}
static int standin_stream(int ordinal, void **out) {
    (void)ordinal;
    standin.streams++;
    *out = &standin;
    return 0;
}
static void standin_stream_destroy(int ordinal, void *s) {
    (void)ordinal, (void)s;
    standin.streams--;
}
static int standin_to_host(int ordinal, void *s, void *dst, const void *src, size_t bytes) {
    (void)ordinal, (void)s;
    if (standin.fail_to_host) {
        standin.fail_to_host = 0;
        return STANDIN_ERR;
    }
    standin.to_host++;
    memcpy(dst, src, bytes);
    return 0;
}
static int standin_to_device(int ordinal, void *s, void *dst, const void *src, size_t bytes) {
    (void)ordinal, (void)s;
    standin.to_device++;
    standin.last_upload_from = src;
    memcpy(dst, src, bytes);
    return 0;
}
static int standin_add_scaled(int ordinal, void *s, float *live, const float *d, float scale,
                              size_t n) {
    (void)ordinal, (void)s;
    if (standin.fail_kernel) {
        standin.fail_kernel = 0;
        return STANDIN_ERR;
    }
    standin.kernels++;
    for (size_t i = 0; i < n; i++)
        live[i] += scale * d[i];
    return 0;
}
static int standin_sync(int ordinal, void *s) {
    (void)ordinal, (void)s;
    standin.syncs++;
    return 0;
}

/* Copies are done when they return: events have nothing to wait for. */
static int standin_event_create(int ordinal, void **out) {
    (void)ordinal;
    *out = &standin;
    standin.events++;
    return 0;
}
static void standin_event_destroy(int ordinal, void *ev) {
    (void)ordinal, (void)ev;
    standin.events--;
}
static int standin_event_record(int ordinal, void *ev, void *s) {
    (void)ordinal, (void)ev, (void)s;
    return 0;
}
static int standin_event_sync(int ordinal, void *ev) {
    (void)ordinal, (void)ev;
    return 0;
}

/* CUDA IPC in one process: the handle carries the pointer. */
static int standin_ipc_get(int ordinal, void *p, unsigned char handle[SS_DEVICE_IPC_HANDLE_BYTES]) {
    (void)ordinal;
    memset(handle, 0, SS_DEVICE_IPC_HANDLE_BYTES);
    memcpy(handle, &p, sizeof p);
    standin.exported++;
    return 0;
}
static int standin_ipc_open(int ordinal, const unsigned char handle[SS_DEVICE_IPC_HANDLE_BYTES],
                            void **out) {
    (void)ordinal;
    memcpy(out, handle, sizeof *out);
    standin.opened++;
    return 0;
}
static void standin_ipc_close(int ordinal, void *p) {
    (void)ordinal, (void)p;
    standin.closed++;
}

static const ss__device_backend standin_backend = {
    .name = "stand-in",
    .count = standin_count,
    .error_string = standin_error,
    .device_alloc = standin_alloc,
    .device_free = standin_free,
    .host_alloc = standin_host_alloc,
    .host_free = standin_host_free,
    .host_register = standin_host_register,
    .host_unregister = standin_host_unregister,
    .stream_create = standin_stream,
    .stream_destroy = standin_stream_destroy,
    .copy_to_host = standin_to_host,
    .copy_to_device = standin_to_device,
    .add_scaled = standin_add_scaled,
    .stream_sync = standin_sync,
    .event_create = standin_event_create,
    .event_destroy = standin_event_destroy,
    .event_record = standin_event_record,
    .event_sync = standin_event_sync,
    .ipc_get = standin_ipc_get,
    .ipc_open = standin_ipc_open,
    .ipc_close = standin_ipc_close,
};

#endif
