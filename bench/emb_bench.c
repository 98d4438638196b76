/* shadowsync-bench-emb: batched embedding lookups and gradient pushes
 * (batch of distinct ids, dim floats per row) timed three ways in one run:
 *   inproc - the store's own code in this process, no RPC (the limit);
 *   tcp    - the same store served by a thread of this process over a
 *            plain loopback TCP socket, one request and its reply at a
 *            time (ids in, rows out; no gRPC, no protobuf, no checks): the
 *            floor of any serial remote lookup on this machine;
 *   grpc   - one running shadowsync-ps shard over gRPC (--ps);
 *   redis  - a running Redis server (--redis), rows as binary strings,
 *            lookup = MGET, push = MSET of the updated rows (a Redis user
 *            applies the optimizer client-side; it has no atomic update).
 *   gather - the floor under inproc: the same ids read from (lookups) and
 *            SGD-updated in (pushes) one flat array of rows indexed by id,
 *            no hash, no lock, no checks;
 *   indexed - the same rows found through an open-addressing index of
 *            (id, row) slots: the floor of any store whose ids are not
 *            0..n-1 (one more cache miss a row);
 * gather, indexed and inproc take turns over slices of the batches (see
 * SLICES), each on rows of its own.
 * Also the resident memory per million rows of the in-process store
 * against the raw row bytes. */
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fd_io.h"
#include "common/flags.h"
#include "common/hash.h"
#include "common/names.h"
#include "common/shard_map.h"
#include "embedding-store/emb_store.h"
#include "rpc/dense/grpc_transport.h"
#include "rpc/emb/emb_client.h"
#include "rpc/rpc.h"

/* What --help and --version say. */
static const ss__program program = {
    "shadowsync-bench-emb", "Times batched embedding lookups and gradient pushes in process (the "
                            "limit),\nthrough one shadowsync-ps shard over gRPC and against Redis "
                            "(MGET/MSET), and\nprints the ratios and the memory per million rows."};

typedef struct bench {
    int64_t rows, batch, dim, reps;
    uint64_t *ids; /* reps * batch ids, each batch distinct */
    float *buf, *grads;
    ss__emb_spec spec;
    ss__rpc_tls tls;       /* to the PS; NULL ca_file: plain */
    const char *shard_map; /* the PS's map, routed by ("": none) */
} bench;

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

static uint64_t rng_next(uint64_t *s) {
    *s += SS_GOLDEN64;
    return ss__mix64(*s);
}

/* Each batch: a random window of a random permutation, so ids are
 * distinct within a batch and spread over all rows. */
static void make_batches(bench *b) {
    uint64_t *perm = malloc((size_t)b->rows * sizeof *perm), s = 7;
    for (int64_t i = 0; i < b->rows; i++)
        perm[i] = (uint64_t)i;
    for (int64_t i = b->rows - 1; i > 0; i--) {
        int64_t j = (int64_t)(rng_next(&s) % (uint64_t)(i + 1));
        uint64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int64_t r = 0; r < b->reps; r++) {
        int64_t off = (int64_t)(rng_next(&s) % (uint64_t)(b->rows - b->batch + 1));
        memcpy(b->ids + r * b->batch, perm + off, (size_t)b->batch * sizeof *perm);
    }
    free(perm);
}

typedef struct result {
    double lookup_s, push_s; /* seconds per batch (while timing: seconds in all) */
} result;

/* The in-process runs (gather, indexed, inproc) take turns in this many
 * slices of the batches, so that a machine whose speed drifts during
 * the run (a shared host) slows all three alike: timed one after the
 * other, the gather floor alone moved 1.7x between runs. */
#define SLICES 12

/* Batches [k0, k1) of slice i of SLICES. */
static void slice_of(const bench *b, int i, int64_t *k0, int64_t *k1) {
    *k0 = b->reps * i / SLICES;
    *k1 = b->reps * (i + 1) / SLICES;
}

/* Seconds in all into seconds per batch. */
static void per_batch(const bench *b, result *r) {
    r->lookup_s /= (double)b->reps;
    r->push_s /= (double)b->reps;
}

static void report(const char *name, const result *r, const bench *b) {
    printf("%-7s lookups: %8.0f batches/s %11.0f rows/s   pushes: %8.0f batches/s %11.0f rows/s\n",
           name, 1.0 / r->lookup_s, (double)b->batch / r->lookup_s, 1.0 / r->push_s,
           (double)b->batch / r->push_s);
}

/* "ratio a/b": r's speed over base's (base's seconds per
 * batch over r's). */
static void ratio(const char *name, const result *base, const result *r) {
    printf("ratio %s: lookups %.3f pushes %.3f\n", name, base->lookup_s / r->lookup_s,
           base->push_s / r->push_s);
}

/* The store, every row resident, into *out (left open for the tcp run). */
static int open_inproc(bench *b, ss__emb_store **out) {
    ss__emb_store_config cfg = {.max_batch = (size_t)b->batch};
    ss__emb_store *st;
    if (ss__emb_store_create(&cfg, &st, NULL, 0) != SS_OK ||
        ss__emb_store_open_table(st, &b->spec, NULL, NULL, 0) != SS_OK)
        return -1;
    long rss0 = rss_kb();
    uint64_t *ids = malloc((size_t)b->batch * sizeof *ids);
    for (int64_t off = 0; off < b->rows; off += b->batch) {
        int64_t n = b->rows - off < b->batch ? b->rows - off : b->batch;
        for (int64_t i = 0; i < n; i++)
            ids[i] = (uint64_t)(off + i);
        /* A zero gradient makes each row resident at its initial value
         * (a lookup keeps nothing: readers cannot grow the store). */
        memset(b->buf, 0, (size_t)n * (size_t)b->dim * sizeof(float));
        ss__emb_store_push(st, b->spec.name, ids, (size_t)n, b->buf, NULL, 0);
    }
    long rss1 = rss_kb();
    free(ids);
    double raw = (double)b->dim * 4.0;
    double per_row = (double)(rss1 - rss0) * 1024.0 / (double)b->rows;
    printf("memory: %lld rows of dim %lld in the in-process store: RSS +%.1f MiB = %.1f B/row "
           "(%.1f MiB per million rows) against %.0f B/row raw: x%.2f\n",
           (long long)b->rows, (long long)b->dim, (double)(rss1 - rss0) / 1024.0, per_row,
           per_row * 1e6 / 1048576.0, raw, per_row / raw);
    *out = st;
    return 0;
}

/* Lookups and pushes of batches [k0, k1) in the store, their seconds
 * added to r. */
static int time_inproc(bench *b, ss__emb_store *st, int64_t k0, int64_t k1, result *r) {
    uint64_t t0 = ss__now_ns();
    for (int64_t k = k0; k < k1; k++)
        if (ss__emb_store_lookup(st, b->spec.name, b->ids + k * b->batch, (size_t)b->batch, b->buf,
                                 NULL, 0) != SS_OK)
            return -1;
    uint64_t t1 = ss__now_ns();
    for (int64_t k = k0; k < k1; k++)
        if (ss__emb_store_push(st, b->spec.name, b->ids + k * b->batch, (size_t)b->batch, b->grads,
                               NULL, 0) != SS_OK)
            return -1;
    uint64_t t2 = ss__now_ns();
    r->lookup_s += (double)(t1 - t0) / 1e9;
    r->push_s += (double)(t2 - t1) / 1e9;
    return 0;
}

/* All of n bytes read (or written); false at EOF or an error. */
static bool io_all(int fd, void *p, size_t n, bool write_it) {
    return write_it ? ss__write_all(fd, p, n) : ss__read_all(fd, p, n);
}

typedef struct tcp_server {
    bench *b;
    ss__emb_store *st;
    int lfd;
} tcp_server;

/* One client: requests "op n" then n ids (and, op 1, n rows of
 * gradients); a lookup is answered with its rows, a push with one byte. */
static void *tcp_serve(void *arg) {
    tcp_server *t = arg;
    const size_t rowb = (size_t)t->b->dim * sizeof(float), max = (size_t)t->b->batch;
    int fd = accept(t->lfd, NULL, NULL), one = 1;
    uint64_t *ids = malloc(max * sizeof *ids);
    float *rows = malloc(max * rowb);
    uint32_t head[2];
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    while (fd >= 0 && ids && rows && io_all(fd, head, sizeof head, false) && head[1] <= max &&
           io_all(fd, ids, head[1] * sizeof *ids, false)) {
        bool ok = head[0] == 0 ? ss__emb_store_lookup(t->st, t->b->spec.name, ids, head[1], rows,
                                                      NULL, 0) == SS_OK &&
                                     io_all(fd, rows, head[1] * rowb, true)
                               : io_all(fd, rows, head[1] * rowb, false) &&
                                     ss__emb_store_push(t->st, t->b->spec.name, ids, head[1], rows,
                                                        NULL, 0) == SS_OK &&
                                     io_all(fd, &(char){1}, 1, true);
        if (!ok)
            break;
    }
    free(ids);
    free(rows);
    if (fd >= 0)
        close(fd);
    return NULL;
}

static bool tcp_call(int fd, uint32_t op, const uint64_t *ids, uint32_t n, float *rows,
                     size_t rowb) {
    uint32_t head[2] = {op, n};
    char ack;
    return io_all(fd, head, sizeof head, true) && io_all(fd, (void *)ids, n * sizeof *ids, true) &&
           (op == 0 ? io_all(fd, rows, n * rowb, false)
                    : io_all(fd, rows, n * rowb, true) && io_all(fd, &ack, 1, false));
}

static int run_tcp(bench *b, ss__emb_store *st, result *r) {
    char why[200], addr[32];
    int port = 0;
    tcp_server t = {b, st, ss__tcp_listen("127.0.0.1:0", &port, why, sizeof why)};
    if (t.lfd < 0)
        return -1;
    pthread_t th;
    pthread_create(&th, NULL, tcp_serve, &t);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    int fd = ss__tcp_connect(addr, 5000, why, sizeof why), one = 1, bad = fd < 0;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const size_t rowb = (size_t)b->dim * sizeof(float);
    const uint32_t n = (uint32_t)b->batch;
    uint64_t t0 = ss__now_ns();
    for (int64_t k = 0; !bad && k < b->reps; k++)
        bad = !tcp_call(fd, 0, b->ids + k * b->batch, n, b->buf, rowb);
    uint64_t t1 = ss__now_ns();
    for (int64_t k = 0; !bad && k < b->reps; k++)
        bad = !tcp_call(fd, 1, b->ids + k * b->batch, n, b->grads, rowb);
    uint64_t t2 = ss__now_ns();
    if (fd >= 0)
        close(fd);              /* the server's read ends */
    shutdown(t.lfd, SHUT_RDWR); /* or its accept, when the connect failed */
    pthread_join(th, NULL);
    close(t.lfd);
    r->lookup_s = (double)(t1 - t0) / 1e9 / (double)b->reps;
    r->push_s = (double)(t2 - t1) / 1e9 / (double)b->reps;
    return bad ? -1 : 0;
}

/* Rows ahead that the flat-array loops prefetch (as the store does). */
#define GATHER_AHEAD 16

static void prefetch_lines(const void *p, size_t bytes) {
    for (size_t off = 0; off < bytes; off += 64)
        __builtin_prefetch((const char *)p + off);
}

/* An index from id to row, as any store of ids that are not 0..n-1 needs:
 * open addressing, one 16-byte slot per id (id, row), linear probing. */
typedef struct index_slot {
    uint64_t id;
    float *row;
} index_slot;

typedef struct row_index {
    index_slot *slots;
    size_t mask;
} row_index;

static inline size_t home_slot(const row_index *x, uint64_t id) {
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 17) & x->mask;
}

/* Every id asked for is in the index: the probe ends. */
static inline float *indexed_row(const row_index *x, uint64_t id) {
    size_t s = home_slot(x, id);
    while (x->slots[s].id != id)
        s = (s + 1) & x->mask;
    return x->slots[s].row;
}

/* The row of id: in the flat array by position (x NULL), else through x. */
static inline float *row_at(float *rows, size_t dim, const row_index *x, uint64_t id) {
    return x ? indexed_row(x, id) : rows + id * dim;
}

/* Software prefetch ahead, as the store's own loop does: the slot two
 * windows ahead (indexed), the row one window ahead. */
static inline void prefetch_ahead(float *rows, size_t dim, const row_index *x, const uint64_t *ids,
                                  int64_t i, int64_t n) {
    if (x && i + 2 * GATHER_AHEAD < n)
        __builtin_prefetch(&x->slots[home_slot(x, ids[i + 2 * GATHER_AHEAD])]);
    if (i + GATHER_AHEAD < n)
        prefetch_lines(row_at(rows, dim, x, ids[i + GATHER_AHEAD]), dim * sizeof *rows);
}

/* Lookups (copies out) and SGD pushes of batches [k0, k1), their
 * seconds added to r. */
static void time_rows(bench *b, float *rows, const row_index *x, int64_t k0, int64_t k1,
                      result *r) {
    const size_t dim = (size_t)b->dim;
    uint64_t t0 = ss__now_ns();
    for (int64_t k = k0; k < k1; k++) {
        const uint64_t *ids = b->ids + k * b->batch;
        for (int64_t i = 0; i < b->batch; i++) {
            prefetch_ahead(rows, dim, x, ids, i, b->batch);
            memcpy(b->buf + i * b->dim, row_at(rows, dim, x, ids[i]), dim * sizeof *rows);
        }
    }
    uint64_t t1 = ss__now_ns();
    const float lr = b->spec.lr;
    for (int64_t k = k0; k < k1; k++) {
        const uint64_t *ids = b->ids + k * b->batch;
        for (int64_t i = 0; i < b->batch; i++) {
            prefetch_ahead(rows, dim, x, ids, i, b->batch);
            float *restrict row = row_at(rows, dim, x, ids[i]);
            const float *restrict g = b->grads + i * b->dim;
            for (size_t j = 0; j < dim; j++)
                row[j] -= lr * g[j];
        }
    }
    uint64_t t2 = ss__now_ns();
    r->lookup_s += (double)(t1 - t0) / 1e9;
    r->push_s += (double)(t2 - t1) / 1e9;
}

/* The flat array (what a random gather of the same rows costs at most)
 * and a copy of it found through an index (the floor of any store that
 * maps ids to rows). A copy: with one array for both, the indexed run's
 * slice found the rows the gather's slice had just brought into cache
 * and ran faster than the gather (1.27-1.37 of it). */
typedef struct floors {
    float *rows, *xrows;
    row_index x;
} floors;

static void close_floors(floors *f) {
    free(f->rows);
    free(f->xrows);
    free(f->x.slots);
}

static int open_floors(bench *b, floors *f) {
    const size_t dim = (size_t)b->dim, n = (size_t)b->rows;
    size_t cap = 1;
    while (cap < 2 * n)
        cap *= 2;
    *f = (floors){malloc(n * dim * sizeof *f->rows),
                  malloc(n * dim * sizeof *f->rows),
                  {calloc(cap, sizeof *f->x.slots), cap - 1}};
    if (!f->rows || !f->xrows || !f->x.slots) {
        close_floors(f);
        return -1;
    }
    for (size_t i = 0; i < n * dim; i++)
        f->rows[i] = f->xrows[i] = (float)(i % 13) * 0.01f;
    for (size_t s = 0; s < cap; s++)
        f->x.slots[s].id = UINT64_MAX;
    for (size_t id = 0; id < n; id++) {
        size_t s = home_slot(&f->x, id);
        while (f->x.slots[s].id != UINT64_MAX)
            s = (s + 1) & f->x.mask;
        f->x.slots[s] = (index_slot){id, f->xrows + id * dim};
    }
    return 0;
}

/* gather, indexed and inproc, taking turns slice by slice (SLICES); the
 * store is left open in *st for the tcp run. */
static int run_in_process(bench *b, result *ga, result *gi, result *in, ss__emb_store **st) {
    floors f;
    if (open_floors(b, &f) != 0) {
        fprintf(stderr, "shadowsync-bench-emb: no memory for %lld rows of %lld floats\n",
                (long long)b->rows, (long long)b->dim);
        return -1;
    }
    int bad = open_inproc(b, st);
    *ga = *gi = *in = (result){0};
    /* Each slice starts with another of the three: the first reads the
     * slice's ids and gradients into cache for the others. */
    for (int i = 0; !bad && i < SLICES; i++) {
        int64_t k0, k1;
        slice_of(b, i, &k0, &k1);
        for (int turn = 0; !bad && turn < 3; turn++) {
            const int who = (i + turn) % 3;
            if (who == 0)
                time_rows(b, f.rows, NULL, k0, k1, ga);
            else if (who == 1)
                time_rows(b, f.xrows, &f.x, k0, k1, gi);
            else
                bad = time_inproc(b, *st, k0, k1, in);
        }
    }
    close_floors(&f);
    if (bad) {
        fprintf(stderr, "shadowsync-bench-emb: in-process run failed\n");
        return -1;
    }
    per_batch(b, ga);
    per_batch(b, gi);
    per_batch(b, in);
    return 0;
}

/* Through the PS: over gRPC only, or (bulk) the library's default way
 * (its bulk stream when it has one), the rows already resident from the
 * gRPC run. */
/* A client of the PS at ps: b's TLS and shard map (its epoch), and the
 * streams on or off; NULL when it cannot reach it (said). */
static ss__emb_client *bench_client(const bench *b, const char *ps, bool bulk) {
    ss__shard_map map = {.epoch = 0};
    ss__emb_client *c = NULL;
    ss_status st = *b->shard_map ? ss__shard_map_read(b->shard_map, &map, NULL, 0) : SS_OK;
    if (st == SS_OK)
        st = ss__emb_client_create(ps, b->tls.ca_file ? &b->tls : NULL, 30000, &c, NULL, 0);
    if (st == SS_OK) {
        ss__emb_client_set_epoch(c, map.epoch);
        if (*b->shard_map)
            st = ss__emb_client_follow_map(c, b->shard_map);
    }
    if (st == SS_OK)
        st = ss__emb_client_use_bulk(c, bulk);
    if (st == SS_OK)
        st = ss__emb_client_open_table(c, &b->spec, NULL, NULL, 0);
    if (st != SS_OK) {
        fprintf(stderr, "shadowsync-bench-emb: cannot reach %s: %s\n", ps, ss_strerror(st));
        ss__emb_client_destroy(c);
        return NULL;
    }
    return c;
}

static int run_grpc(bench *b, const char *ps, bool bulk, result *r) {
    ss__emb_client *c = bench_client(b, ps, bulk);
    if (!c)
        return -1;
    uint64_t *ids = malloc((size_t)b->batch * sizeof *ids);
    for (int64_t off = 0; !bulk && off < b->rows; off += b->batch) { /* every row resident */
        int64_t n = b->rows - off < b->batch ? b->rows - off : b->batch;
        for (int64_t i = 0; i < n; i++)
            ids[i] = (uint64_t)(off + i);
        memset(b->buf, 0, (size_t)n * (size_t)b->dim * sizeof(float)); /* zero gradients */
        ss__emb_client_push(c, &b->spec, ids, (size_t)n, b->buf);
    }
    free(ids);
    uint64_t t0 = ss__now_ns();
    for (int64_t k = 0; k < b->reps; k++)
        if (ss__emb_client_lookup(c, &b->spec, b->ids + k * b->batch, (size_t)b->batch, b->buf) !=
            SS_OK)
            return -1;
    uint64_t t1 = ss__now_ns();
    for (int64_t k = 0; k < b->reps; k++)
        if (ss__emb_client_push(c, &b->spec, b->ids + k * b->batch, (size_t)b->batch, b->grads) !=
            SS_OK)
            return -1;
    uint64_t t2 = ss__now_ns();
    r->lookup_s = (double)(t1 - t0) / 1e9 / (double)b->reps;
    r->push_s = (double)(t2 - t1) / 1e9 / (double)b->reps;
    const uint64_t on_streams = ss__emb_client_bulk_batches(c);
    ss__emb_client_destroy(c);
    if (bulk && on_streams < 2 * (uint64_t)b->reps)
        printf("note: the default path went over gRPC: %s has no bulk port\n", ps);
    return 0;
}

/* One command with argc = 1 + n (MGET) or 1 + 2n (MSET), binary-safe. */
static redisReply *redis_batch(redisContext *rc, int set, const uint64_t *ids, int64_t n,
                               const float *rows, int64_t dim, char *keys, const char **argv,
                               size_t *argl) {
    int argc = 0;
    argv[argc] = set ? "MSET" : "MGET";
    argl[argc++] = 4;
    for (int64_t i = 0; i < n; i++) {
        char *k = keys + i * 24;
        argl[argc] = (size_t)snprintf(k, 24, "e:%llu", (unsigned long long)ids[i]);
        argv[argc++] = k;
        if (set) {
            argv[argc] = (const char *)(rows + i * dim);
            argl[argc++] = (size_t)dim * sizeof(float);
        }
    }
    return redisCommandArgv(rc, argc, argv, argl);
}

static int run_redis(bench *b, const char *addr, result *r) {
    char host[256];
    unsigned port = 0;
    if (!ss__address_split(addr, host, sizeof host, &port)) {
        fprintf(stderr, "shadowsync-bench-emb: --redis %s: not host:port\n", addr);
        return -1;
    }
    redisContext *rc = redisConnect(host, (int)port);
    if (!rc || rc->err) {
        fprintf(stderr, "shadowsync-bench-emb: cannot reach redis at %s\n", addr);
        return -1;
    }
    char *keys = malloc((size_t)b->batch * 24);
    const char **argv = malloc((size_t)(2 * b->batch + 1) * sizeof *argv);
    size_t *argl = malloc((size_t)(2 * b->batch + 1) * sizeof *argl);
    uint64_t *ids = malloc((size_t)b->batch * sizeof *ids);
    for (int64_t off = 0; off < b->rows; off += b->batch) { /* the same rows, stored */
        int64_t n = b->rows - off < b->batch ? b->rows - off : b->batch;
        for (int64_t i = 0; i < n; i++)
            ids[i] = (uint64_t)(off + i);
        freeReplyObject(redis_batch(rc, 1, ids, n, b->grads, b->dim, keys, argv, argl));
    }
    free(ids);
    int ok = 0;
    uint64_t t0 = ss__now_ns();
    for (int64_t k = 0; k < b->reps; k++) {
        redisReply *rep =
            redis_batch(rc, 0, b->ids + k * b->batch, b->batch, NULL, b->dim, keys, argv, argl);
        if (rep && rep->type == REDIS_REPLY_ARRAY && (int64_t)rep->elements == b->batch) {
            for (int64_t i = 0; i < b->batch; i++)
                if (rep->element[i]->type == REDIS_REPLY_STRING)
                    memcpy(b->buf + i * b->dim, rep->element[i]->str, rep->element[i]->len);
            ok++;
        }
        freeReplyObject(rep);
    }
    uint64_t t1 = ss__now_ns();
    for (int64_t k = 0; k < b->reps; k++) {
        /* the optimizer on the client (SGD), then the rows back */
        for (int64_t i = 0; i < b->batch * b->dim; i++)
            b->buf[i] -= 0.01f * b->grads[i];
        redisReply *rep =
            redis_batch(rc, 1, b->ids + k * b->batch, b->batch, b->buf, b->dim, keys, argv, argl);
        ok += rep && rep->type == REDIS_REPLY_STATUS;
        freeReplyObject(rep);
    }
    uint64_t t2 = ss__now_ns();
    r->lookup_s = (double)(t1 - t0) / 1e9 / (double)b->reps;
    r->push_s = (double)(t2 - t1) / 1e9 / (double)b->reps;
    free(keys);
    free(argv);
    free(argl);
    redisFree(rc);
    return ok == 2 * b->reps ? 0 : -1;
}

int main(int argc, char **argv) {
    const char *ps = "", *redis = "", *optimizer = "sgd";
    const char *tls_ca = "", *tls_cert = "", *tls_key = "";
    bench b = {.rows = 1000000, .batch = 4096, .dim = 64, .reps = 200, .shard_map = ""};
    ss__flag flags[] = {
        {"ps", SS_FLAG_STRING, &ps,
         "one running shadowsync-ps shard, through which the rows go over gRPC only and the "
         "default way (its bulk stream when it has one) (\"\" = skip)",
         NULL, 0, 0},
        {"redis", SS_FLAG_STRING, &redis, "a running Redis server host:port (\"\" = skip)", NULL, 0,
         0},
        {"rows", SS_FLAG_INT, &b.rows, "distinct rows in the table", NULL, 1, 1e9},
        {"batch", SS_FLAG_INT, &b.batch, "ids per request", NULL, 1, 65536},
        {"dim", SS_FLAG_INT, &b.dim, "floats per row", NULL, 1, 4096},
        {"reps", SS_FLAG_INT, &b.reps, "timed batches per operation", NULL, 1, 1e6},
        {"tls-ca", SS_FLAG_STRING, &tls_ca,
         "PEM CA bundle that signed the PS's certificate: TLS to the PS (\"\" = plain TCP)", NULL,
         0, 0},
        {"tls-cert", SS_FLAG_STRING, &tls_cert, "PEM client certificate for mutual TLS", NULL, 0,
         0},
        {"tls-key", SS_FLAG_STRING, &tls_key, "PEM private key of --tls-cert", NULL, 0, 0},
        {"shard-map", SS_FLAG_STRING, &b.shard_map,
         "the PS's shard map file: the calls carry its epoch (\"\" = none)", NULL, 0, 0},
        {"optimizer", SS_FLAG_STRING, &optimizer,
         "the table's optimizer in the store (inproc, tcp, gRPC; the floors and Redis apply SGD)",
         "sgd|adagrad", 0, 0},
    };
    int exit_code = ss__flags_cli(&program, flags, sizeof flags / sizeof *flags, argc, argv);
    if (exit_code >= 0)
        return exit_code;
    b.tls = (ss__rpc_tls){.ca_file = *tls_ca ? tls_ca : NULL,
                          .cert_file = *tls_cert ? tls_cert : NULL,
                          .key_file = *tls_key ? tls_key : NULL};
    if (b.batch > b.rows) {
        fprintf(stderr, "shadowsync-bench-emb: --batch must be <= --rows\n");
        return 2;
    }
    ss__emb_spec_init(&b.spec, "bench", (uint32_t)b.dim);
    b.spec.optimizer = strcmp(optimizer, "adagrad") ? SS_EMB_SGD : SS_EMB_ADAGRAD;
    b.ids = malloc((size_t)(b.reps * b.batch) * sizeof *b.ids);
    b.buf = malloc((size_t)(b.batch * b.dim) * sizeof *b.buf);
    b.grads = malloc((size_t)(b.batch * b.dim) * sizeof *b.grads);
    if (!b.ids || !b.buf || !b.grads) {
        fprintf(stderr, "shadowsync-bench-emb: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < b.batch * b.dim; i++)
        b.grads[i] = (float)(i % 7) * 0.01f;
    make_batches(&b);
    printf("batch %lld ids, dim %lld, %lld rows, %lld timed batches per operation\n",
           (long long)b.batch, (long long)b.dim, (long long)b.rows, (long long)b.reps);
    result in, ga, gi, tc, gr = {0}, bk = {0}, rd = {0};
    ss__emb_store *st = NULL;
    ss__rpc_init();
    if (run_in_process(&b, &ga, &gi, &in, &st) != 0)
        return 1;
    report("gather", &ga, &b);
    report("indexed", &gi, &b);
    ratio("indexed/gather", &ga, &gi);
    report("inproc", &in, &b);
    ratio("inproc/gather", &ga, &in);
    ratio("inproc/indexed", &gi, &in);
    if (run_tcp(&b, st, &tc) != 0) {
        fprintf(stderr, "shadowsync-bench-emb: the loopback TCP run failed\n");
        return 1;
    }
    ss__emb_store_destroy(st);
    report("tcp", &tc, &b);
    ratio("tcp/inproc", &in, &tc);
    if (*ps) {
        if (run_grpc(&b, ps, false, &gr) != 0)
            return 1;
        report("grpc", &gr, &b);
    }
    if (*ps) {
        if (run_grpc(&b, ps, true, &bk) != 0)
            return 1;
        report("default", &bk, &b);
    }
    if (*redis) {
        if (run_redis(&b, redis, &rd) != 0)
            return 1;
        report("redis", &rd, &b);
    }
    if (*ps) {
        ratio("grpc/inproc", &in, &gr);
        ratio("grpc/tcp", &tc, &gr);
    }
    if (*ps) {
        ratio("default/inproc", &in, &bk);
        ratio("default/tcp", &tc, &bk);
        ratio("default/grpc", &gr, &bk);
    }
    if (*ps && *redis)
        ratio("grpc/redis", &rd, &gr);
    ss__rpc_shutdown();
    free(b.ids);
    free(b.buf);
    free(b.grads);
    return 0;
}
