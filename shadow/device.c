#include "shadow/device.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/strbuf.h"

struct ss__device_group {
    const ss__device_backend *be;
    int ordinal;
    size_t n;
    float *live;       /* device: the replica the trainer's kernels write */
    bool imported;     /* live is another process's (CUDA IPC): closed, not freed */
    size_t chunk;      /* floats per staging buffer */
    float *scratch[2]; /* device: uploaded delta chunks */
    float *staging[2]; /* pinned host: snapshot chunks down, delta chunks up */
    void *ev[2];       /* recorded after each buffer's last use on the stream */
    void *stream;      /* the shadow pool's: lowest priority, non-blocking */
    /* Page-locked host memory (the engine's round buffers): copies to and
     * from it skip the staging buffers. */
    const float *pinned;
    size_t pinned_floats;
    /* One user of the stream and staging at a time: the pool's round, a
     * read of the group (ss_dense_read, an agent's checkpoint). */
    pthread_mutex_t lock;
    _Atomic uint64_t copy_ns;
};

static _Atomic(const ss__device_backend *) current = NULL;
static _Atomic size_t staging_floats = 0;

void ss__device_set_staging_floats(size_t floats) {
    atomic_store(&staging_floats, floats);
}
static _Thread_local char last_error[256];

const ss__device_backend *ss__device_backend_get(void) {
    const ss__device_backend *b = atomic_load(&current);
    return b ? b : &ss__device_backend_cuda;
}

void ss__device_backend_set(const ss__device_backend *b) {
    atomic_store(&current, b);
}

int ss__device_count(const char **why) {
    const char *unused;
    return ss__device_backend_get()->count(why ? why : &unused);
}

const char *ss__device_last_error(void) {
    return last_error;
}

/* Records a backend failure of `call` on the group's device. */
static ss_status failed(const ss__device_backend *be, int ordinal, const char *call, int err) {
    snprintf(last_error, sizeof last_error, "device %d: %s failed: %s (%s backend)", ordinal, call,
             be->error_string(err), be->name);
    return SS_ERR_IO;
}

/* The checks every group starts with. */
static ss_status check_device(const ss__device_backend *be, int ordinal, size_t n, char *why,
                              size_t whylen) {
    if (n == 0 || ordinal < 0)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                        "device group: n = 0 or a negative device");
    if (n > SIZE_MAX / sizeof(float))
        return ss__fail(why, whylen, SS_ERR_TOO_LARGE, "device group: n floats overflow a size");
    const char *none = "";
    int count = be->count(&none);
    if (count == 0) {
        snprintf(last_error, sizeof last_error, "no CUDA device: %s", none);
        return ss__fail(why, whylen, SS_ERR_UNSUPPORTED, "%s", last_error);
    }
    if (ordinal >= count) {
        snprintf(last_error, sizeof last_error, "device %d: this process sees %d CUDA device%s",
                 ordinal, count, count == 1 ? "" : "s");
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "%s", last_error);
    }
    return SS_OK;
}

/* A group with its live memory from `handle` (CUDA IPC) or, handle NULL,
 * allocated here. */
static ss_status group_create(int ordinal, const unsigned char *handle, size_t n,
                              ss__device_group **out, char *why, size_t whylen) {
    last_error[0] = '\0';
    if (!out)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "device group: nowhere to put it");
    const ss__device_backend *be = ss__device_backend_get();
    ss_status st = check_device(be, ordinal, n, why, whylen);
    if (st != SS_OK)
        return st;
    ss__device_group *g = calloc(1, sizeof *g);
    if (!g)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for a device group");
    g->be = be;
    g->ordinal = ordinal;
    g->n = n;
    pthread_mutex_init(&g->lock, NULL);
    atomic_init(&g->copy_ns, 0);
    const size_t want = atomic_load(&staging_floats);
    g->chunk = want ? want : SS_DEVICE_STAGING_FLOATS;
    if (g->chunk > n)
        g->chunk = n;
    const size_t chunk_bytes = g->chunk * sizeof(float);
    int err;
    if (handle) {
        if ((err = be->ipc_open(ordinal, handle, (void **)&g->live)) != 0)
            st = failed(be, ordinal, "opening the trainer's group (CUDA IPC)", err);
        else
            g->imported = true;
    } else if ((err = be->device_alloc(ordinal, n * sizeof(float), (void **)&g->live)) != 0) {
        st = failed(be, ordinal, "allocating the group", err);
    }
    for (int b = 0; b < 2 && st == SS_OK; b++) {
        if ((err = be->device_alloc(ordinal, chunk_bytes, (void **)&g->scratch[b])) != 0)
            st = failed(be, ordinal, "allocating the delta buffers", err);
        else if ((err = be->host_alloc(chunk_bytes, (void **)&g->staging[b])) != 0)
            st = failed(be, ordinal, "allocating pinned staging", err);
        else if ((err = be->event_create(ordinal, &g->ev[b])) != 0)
            st = failed(be, ordinal, "creating the staging events", err);
    }
    if (st == SS_OK && (err = be->stream_create(ordinal, &g->stream)) != 0)
        st = failed(be, ordinal, "creating the sync stream", err);
    if (st != SS_OK) {
        ss__why(why, whylen, "%s", last_error);
        ss__device_group_destroy(g);
        return st;
    }
    *out = g;
    return SS_OK;
}

ss_status ss__device_group_create(int ordinal, size_t n, ss__device_group **out, char *why,
                                  size_t whylen) {
    return group_create(ordinal, NULL, n, out, why, whylen);
}

ss_status ss__device_group_open_ipc(int ordinal,
                                    const unsigned char handle[SS_DEVICE_IPC_HANDLE_BYTES],
                                    size_t n, ss__device_group **out, char *why, size_t whylen) {
    if (!handle)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "device group: no CUDA IPC handle");
    return group_create(ordinal, handle, n, out, why, whylen);
}

ss_status ss__device_group_ipc_handle(ss__device_group *g,
                                      unsigned char handle[SS_DEVICE_IPC_HANDLE_BYTES]) {
    int err = g->be->ipc_get(g->ordinal, g->live, handle);
    return err == 0 ? SS_OK : failed(g->be, g->ordinal, "exporting the group (CUDA IPC)", err);
}

void ss__device_group_destroy(ss__device_group *g) {
    if (!g)
        return;
    if (g->stream)
        g->be->stream_destroy(g->ordinal, g->stream);
    for (int b = 0; b < 2; b++) {
        if (g->ev[b])
            g->be->event_destroy(g->ordinal, g->ev[b]);
        if (g->staging[b])
            g->be->host_free(g->staging[b]);
        if (g->scratch[b])
            g->be->device_free(g->ordinal, g->scratch[b]);
    }
    if (g->live && g->imported)
        g->be->ipc_close(g->ordinal, g->live);
    else if (g->live)
        g->be->device_free(g->ordinal, g->live);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

float *ss__device_group_data(ss__device_group *g) {
    return g->live;
}

int ss__device_group_ordinal(const ss__device_group *g) {
    return g->ordinal;
}

size_t ss__device_group_size(const ss__device_group *g) {
    return g->n;
}

uint64_t ss__device_group_copy_ns(const ss__device_group *g) {
    return atomic_load_explicit(&g->copy_ns, memory_order_relaxed);
}

static void count_time(ss__device_group *g, uint64_t t0) {
    atomic_fetch_add_explicit(&g->copy_ns, ss__now_ns() - t0, memory_order_relaxed);
}

/* The floats of chunk k: from k * chunk, *len of them. */
static size_t chunk_at(const ss__device_group *g, size_t k, size_t *len) {
    const size_t off = k * g->chunk;
    *len = g->n - off < g->chunk ? g->n - off : g->chunk;
    return off;
}

static size_t chunks(const ss__device_group *g) {
    return (g->n + g->chunk - 1) / g->chunk;
}

ss_status ss__device_group_pin(ss__device_group *g, float *p, size_t floats, ss__device_pin *pin) {
    pin->be = NULL;
    pin->p = NULL;
    if (!p || floats == 0 || floats > SIZE_MAX / sizeof(float))
        return SS_ERR_INVALID_ARGUMENT;
    int err = g->be->host_register(p, floats * sizeof(float));
    if (err != 0)
        return failed(g->be, g->ordinal, "page-locking the round buffers", err);
    pthread_mutex_lock(&g->lock);
    g->pinned = p;
    g->pinned_floats = floats;
    pthread_mutex_unlock(&g->lock);
    pin->be = g->be;
    pin->p = p;
    return SS_OK;
}

void ss__device_unpin(ss__device_pin *pin) {
    if (pin && pin->be && pin->p)
        pin->be->host_unregister(pin->p);
    if (pin)
        pin->p = NULL;
}

/* Whether n floats from p lie in the pinned range (the caller holds the
 * lock). A range unpinned since is still safe to copy: the runtime then
 * stages pageable memory itself. */
static bool in_pinned(const ss__device_group *g, const float *p) {
    return g->pinned && p >= g->pinned && (size_t)(p - g->pinned) <= g->pinned_floats &&
           g->pinned_floats - (size_t)(p - g->pinned) >= g->n;
}

/* After a failure: let what is in flight finish, so that no buffer is
 * still in use when the next call (or destroy) reuses it. */
static int drained(ss__device_group *g, int err) {
    g->be->stream_sync(g->ordinal, g->stream);
    return err;
}

ss_status ss__device_group_snapshot(ss__device_group *g, float *dst) {
    const ss__device_backend *be = g->be;
    const int o = g->ordinal;
    pthread_mutex_lock(&g->lock);
    const uint64_t t0 = ss__now_ns();
    int err = 0;
    const size_t nk = chunks(g);
    const bool direct = in_pinned(g, dst);
    if (direct) { /* straight into the page-locked buffer: one copy */
        err = be->copy_to_host(o, g->stream, dst, g->live, g->n * sizeof(float));
        if (err == 0)
            err = be->stream_sync(o, g->stream);
    }
    /* Else chunk k goes down into staging[k % 2] while the host copies
     * chunk k - 1 out of the other buffer. */
    for (size_t k = 0; !direct && k <= nk && err == 0; k++) {
        size_t len;
        if (k < nk) {
            const size_t off = chunk_at(g, k, &len);
            err = be->copy_to_host(o, g->stream, g->staging[k % 2], g->live + off,
                                   len * sizeof(float));
            if (err == 0)
                err = be->event_record(o, g->ev[k % 2], g->stream);
        }
        if (err == 0 && k > 0) {
            const size_t off = chunk_at(g, k - 1, &len);
            err = be->event_sync(o, g->ev[(k - 1) % 2]);
            if (err == 0)
                memcpy(dst + off, g->staging[(k - 1) % 2], len * sizeof(float));
        }
    }
    if (err != 0)
        drained(g, err);
    count_time(g, t0);
    pthread_mutex_unlock(&g->lock);
    return err == 0 ? SS_OK : failed(be, o, "copying a snapshot to the host", err);
}

/* Uploads src chunk by chunk: into the live group (apply false) or into
 * scratch, applied by the add-scaled kernel. From pinned memory the
 * chunks go straight up, one after the other on the stream (which orders
 * a scratch buffer's reuse after its kernel); else through the staging
 * buffers, each refilled once its last copy is done. */
static int upload(ss__device_group *g, const float *src, bool apply, float scale) {
    const ss__device_backend *be = g->be;
    const int o = g->ordinal;
    const bool direct = in_pinned(g, src);
    int err = 0;
    for (size_t k = 0; k < chunks(g) && err == 0; k++) {
        const int b = (int)(k % 2);
        size_t len;
        const size_t off = chunk_at(g, k, &len);
        const float *from = src + off;
        if (!direct) {
            if (k >= 2) /* chunk k - 2's copy (and kernel) is done with these buffers */
                err = be->event_sync(o, g->ev[b]);
            if (err != 0)
                break;
            memcpy(g->staging[b], src + off, len * sizeof(float));
            from = g->staging[b];
        }
        float *to = apply ? g->scratch[b] : g->live + off;
        err = be->copy_to_device(o, g->stream, to, from, len * sizeof(float));
        if (err == 0 && apply)
            err = be->add_scaled(o, g->stream, g->live + off, g->scratch[b], scale, len);
        if (err == 0)
            err = be->event_record(o, g->ev[b], g->stream);
    }
    /* The staging buffers are reused by the next call: wait here. */
    return err == 0 ? be->stream_sync(o, g->stream) : drained(g, err);
}

ss_status ss__device_group_add_scaled(ss__device_group *g, const float *d, float scale) {
    pthread_mutex_lock(&g->lock);
    const uint64_t t0 = ss__now_ns();
    int err = upload(g, d, true, scale);
    count_time(g, t0);
    pthread_mutex_unlock(&g->lock);
    return err == 0 ? SS_OK : failed(g->be, g->ordinal, "applying a delta", err);
}

ss_status ss__device_group_upload(ss__device_group *g, const float *src) {
    pthread_mutex_lock(&g->lock);
    int err = upload(g, src, false, 0.0f);
    pthread_mutex_unlock(&g->lock);
    return err == 0 ? SS_OK : failed(g->be, g->ordinal, "uploading initial values", err);
}
