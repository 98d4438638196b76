/* Device groups: a replica in GPU memory (docs/gpu.md).
 *
 * The trainer's kernels update the group on their own streams (Hogwild on
 * the device). The shadow pool touches it only here, on a stream of its
 * own created at the lowest priority and non-blocking (it never
 * synchronizes with the legacy default stream), so a training step never
 * waits for a round:
 *   - a snapshot is copied device -> host on that stream;
 *   - a delta is uploaded to a device scratch buffer and applied by the
 *     add-scaled kernel (shadow/kernels_cuda.cu), all on that stream.
 * The engine's round buffers are page-locked (ss__device_group_pin), so
 * its copies go straight to and from them. Other host memory (a user's
 * ss_dense_read) goes by chunks through two pinned staging buffers of
 * SS_DEVICE_STAGING_FLOATS each, the host's copy of one chunk
 * overlapping the DMA of the next. Either way a group of any size costs
 * 2 chunks of device scratch (and 2 of pinned staging) beside it.
 *
 * The CUDA calls go through a backend table, so that the group logic is
 * one piece of C: the CUDA runtime's (shadow/device_cuda.cu, built where
 * CMake finds nvcc; shadow/device_cuda_none.c otherwise, which says why
 * there is no device), or a stand-in that the tests install to exercise
 * this logic on machines without a GPU. */
#ifndef SHADOWSYNC_DEVICE_H
#define SHADOWSYNC_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "shadowsync/status.h"

#ifdef __cplusplus
extern "C" { /* shadow/device_cuda.cu defines the CUDA backend */
#endif

/* cudaIpcMemHandle_t's size. */
#define SS_DEVICE_IPC_HANDLE_BYTES 64

/* What a device backend provides. Every call returns 0 on success or a
 * backend error code that error_string() explains. Streams and device
 * pointers are opaque to the group logic. */
typedef struct ss__device_backend {
    const char *name;
    /* Devices usable by this process; 0 with *why set when none. */
    int (*count)(const char **why);
    const char *(*error_string)(int err);
    int (*device_alloc)(int ordinal, size_t bytes, void **out); /* zeroed */
    void (*device_free)(int ordinal, void *p);
    int (*host_alloc)(size_t bytes, void **out); /* pinned */
    void (*host_free)(void *p);
    /* Page-lock (and release) memory the host allocated, for DMA. */
    int (*host_register)(void *p, size_t bytes);
    void (*host_unregister)(void *p);
    int (*stream_create)(int ordinal, void **out); /* lowest priority, non-blocking */
    void (*stream_destroy)(int ordinal, void *stream);
    int (*copy_to_host)(int ordinal, void *stream, void *dst, const void *src, size_t bytes);
    int (*copy_to_device)(int ordinal, void *stream, void *dst, const void *src, size_t bytes);
    /* live[i] += scale * d[i] on the device (the delta kernel). */
    int (*add_scaled)(int ordinal, void *stream, float *live, const float *d, float scale,
                      size_t n);
    int (*stream_sync)(int ordinal, void *stream);
    /* Events on the stream: the staging buffers' pipeline waits for one
     * chunk's copy while the next is in flight. */
    int (*event_create)(int ordinal, void **out);
    void (*event_destroy)(int ordinal, void *ev);
    int (*event_record)(int ordinal, void *ev, void *stream);
    int (*event_sync)(int ordinal, void *ev);
    /* CUDA IPC: a handle to device memory another process can open (the
     * agent, for a trainer's group), open it there, close it. */
    int (*ipc_get)(int ordinal, void *p, unsigned char handle[SS_DEVICE_IPC_HANDLE_BYTES]);
    int (*ipc_open)(int ordinal, const unsigned char handle[SS_DEVICE_IPC_HANDLE_BYTES],
                    void **out);
    void (*ipc_close)(int ordinal, void *p);
} ss__device_backend;

/* The CUDA runtime's backend (or, without CUDA, one whose count() is 0
 * and says the library was built without it). */
extern const ss__device_backend ss__device_backend_cuda;

/* The backend new groups use: ss__device_backend_cuda unless a test
 * installed another (before creating any group). */
const ss__device_backend *ss__device_backend_get(void);
void ss__device_backend_set(const ss__device_backend *b);

/* Floats per staging buffer (two per group): 1M (4 MB). Tests set a
 * smaller one, before creating groups, to make several chunks. */
#define SS_DEVICE_STAGING_FLOATS ((size_t)1 << 20)
void ss__device_set_staging_floats(size_t floats); /* 0: the default */

/* Usable devices of the current backend; 0 with *why (static text). */
int ss__device_count(const char **why);

typedef struct ss__device_group ss__device_group;

/* n floats on device `ordinal`, zeroed, with the shadow pool's stream,
 * staging and scratch buffers. A failure says why (the device and the
 * call). */
ss_status ss__device_group_create(int ordinal, size_t n, ss__device_group **out, char *why,
                                  size_t whylen);
/* A group over device memory another process exported (CUDA IPC: the
 * agent opening a trainer's group), with a stream, staging and scratch of
 * its own; destroy closes the mapping, the memory stays the exporter's. */
ss_status ss__device_group_open_ipc(int ordinal,
                                    const unsigned char handle[SS_DEVICE_IPC_HANDLE_BYTES],
                                    size_t n, ss__device_group **out, char *why, size_t whylen);
/* The handle another process opens the group's memory with. */
ss_status ss__device_group_ipc_handle(ss__device_group *g,
                                      unsigned char handle[SS_DEVICE_IPC_HANDLE_BYTES]);
void ss__device_group_destroy(ss__device_group *g);

float *ss__device_group_data(ss__device_group *g); /* a device pointer */
int ss__device_group_ordinal(const ss__device_group *g);
size_t ss__device_group_size(const ss__device_group *g);

/* Page-locks [p, p + floats): the engine's round buffers. A snapshot into
 * or a delta from that range then goes straight between the device and
 * that memory on the group's stream, without the staging buffers and
 * their host copies (a round's copies run at the link's pinned rate). One
 * range per group. A failure (a memlock limit) leaves the staged path,
 * which is as correct. The pin outlives neither the memory nor the
 * backend: ss__device_unpin it before freeing p; it needs no group. */
typedef struct ss__device_pin {
    const ss__device_backend *be;
    void *p;
} ss__device_pin;
ss_status ss__device_group_pin(ss__device_group *g, float *p, size_t floats, ss__device_pin *pin);
void ss__device_unpin(ss__device_pin *pin); /* an empty pin: nothing */

/* The live group -> dst (n host floats), on the group's stream. */
ss_status ss__device_group_snapshot(ss__device_group *g, float *dst);
/* live += scale * d (d: n host floats), on the group's stream. */
ss_status ss__device_group_add_scaled(ss__device_group *g, const float *d, float scale);
/* The whole group <- src (n host floats): initial values. */
ss_status ss__device_group_upload(ss__device_group *g, const float *src);

/* Nanoseconds spent in copies between host and device, and in the delta
 * kernel, since creation (the shadow pool's share of a round). */
uint64_t ss__device_group_copy_ns(const ss__device_group *g);
/* Why the last failed call of this thread failed ("" if none). */
const char *ss__device_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
