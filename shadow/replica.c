#include "shadow/replica.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"
#include "shadow/kernels.h"

struct ss__replica {
    float *data;              /* host memory, or NULL */
    ss__device_group *device; /* GPU memory, or NULL */
    size_t n;
    bool owned;
    /* &own_iterations, or a counter in memory shared with another process
     * (agent mode: the trainer ticks, the agent reads). */
    _Atomic uint64_t *iterations;
    /* Own cache line: workers tick it every step and must not false-share
     * with the struct's read-mostly fields. */
    _Alignas(64) _Atomic uint64_t own_iterations;
};

ss_status ss__replica_create(size_t n, ss__replica **out, char *why, size_t whylen) {
    if (!out || n == 0)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "a replica needs at least one float");
    ss__replica *r = aligned_alloc(64, sizeof *r);
    if (!r)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for a replica");
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    float *data = aligned_alloc(64, bytes);
    if (!data) {
        free(r);
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for a replica of %zu floats", n);
    }
    memset(data, 0, bytes);
    r->data = data;
    r->device = NULL;
    r->n = n;
    r->owned = true;
    atomic_init(&r->own_iterations, 0);
    r->iterations = &r->own_iterations;
    *out = r;
    return SS_OK;
}

ss_status ss__replica_wrap(float *data, size_t n, ss__replica **out) {
    return ss__replica_wrap_shared(data, n, NULL, out);
}

ss_status ss__replica_wrap_shared(float *data, size_t n, _Atomic uint64_t *iterations,
                                  ss__replica **out) {
    if (!out || !data || n == 0)
        return SS_ERR_INVALID_ARGUMENT;
    ss__replica *r = aligned_alloc(64, sizeof *r);
    if (!r)
        return SS_ERR_NO_MEMORY;
    r->data = data;
    r->device = NULL;
    r->n = n;
    r->owned = false;
    atomic_init(&r->own_iterations, 0);
    r->iterations = iterations ? iterations : &r->own_iterations;
    *out = r;
    return SS_OK;
}

/* A replica around a device group: one allocated here, or with handle
 * another process's opened (CUDA IPC). */
static ss_status device_replica(int ordinal, const unsigned char *handle, size_t n,
                                _Atomic uint64_t *iterations, ss__replica **out, char *why,
                                size_t whylen) {
    if (!out || n == 0)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "a replica needs at least one float");
    ss__replica *r = aligned_alloc(64, sizeof *r);
    if (!r)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for a replica");
    ss_status st = handle ? ss__device_group_open_ipc(ordinal, handle, n, &r->device, why, whylen)
                          : ss__device_group_create(ordinal, n, &r->device, why, whylen);
    if (st != SS_OK) {
        free(r);
        return st;
    }
    r->data = NULL;
    r->n = n;
    r->owned = true;
    atomic_init(&r->own_iterations, 0);
    r->iterations = iterations ? iterations : &r->own_iterations;
    *out = r;
    return SS_OK;
}

ss_status ss__replica_create_device(int ordinal, size_t n, _Atomic uint64_t *iterations,
                                    ss__replica **out, char *why, size_t whylen) {
    return device_replica(ordinal, NULL, n, iterations, out, why, whylen);
}

ss_status ss__replica_open_device_ipc(int ordinal,
                                      const unsigned char handle[SS_DEVICE_IPC_HANDLE_BYTES],
                                      size_t n, _Atomic uint64_t *iterations, ss__replica **out,
                                      char *why, size_t whylen) {
    if (!handle)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "no CUDA IPC handle");
    return device_replica(ordinal, handle, n, iterations, out, why, whylen);
}

void ss__replica_destroy(ss__replica *r) {
    if (!r)
        return;
    if (r->owned)
        free(r->data);
    ss__device_group_destroy(r->device);
    free(r);
}

float *ss__replica_data(ss__replica *r) {
    return r->data;
}

ss__device_group *ss__replica_device(ss__replica *r) {
    return r->device;
}

ss_status ss__replica_snapshot(ss__replica *r, float *dst) {
    if (r->device)
        return ss__device_group_snapshot(r->device, dst);
    ss__kernel_live_snapshot(dst, r->data, r->n);
    return SS_OK;
}

ss_status ss__replica_add_scaled(ss__replica *r, const float *d, float scale) {
    if (r->device)
        return ss__device_group_add_scaled(r->device, d, scale);
    ss__kernel_live_add_scaled(r->data, d, scale, r->n);
    return SS_OK;
}

ss_status ss__replica_load(ss__replica *r, const float *src) {
    if (r->device)
        return ss__device_group_upload(r->device, src);
    memcpy(r->data, src, r->n * sizeof(float));
    return SS_OK;
}

size_t ss__replica_size(const ss__replica *r) {
    return r->n;
}

void ss__replica_tick(ss__replica *r, uint64_t n) {
    atomic_fetch_add_explicit(r->iterations, n, memory_order_relaxed);
}

uint64_t ss__replica_iterations(const ss__replica *r) {
    return atomic_load_explicit(r->iterations, memory_order_relaxed);
}
