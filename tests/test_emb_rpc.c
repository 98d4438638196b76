/* The Embedding service over real gRPC on 127.0.0.1 (server in this
 * process so its counters can be read): every kind of bad input gets its
 * status, is counted, and changes no row; then the trainer hooks' remote
 * and cached tables against it, checked against hand-computed rows. */
#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "common/clock.h"
#include "ps/emb_service.h"
#include "rpc/emb/emb_client.h"
#include "rpc/emb/embedding.pb-c.h"
#include "rpc_checks.h"
#include "shadow/codec.h"
#include "shadowsync/shadowsync.h"

typedef struct fixture {
    ss__metrics *metrics;
    ss__emb_store *store;
    ss__emb_service svc;
    ss__rpc_server *srv;
    ss__rpc_channel *ch;
    char target[64];
} fixture;

static fixture F;

enum { DIM_WIDE = 64 }; /* a chunk of these rows is a 1 MiB reply */

static void setup(void) {
    ss__rpc_init();
    ck_assert_int_eq(ss__metrics_create(&F.metrics, NULL, 0), SS_OK);
    ss__emb_store_config cfg = {
        .max_batch = 4096, .metrics = F.metrics, .max_reply_bytes = 1 << 20, .max_tables = 4};
    ck_assert_int_eq(ss__emb_store_create(&cfg, &F.store, NULL, 0), SS_OK);
    ss__emb_service_init(&F.svc, F.store);
    ss__rpc_server_config scfg = {
        .listen = "127.0.0.1:0", .threads = 2, .max_message_bytes = 4 << 20, .metrics = F.metrics};
    ck_assert_int_eq(
        ss__rpc_server_start(&scfg, F.svc.methods, SS_EMB_METHODS, NULL, &F.srv, NULL, 0), SS_OK);
    snprintf(F.target, sizeof F.target, "127.0.0.1:%d", ss__rpc_server_port(F.srv));
    ck_assert_int_eq(ss__rpc_channel_create(F.target, 0, NULL, &F.ch, NULL, 0), SS_OK);
}

static void teardown(void) {
    ss__rpc_channel_destroy(F.ch);
    ss__rpc_server_stop(F.srv);
    ss__emb_store_destroy(F.store);
    ss__metrics_destroy(F.metrics);
    ss__rpc_shutdown();
}

static uint64_t rejected(const char *reason) {
    const char *labels[] = {"reason", reason, NULL};
    ss__counter *c;
    ck_assert_int_eq(ss__metrics_counter(F.metrics, "shadowsync_emb_rejected_total",
                                         "Embedding requests refused, by reason; no stored row "
                                         "changed.",
                                         labels, &c),
                     SS_OK);
    return ss__counter_value(c);
}

static ss_status call(const char *method, const ProtobufCMessage *m, uint8_t **resp,
                      size_t *resp_len) {
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(len + 1);
    protobuf_c_message_pack(m, buf);
    uint8_t *r = NULL;
    size_t rl = 0;
    char msg[200];
    ss_status st = ss__rpc_call(F.ch, method, buf, len, 5000, false, &r, &rl, msg, sizeof msg);
    free(buf);
    if (resp) {
        *resp = r;
        *resp_len = rl;
    } else {
        free(r);
    }
    return st;
}

/* method with m; on success the bytes field at field_offset of its reply
 * (a message of desc) copied to out, and their count to *out_len (when
 * not NULL). */
static ss_status call_bytes(const char *method, const ProtobufCMessage *m,
                            const ProtobufCMessageDescriptor *desc, size_t field_offset, void *out,
                            size_t *out_len) {
    uint8_t *resp;
    size_t len;
    ss_status st = call(method, m, &resp, &len);
    if (st != SS_OK)
        return st;
    ProtobufCMessage *r = protobuf_c_message_unpack(desc, NULL, len, resp);
    ck_assert_ptr_nonnull(r);
    const ProtobufCBinaryData *b = (const ProtobufCBinaryData *)((const char *)r + field_offset);
    if (b->len)
        memcpy(out, b->data, b->len);
    if (out_len)
        *out_len = b->len;
    protobuf_c_message_free_unpacked(r, NULL);
    free(resp);
    return st;
}

static ss_status open_table(const char *name, uint32_t dim) {
    Shadowsync__V1__TableSpec ts = SHADOWSYNC__V1__TABLE_SPEC__INIT;
    ts.name = (char *)name;
    ts.dim = dim;
    ts.optimizer = 0;
    ts.lr = 1.0f;
    ts.eps = 1e-8f;
    ts.init_scale = 0.0f;
    Shadowsync__V1__OpenTableRequest m = SHADOWSYNC__V1__OPEN_TABLE_REQUEST__INIT;
    m.spec = &ts;
    return call(SS_EMB_M_OPEN, &m.base, NULL, NULL);
}

static ss_status push(const char *table, const uint64_t *ids, size_t n, const float *g,
                      size_t glen) {
    Shadowsync__V1__PushRequest m = SHADOWSYNC__V1__PUSH_REQUEST__INIT;
    m.table = (char *)table;
    m.ids = (ProtobufCBinaryData){n * 8, (uint8_t *)ids};
    m.grads = (ProtobufCBinaryData){glen, (uint8_t *)g};
    return call(SS_EMB_M_PUSH, &m.base, NULL, NULL);
}

static ss_status lookup(const char *table, const uint64_t *ids, size_t n, float *rows) {
    Shadowsync__V1__LookupRequest m = SHADOWSYNC__V1__LOOKUP_REQUEST__INIT;
    m.table = (char *)table;
    m.ids = (ProtobufCBinaryData){n * 8, (uint8_t *)ids};
    return call_bytes(SS_EMB_M_LOOKUP, &m.base, &shadowsync__v1__lookup_reply__descriptor,
                      offsetof(Shadowsync__V1__LookupReply, rows), rows, NULL);
}

START_TEST(test_bad_input_over_grpc) {
    ck_assert_int_eq(open_table("t", 4), SS_OK);
    ck_assert_int_eq(open_table("t", 4), SS_OK); /* idempotent */
    uint64_t ids[3] = {10, 20, 30};
    float g[12], before[12], after[12];
    for (int i = 0; i < 12; i++)
        g[i] = (float)i;
    ck_assert_int_eq(push("t", ids, 3, g, sizeof g), SS_OK);
    ck_assert_int_eq(lookup("t", ids, 3, before), SS_OK);
    ck_assert_float_eq(before[5], -5.0f); /* init 0, lr 1: row = -g */

    /* dimension mismatch: a table reopened with another dim; a push whose
     * gradients are not n * dim floats */
    ck_assert_int_eq(open_table("t", 8), SS_ERR_SIZE_MISMATCH);
    ck_assert_int_eq(push("t", ids, 3, g, 11 * sizeof(float)), SS_ERR_SIZE_MISMATCH);
    ck_assert_uint_eq(rejected("dim_mismatch"), 2);
    /* unknown table */
    ck_assert_int_eq(push("nope", ids, 3, g, sizeof g), SS_ERR_NOT_FOUND);
    ck_assert_int_eq(lookup("nope", ids, 3, after), SS_ERR_NOT_FOUND);
    ck_assert_uint_eq(rejected("unknown_table"), 2);
    /* empty batch */
    ck_assert_int_eq(push("t", ids, 0, g, 0), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(lookup("t", ids, 0, after), SS_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(rejected("empty_batch"), 2);
    /* huge batch: over the store's 4096 ids, refused before any allocation */
    static uint64_t many[4097];
    static float many_g[4097 * 4];
    for (int i = 0; i < 4097; i++)
        many[i] = (uint64_t)i + 100;
    ck_assert_int_eq(push("t", many, 4097, many_g, sizeof many_g), SS_ERR_NO_MEMORY);
    ck_assert_int_eq(lookup("t", many, 4097, many_g), SS_ERR_NO_MEMORY);
    ck_assert_uint_eq(rejected("batch_too_large"), 2);
    /* duplicate ids */
    uint64_t dup[3] = {10, 20, 10};
    ck_assert_int_eq(push("t", dup, 3, g, sizeof g), SS_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(rejected("duplicate_ids"), 1);
    /* NaN / Inf gradients */
    g[7] = NAN;
    ck_assert_int_eq(push("t", ids, 3, g, sizeof g), SS_ERR_NON_FINITE);
    g[7] = -INFINITY;
    ck_assert_int_eq(push("t", ids, 3, g, sizeof g), SS_ERR_NON_FINITE);
    ck_assert_uint_eq(rejected("non_finite"), 2);
    /* ids that are not whole uint64s; bytes that are no message at all */
    Shadowsync__V1__LookupRequest m = SHADOWSYNC__V1__LOOKUP_REQUEST__INIT;
    m.table = "t";
    m.ids = (ProtobufCBinaryData){7, (uint8_t *)ids};
    ck_assert_int_eq(call(SS_EMB_M_LOOKUP, &m.base, NULL, NULL), SS_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(rejected("bad_ids"), 1);
    const char *methods[] = {SS_EMB_M_OPEN,       SS_EMB_M_LOOKUP,     SS_EMB_M_PUSH,
                             SS_EMB_M_ELASTIC,    SS_EMB_M_CHECKPOINT, SS_EMB_M_STATS,
                             SS_EMB_M_PUSH_LOOKUP};
    for (int i = 0; i < 7; i++)
        assert_garbage_refused(F.ch, methods[i], false, SS_ERR_PARSE, NULL);
    ck_assert_uint_eq(rejected("garbage"), 7);
    /* Checkpoint without a database: refused, nothing written. */
    Shadowsync__V1__EmbCheckpointRequest c = SHADOWSYNC__V1__EMB_CHECKPOINT_REQUEST__INIT;
    c.name = "never-written";
    ck_assert_int_eq(call(SS_EMB_M_CHECKPOINT, &c.base, NULL, NULL), SS_ERR_STATE);

    g[7] = 1.0f;
    ck_assert_int_eq(lookup("t", ids, 3, after), SS_OK); /* still serving */
    ck_assert_mem_eq(before, after, sizeof before);      /* and nothing changed */
}
END_TEST

static ss_status push_lookup(const char *table, const uint64_t *pids, size_t pn, const float *g,
                             size_t glen, const uint64_t *ids, size_t n, float *rows) {
    Shadowsync__V1__PushLookupRequest m = SHADOWSYNC__V1__PUSH_LOOKUP_REQUEST__INIT;
    m.table = (char *)table;
    m.push_ids = (ProtobufCBinaryData){pn * 8, (uint8_t *)pids};
    m.grads = (ProtobufCBinaryData){glen, (uint8_t *)g};
    m.ids = (ProtobufCBinaryData){n * 8, (uint8_t *)ids};
    size_t len = 0;
    ss_status st =
        call_bytes(SS_EMB_M_PUSH_LOOKUP, &m.base, &shadowsync__v1__lookup_reply__descriptor,
                   offsetof(Shadowsync__V1__LookupReply, rows), rows, &len);
    if (st == SS_OK)
        ck_assert_uint_eq(len, n * 2 * sizeof(float));
    return st;
}

/* PushLookup: the push first, then the rows (a row in both comes back
 * updated); either part alone; a bad part refuses the whole call and
 * changes nothing. Table "pl": dim 2, SGD lr 1, rows start at 0. */
START_TEST(test_push_lookup_pushes_then_reads) {
    ck_assert_int_eq(open_table("pl", 2), SS_OK);
    uint64_t pids[2] = {1, 2}, ids[2] = {2, 3};
    float g[4] = {1, 1, 2, 2}, rows[4];
    ck_assert_int_eq(push_lookup("pl", pids, 2, g, sizeof g, ids, 2, rows), SS_OK);
    ck_assert_float_eq(rows[0], -2.0f); /* row 2: pushed, then read */
    ck_assert_float_eq(rows[2], 0.0f);  /* row 3: only read */
    ck_assert_int_eq(push_lookup("pl", pids, 2, g, sizeof g, NULL, 0, NULL), SS_OK); /* push only */
    ck_assert_int_eq(push_lookup("pl", NULL, 0, NULL, 0, pids, 2, rows), SS_OK);     /* read only */
    ck_assert_float_eq(rows[0], -2.0f);
    ck_assert_float_eq(rows[2], -4.0f);
    const uint64_t before_empty = rejected("empty_batch");
    ck_assert_int_eq(push_lookup("pl", NULL, 0, NULL, 0, NULL, 0, NULL), SS_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(rejected("empty_batch"), before_empty + 1);
    /* A bad lookup part refuses the push with it: duplicate ids, too many. */
    uint64_t dup[2] = {3, 3};
    ck_assert_int_eq(push_lookup("pl", pids, 2, g, sizeof g, dup, 2, rows),
                     SS_ERR_INVALID_ARGUMENT);
    static uint64_t many[4097];
    for (int i = 0; i < 4097; i++)
        many[i] = (uint64_t)i + 100;
    ck_assert_int_eq(push_lookup("pl", pids, 2, g, sizeof g, many, 4097, NULL), SS_ERR_NO_MEMORY);
    /* A bad push part refuses the lookup: non-finite, wrong length. */
    g[1] = NAN;
    ck_assert_int_eq(push_lookup("pl", pids, 2, g, sizeof g, ids, 2, rows), SS_ERR_NON_FINITE);
    g[1] = 1.0f;
    ck_assert_int_eq(push_lookup("pl", pids, 2, g, 3 * sizeof(float), ids, 2, rows),
                     SS_ERR_SIZE_MISMATCH);
    ck_assert_int_eq(push_lookup("nope", pids, 2, g, sizeof g, ids, 2, rows), SS_ERR_NOT_FOUND);
    float after[4];
    ck_assert_int_eq(lookup("pl", pids, 2, after), SS_OK);
    ck_assert_float_eq(after[0], -2.0f); /* nothing refused was applied */
    ck_assert_float_eq(after[2], -4.0f);
}
END_TEST

static ss_trainer *open_trainer(void) {
    ss_trainer_config tc;
    ss_trainer_config_init(&tc);
    tc.mode = SS_SYNC_NONE;
    tc.ps = F.target;
    tc.timeout_ms = 5000;
    ss_trainer *t;
    ck_assert_int_eq(ss_trainer_open(&tc, &t), SS_OK);
    return t;
}

/* Rows of 2 floats starting at 0, SGD at lr 1: a pushed gradient g moves
 * a row by exactly -g. */
static ss_table_config table_config(const char *name, ss_table_mode mode) {
    ss_table_config c;
    ss_table_config_init(&c, name, 2);
    c.mode = mode;
    c.lr = 1.0f;
    c.init_scale = 0.0f;
    return c;
}

/* A small request cannot ask for a huge reply: 512 ids of dim 4096 (a
 * 4 KiB request) would be an 8 MiB reply, over this server's 1 MiB limit.
 * Refused before any row is made; the limit on tables holds too. Every
 * reason's series exists from the start. */
START_TEST(test_request_limits) {
    ck_assert_uint_eq(rejected("reply_too_large"), 0);
    ck_assert_uint_eq(rejected("too_many_tables"), 0);
    ck_assert_int_eq(open_table("wide", 4096), SS_OK);
    static uint64_t ids[512];
    static float rows[64 * 4096];
    for (int i = 0; i < 512; i++)
        ids[i] = 1000 + (uint64_t)i;
    ck_assert_int_eq(lookup("wide", ids, 512, rows), SS_ERR_TOO_LARGE);
    ck_assert_uint_eq(rejected("reply_too_large"), 1);
    ss__emb_store_stats stats;
    ck_assert_int_eq(ss__emb_store_stats_of(F.store, "wide", &stats), SS_OK);
    ck_assert_uint_eq(stats.table.resident_rows, 0);
    ck_assert_int_eq(lookup("wide", ids, 64, rows), SS_OK); /* 1 MiB: at the limit */
    /* Four tables is this server's limit. */
    ck_assert_int_eq(open_table("t2", 4), SS_OK);
    ck_assert_int_eq(open_table("t3", 4), SS_OK);
    ck_assert_int_eq(open_table("t4", 4), SS_OK);
    ck_assert_int_eq(open_table("t5", 4), SS_ERR_TOO_LARGE);
    ck_assert_uint_eq(rejected("too_many_tables"), 1);
    ck_assert_int_eq(open_table("t4", 4), SS_OK); /* an existing one still opens */
}
END_TEST

START_TEST(test_remote_table_through_hooks) {
    ss_trainer *t = open_trainer();
    ss_table_config c = table_config("remote", SS_TABLE_REMOTE);
    c.push_queue = 2;
    ss_table *tb;
    ck_assert_int_eq(ss_table_open(t, &c, &tb), SS_OK);
    /* A repeated id's gradients add up: row 5 gets 1 + 2, row 6 gets 4. */
    uint64_t ids[3] = {5, 6, 5};
    float g[6] = {1, 1, 4, 4, 2, 2}, rows[6];
    ck_assert_int_eq(ss_table_push(tb, ids, 3, g), SS_OK);
    ck_assert_int_eq(ss_table_flush(tb), SS_OK);
    ck_assert_int_eq(ss_table_lookup(tb, ids, 3, rows), SS_OK);
    ck_assert_float_eq(rows[0], -3.0f);
    ck_assert_float_eq(rows[2], -4.0f);
    ck_assert_float_eq(rows[4], -3.0f); /* the repeat answered too */
    float server[4];
    ck_assert_int_eq(ss__emb_store_lookup(F.store, "remote", ids, 2, server, NULL, 0), SS_OK);
    ck_assert_float_eq(server[1], -3.0f);
    /* Prefetch gives the same rows. */
    ss_table_fetch *f;
    float pre[6];
    ck_assert_int_eq(ss_table_prefetch(tb, ids, 3, &f), SS_OK);
    ck_assert_int_eq(ss_table_fetch_wait(f, pre), SS_OK);
    ck_assert_mem_eq(pre, rows, sizeof rows);
    /* A push and a prefetch in one call: the row pushed comes back
     * updated (row 6 was -4: one more gradient of 4 makes it -8), and a
     * flush waits for the push. */
    ck_assert_int_eq(ss_table_push_prefetch(tb, ids + 1, 1, g + 2, ids, 3, &f), SS_OK);
    ck_assert_int_eq(ss_table_fetch_wait(f, pre), SS_OK);
    ck_assert_float_eq(pre[0], -3.0f);
    ck_assert_float_eq(pre[2], -8.0f);
    ck_assert_int_eq(ss_table_push_prefetch(tb, ids + 1, 1, g + 2, NULL, 0, &f), SS_OK);
    ck_assert_int_eq(ss_table_flush(tb), SS_OK);
    ck_assert_int_eq(ss_table_fetch_wait(f, NULL), SS_OK);
    ck_assert_int_eq(ss__emb_store_lookup(F.store, "remote", ids + 1, 1, server, NULL, 0), SS_OK);
    ck_assert_float_eq(server[0], -12.0f);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(ss_table_push(tb, ids + 1, 1, g + 2), SS_OK); /* back to -4 * 5 */
    ck_assert_int_eq(ss_table_flush(tb), SS_OK);
    ck_assert_int_eq(ss_table_lookup(tb, ids, 3, rows), SS_OK);
    /* Many pushes through a queue of 2: back-pressure, nothing lost. */
    for (int i = 0; i < 200; i++)
        ck_assert_int_eq(ss_table_push(tb, ids + 1, 1, g + 2), SS_OK);
    ck_assert_int_eq(ss_table_flush(tb), SS_OK);
    ck_assert_int_eq(ss_table_lookup(tb, ids + 1, 1, rows), SS_OK);
    ck_assert_float_eq(rows[0], -4.0f * 205);
    g[1] = NAN;
    ck_assert_int_eq(ss_table_push(tb, ids, 1, g), SS_ERR_NON_FINITE);
    ss_table_stats s;
    ck_assert_int_eq(ss_table_get_stats(tb, &s), SS_OK);
    ck_assert_uint_eq(s.failed_calls, 0);
    /* The shards refuse a table of another dim under the same name. */
    ss_table_config other = c;
    other.dim = 3;
    ss_table *tb2;
    ck_assert_int_eq(ss_table_open(t, &other, &tb2), SS_ERR_SIZE_MISMATCH);
    ck_assert_int_eq(ss_trainer_close(t), SS_OK);
}
END_TEST

/* One lookup of 16 chunks (SS_EMB_CLIENT_CHUNK ids of 64 floats: 1 MiB
 * replies) sends 16 reads at once on one connection, 4 times its share:
 * those past it wait their turn and every row comes back (refused, they
 * failed the lookup, and ctr-train --emb remote with 8 workers with it;
 * test_dense_transport's test_reads_never_hold_up_writers holds the turns exactly). */
START_TEST(test_a_lookup_past_the_read_share_goes_through) {
    ss_trainer *t = open_trainer();
    ss_table_config c = table_config("wide", SS_TABLE_REMOTE);
    c.dim = DIM_WIDE;
    ss_table *tb;
    ck_assert_int_eq(ss_table_open(t, &c, &tb), SS_OK);
    enum { N = 16 * SS_EMB_CLIENT_CHUNK };
    static uint64_t ids[N];
    static float g[N * DIM_WIDE], rows[N * DIM_WIDE];
    for (size_t i = 0; i < N; i++) {
        ids[i] = i;
        for (size_t j = 0; j < DIM_WIDE; j++)
            g[i * DIM_WIDE + j] = (float)(i % 100);
    }
    ck_assert_int_eq(ss_table_push(tb, ids, N, g), SS_OK);
    ck_assert_int_eq(ss_table_flush(tb), SS_OK);
    for (int rep = 0; rep < 3; rep++) {
        ck_assert_int_eq(ss_table_lookup(tb, ids, N, rows), SS_OK);
        for (size_t i = 0; i < N; i++)
            ck_assert_float_eq(rows[i * DIM_WIDE + DIM_WIDE - 1], -(float)(i % 100));
    }
    ss_table_stats s;
    ck_assert_int_eq(ss_table_get_stats(tb, &s), SS_OK);
    ck_assert_uint_eq(s.failed_calls, 0);
    ck_assert_int_eq(ss_trainer_close(t), SS_OK);
}
END_TEST

START_TEST(test_cached_table_syncs_and_evicts) {
    ss_trainer *t = open_trainer();
    ss_table_config c = table_config("cached", SS_TABLE_CACHED);
    c.alpha = 0.5f;
    c.cache_rows = 640;               /* 10 rows per stripe */
    c.sync_interval_ms = 3600 * 1000; /* only flush() syncs in this test */
    ss_table *tb;
    ck_assert_int_eq(ss_table_open(t, &c, &tb), SS_OK);
    uint64_t id = 42;
    float g[2] = {1.0f, 2.0f}, row[2], server[2];
    ck_assert_int_eq(ss_table_push(tb, &id, 1, g), SS_OK); /* miss fetched, updated locally */
    ck_assert_int_eq(ss_table_lookup(tb, &id, 1, row), SS_OK);
    ck_assert_float_eq(row[0], -1.0f);
    ck_assert_int_eq(ss__emb_store_lookup(F.store, "cached", &id, 1, server, NULL, 0), SS_OK);
    ck_assert_float_eq(server[0], 0.0f); /* not synced yet */
    /* Prefetches wake the table's threads; the syncer still waits out its
     * interval (it used to run a pass on every such wake-up). */
    for (int i = 0; i < 20; i++) {
        ss_table_fetch *f;
        ck_assert_int_eq(ss_table_prefetch(tb, &id, 1, &f), SS_OK);
        ck_assert_int_eq(ss_table_fetch_wait(f, row), SS_OK);
        ck_assert_int_eq(ss_table_push(tb, &id, 1, (float[2]){0, 0}), SS_OK);
    }
    usleep(100000);
    ck_assert_int_eq(ss__emb_store_lookup(F.store, "cached", &id, 1, server, NULL, 0), SS_OK);
    ck_assert_float_eq(server[0], 0.0f);
    /* Elastic sync: d = 0.5 (x - c) = (-0.5, -1); c = (-0.5, -1); x -= d. */
    ck_assert_int_eq(ss_table_flush(tb), SS_OK);
    ck_assert_int_eq(ss__emb_store_lookup(F.store, "cached", &id, 1, server, NULL, 0), SS_OK);
    ck_assert_float_eq(server[0], -0.5f);
    ck_assert_float_eq(server[1], -1.0f);
    ck_assert_int_eq(ss_table_lookup(tb, &id, 1, row), SS_OK);
    ck_assert_float_eq(row[0], -0.5f);
    ck_assert_float_eq(row[1], -1.0f);
    /* Touch 5000 rows: the cache keeps at most its capacity once synced. */
    static uint64_t ids[5000];
    static float gs[10000];
    for (int i = 0; i < 5000; i++)
        ids[i] = 1000 + (uint64_t)i;
    for (int i = 0; i < 10000; i++)
        gs[i] = 1.0f;
    ck_assert_int_eq(ss_table_push(tb, ids, 5000, gs), SS_OK);
    ck_assert_int_eq(ss_table_flush(tb), SS_OK);
    ss_table_stats s;
    ck_assert_int_eq(ss_table_get_stats(tb, &s), SS_OK);
    ck_assert_uint_le(s.resident_rows, 640);
    ck_assert_uint_ge(s.evictions, 5000 - 640);
    ck_assert_uint_eq(s.synced_rows, 5001);
    /* Evicted rows come back from the shards with their synced value. */
    float back[2];
    ck_assert_int_eq(ss_table_lookup(tb, &ids[4999], 1, back), SS_OK);
    ck_assert_float_eq(back[0], -0.5f);
    ck_assert_int_eq(ss_trainer_close(t), SS_OK);
}
END_TEST

/* ss_table_warm loads a cached table's missing rows in one call, ahead of
 * the lookups; those then find them (hits, no second fetch), with the
 * shard's values. Local and remote tables have nothing to warm. */
/* Elastic's encoded form over gRPC: bad encodings, sizes and payloads
 * are refused and counted, with nothing changed. */
static ss_status elastic_encoded(const char *table, const uint64_t *ids, size_t n,
                                 const uint8_t *rows, size_t len, uint32_t enc, uint8_t *out,
                                 size_t *out_len) {
    Shadowsync__V1__ElasticRequest m = SHADOWSYNC__V1__ELASTIC_REQUEST__INIT;
    m.table = (char *)table;
    m.ids = (ProtobufCBinaryData){n * 8, (uint8_t *)ids};
    m.rows = (ProtobufCBinaryData){len, (uint8_t *)rows};
    m.alpha = 0.5f;
    m.encoding = enc;
    return call_bytes(SS_EMB_M_ELASTIC, &m.base, &shadowsync__v1__elastic_reply__descriptor,
                      offsetof(Shadowsync__V1__ElasticReply, deltas), out, out_len);
}

START_TEST(test_elastic_encodings_over_grpc) {
    ck_assert_int_eq(open_table("enc", 4), SS_OK);
    uint64_t ids[2] = {5, 6};
    const float x[8] = {1, 2, 3, 4, -1, -2, -3, -4};
    uint8_t rows[64], out[64];
    size_t out_len = 0;
    const size_t row8 = ss__codec_size(SS_ENC_INT8, 4);
    for (int i = 0; i < 2; i++)
        ss__codec_encode(SS_ENC_INT8, x + 4 * i, 4, rows + row8 * i);
    ck_assert_int_eq(elastic_encoded("enc", ids, 2, rows, 2 * row8, 9, out, &out_len),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(rejected("bad_encoding"), 1);
    ck_assert_int_eq(elastic_encoded("enc", ids, 2, rows, 2 * row8 - 1, SS_ENC_INT8, out, &out_len),
                     SS_ERR_SIZE_MISMATCH);
    uint8_t bad[64];
    memcpy(bad, rows, 2 * row8);
    const float inverted[2] = {5.0f, -5.0f}; /* min over max */
    memcpy(bad + row8, inverted, sizeof inverted);
    ck_assert_int_eq(elastic_encoded("enc", ids, 2, bad, 2 * row8, SS_ENC_INT8, out, &out_len),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(rejected("bad_payload"), 1);
    float c[8];
    ck_assert_int_eq(lookup("enc", ids, 2, c), SS_OK);
    for (int i = 0; i < 8; i++)
        ck_assert_float_eq(c[i], 0.0f); /* nothing applied */
    /* A good one: the reply is int8 rows, and the centre moved by their
     * decoding: d = 0.5 (x^ - 0), x^ the decoded upload. */
    ck_assert_int_eq(elastic_encoded("enc", ids, 2, rows, 2 * row8, SS_ENC_INT8, out, &out_len),
                     SS_OK);
    ck_assert_uint_eq(out_len, 2 * row8);
    ck_assert_int_eq(lookup("enc", ids, 2, c), SS_OK);
    float d[4];
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(ss__codec_decode(SS_ENC_INT8, out + row8 * i, row8, 4, d), SS_OK);
        for (int j = 0; j < 4; j++) {
            ck_assert_float_eq(c[4 * i + j], d[j]);
            ck_assert_float_eq_tol(d[j], 0.5f * x[4 * i + j], 0.02f);
        }
    }
}
END_TEST

/* A cached table whose row sync is encoded: each sync conserves x + c
 * exactly (the shard moves c by the decoded delta the trainer applies),
 * and repeated syncs bring x and c together. */
START_TEST(test_cached_table_encoded_sync_conserves) {
    const char *encs[] = {"fp16", "bf16", "int8"};
    for (int e = 0; e < 3; e++) {
        ss_trainer *t = open_trainer();
        char name[32];
        snprintf(name, sizeof name, "cached_%s", encs[e]);
        ss_table_config c = table_config(name, SS_TABLE_CACHED);
        c.dim = 8;
        c.alpha = 0.5f;
        c.sync_interval_ms = 3600 * 1000; /* only flush() syncs */
        c.encoding = encs[e];
        ss_table *tb;
        ck_assert_int_eq(ss_table_open(t, &c, &tb), SS_OK);
        uint64_t id = 7;
        float g[8], row[8], server[8];
        for (int j = 0; j < 8; j++)
            g[j] = 0.37f * (float)(j + 1) - 1.1f; /* x = -g: not exact in 8 bits */
        ck_assert_int_eq(ss_table_push(tb, &id, 1, g), SS_OK);
        for (int k = 0; k < 12; k++) {
            ck_assert_int_eq(ss_table_push(tb, &id, 1, (float[8]){0}), SS_OK); /* dirty again */
            ck_assert_int_eq(ss_table_flush(tb), SS_OK);
            ck_assert_int_eq(ss_table_lookup(tb, &id, 1, row), SS_OK);
            ck_assert_int_eq(ss__emb_store_lookup(F.store, name, &id, 1, server, NULL, 0), SS_OK);
            for (int j = 0; j < 8; j++)
                ck_assert_msg(fabsf(row[j] + server[j] + g[j]) < 1e-5f,
                              "%s sync %d: x + c = %g, not %g", encs[e], k,
                              (double)(row[j] + server[j]), (double)-g[j]);
        }
        for (int j = 0; j < 8; j++) /* together at (x + c) / 2 */
            ck_assert_float_eq_tol(row[j], -g[j] / 2, 0.01f);
        ck_assert_int_eq(ss_trainer_close(t), SS_OK);
    }
    ss_table_config bad = table_config("cached_bad", SS_TABLE_CACHED);
    bad.encoding = "int4";
    ss_trainer *t = open_trainer();
    ss_table *tb;
    ck_assert_int_eq(ss_table_open(t, &bad, &tb), SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(ss_last_error(), "emb_encoding=\"int4\": unknown encoding"));
    ck_assert_int_eq(ss_trainer_close(t), SS_OK);
}
END_TEST

START_TEST(test_cached_table_warm_loads_ahead) {
    ss_trainer *t = open_trainer();
    ss_table_config c = table_config("warm", SS_TABLE_CACHED);
    c.init_scale = 0.5f; /* rows the shard made: not zeros */
    c.sync_interval_ms = 3600 * 1000;
    ss_table *tb;
    ck_assert_int_eq(ss_table_open(t, &c, &tb), SS_OK);
    ck_assert_int_eq(ss_table_warm(tb, NULL, 3), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss_table_warm(NULL, NULL, 0), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss_table_warm(tb, NULL, 0), SS_OK);
    uint64_t ids[3] = {7, 8, 7};
    ck_assert_int_eq(ss_table_warm(tb, ids, 3), SS_OK);
    /* The fetcher takes warm-ups and fetches in order: once this fetch is
     * back, the warm-up before it is done. */
    ss_table_fetch *f;
    float rows[4], server[4];
    ck_assert_int_eq(ss_table_prefetch(tb, ids, 1, &f), SS_OK);
    ck_assert_int_eq(ss_table_fetch_wait(f, rows), SS_OK);
    ss_table_stats s;
    ck_assert_int_eq(ss_table_get_stats(tb, &s), SS_OK);
    ck_assert_uint_eq(s.remote_rows, 2); /* 7 and 8, once each */
    ck_assert_int_eq(ss_table_lookup(tb, ids + 1, 1, rows + 2), SS_OK);
    ck_assert_int_eq(ss_table_get_stats(tb, &s), SS_OK);
    ck_assert_uint_eq(s.remote_rows, 2);
    ck_assert_uint_eq(s.cache_hits, 2); /* both lookups */
    ck_assert_int_eq(ss__emb_store_lookup(F.store, "warm", ids, 2, server, NULL, 0), SS_OK);
    ck_assert_mem_eq(rows, server, sizeof rows);
    ck_assert_int_eq(ss_table_warm(tb, ids, 3), SS_OK); /* resident: no call */
    ck_assert_int_eq(ss_table_prefetch(tb, ids, 1, &f), SS_OK);
    ck_assert_int_eq(ss_table_fetch_wait(f, rows), SS_OK);
    ck_assert_int_eq(ss_table_get_stats(tb, &s), SS_OK);
    ck_assert_uint_eq(s.remote_rows, 2);
    ss_table_config rc = table_config("warm_remote", SS_TABLE_REMOTE);
    ss_table *remote;
    ck_assert_int_eq(ss_table_open(t, &rc, &remote), SS_OK);
    ck_assert_int_eq(ss_table_warm(remote, ids, 3), SS_OK);
    ck_assert_int_eq(ss_table_get_stats(remote, &s), SS_OK);
    ck_assert_uint_eq(s.remote_rows, 0);
    ck_assert_int_eq(ss_trainer_close(t), SS_OK);
}
END_TEST

/* A handler that fails its first `fails` calls with SS_ERR_IO (as a
 * shard that could not reach an old one mid-move says), then serves. */
typedef struct flaky {
    ss__rpc_method inner;
    int fails, calls;
} flaky;

static void flaky_handler(void *ctx, const uint8_t *req, size_t len, ss__rpc_reply *reply) {
    flaky *f = ctx;
    if (f->calls++ < f->fails) {
        ss__rpc_reply_fail(reply, SS_ERR_IO, "injected: the old shard was not reached");
        return;
    }
    ss__rpc_method_run(&f->inner, NULL, req, len, reply);
}

/* The client makes a lookup that failed with SS_ERR_IO again (it only
 * reads), up to 3 times, and never a push (applied twice, it would train
 * twice). */
START_TEST(test_a_lookup_that_failed_in_transit_is_made_again) {
    ss__rpc_method m[SS_EMB_METHODS];
    memcpy(m, F.svc.methods, sizeof m);
    flaky lookups = {.fails = 2}, pushes = {.fails = 1};
    for (int i = 0; i < SS_EMB_METHODS; i++) {
        flaky *f = !strcmp(m[i].path, SS_EMB_M_LOOKUP) ? &lookups
                   : !strcmp(m[i].path, SS_EMB_M_PUSH) ? &pushes
                                                       : NULL;
        if (f) {
            f->inner = m[i];
            m[i].handler = flaky_handler;
            m[i].request = NULL; /* raw: flaky_handler runs the typed inner one */
            m[i].ctx = f;
        }
    }
    ss__rpc_server_config scfg = {.listen = "127.0.0.1:0", .threads = 1};
    ss__rpc_server *srv;
    ck_assert_int_eq(ss__rpc_server_start(&scfg, m, SS_EMB_METHODS, NULL, &srv, NULL, 0), SS_OK);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", ss__rpc_server_port(srv));
    ss__emb_client *c;
    ck_assert_int_eq(ss__emb_client_create(target, NULL, 5000, &c, NULL, 0), SS_OK);
    ss__emb_spec spec;
    ck_assert_int_eq(ss__emb_spec_init(&spec, "flaky", 2), SS_OK);
    spec.init_scale = 0.0f;
    ck_assert_int_eq(ss__emb_client_open_table(c, &spec, NULL, NULL, 0), SS_OK);
    const uint64_t ids[2] = {7, 9};
    float rows[4] = {1, 1, 1, 1};
    ck_assert_int_eq(ss__emb_client_lookup(c, &spec, ids, 2, rows), SS_OK);
    ck_assert_int_eq(lookups.calls, 3); /* two failures, then served */
    ck_assert(rows[0] == 0.0f && rows[3] == 0.0f);
    ck_assert_int_eq(ss__emb_client_push(c, &spec, ids, 2, rows), SS_ERR_IO);
    ck_assert_int_eq(pushes.calls, 1); /* not made again */
    lookups = (flaky){.inner = lookups.inner, .fails = 100};
    ck_assert_int_eq(ss__emb_client_lookup(c, &spec, ids, 2, rows), SS_ERR_IO);
    ck_assert_int_eq(lookups.calls, 4); /* the first and 3 more */
    ss__emb_client_destroy(c);
    ss__rpc_server_stop(srv);
}
END_TEST

/* Requests of a method served ok so far (its series in the server's
 * registry). */
static unsigned long served_ok(const char *method) {
    char *text, needle[200];
    size_t len;
    ck_assert_int_eq(ss__metrics_render(F.metrics, &text, &len), SS_OK);
    snprintf(needle, sizeof needle, "shadowsync_rpc_requests_total{method=\"%s\",result=\"ok\"} ",
             method);
    const char *at = strstr(text, needle);
    unsigned long n = at ? strtoul(at + strlen(needle), NULL, 10) : 0;
    free(text);
    return n;
}

/* One call of a Batch, packed. */
static Shadowsync__V1__BatchCall batch_call(uint32_t method, const ProtobufCMessage *m) {
    Shadowsync__V1__BatchCall c = SHADOWSYNC__V1__BATCH_CALL__INIT;
    c.method = method;
    c.request.len = protobuf_c_message_get_packed_size(m);
    c.request.data = malloc(c.request.len + 1);
    protobuf_c_message_pack(m, c.request.data);
    return c;
}

/* A Batch's calls each get their own result: an unknown method, an
 * unknown table, bytes that are no request, a non-finite gradient are
 * refused (and counted) while the good call beside them is applied; a
 * batch of too many calls is refused whole. */
START_TEST(test_batch_bad_input) {
    ck_assert_int_eq(open_table("b", 2), SS_OK);
    const uint64_t ids[1] = {3};
    const float good[2] = {1, 2}, bad[2] = {NAN, 0};
    Shadowsync__V1__PushRequest p = SHADOWSYNC__V1__PUSH_REQUEST__INIT;
    p.table = "b";
    p.ids = (ProtobufCBinaryData){8, (uint8_t *)ids};
    p.grads = (ProtobufCBinaryData){8, (uint8_t *)good};
    Shadowsync__V1__PushRequest nan = p;
    nan.grads.data = (uint8_t *)bad;
    Shadowsync__V1__LookupRequest unknown = SHADOWSYNC__V1__LOOKUP_REQUEST__INIT;
    unknown.table = "nope";
    unknown.ids = p.ids;
    Shadowsync__V1__BatchCall calls[5] = {
        batch_call(SS_EMB_BATCH_PUSH, &p.base), batch_call(9, &p.base),
        batch_call(SS_EMB_BATCH_LOOKUP, &unknown.base), batch_call(SS_EMB_BATCH_PUSH, &nan.base),
        batch_call(SS_EMB_BATCH_LOOKUP, &unknown.base)};
    calls[4].request.data[0] = 0xff; /* no longer a message */
    Shadowsync__V1__BatchCall *cp[5] = {&calls[0], &calls[1], &calls[2], &calls[3], &calls[4]};
    Shadowsync__V1__BatchRequest m = SHADOWSYNC__V1__BATCH_REQUEST__INIT;
    m.n_calls = 5;
    m.calls = cp;
    uint8_t *resp;
    size_t len;
    ck_assert_int_eq(call(SS_EMB_M_BATCH, &m.base, &resp, &len), SS_OK);
    Shadowsync__V1__BatchReply *r = shadowsync__v1__batch_reply__unpack(NULL, len, resp);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->n_results, 5);
    const ss_status want[5] = {SS_OK, SS_ERR_INVALID_ARGUMENT, SS_ERR_NOT_FOUND, SS_ERR_NON_FINITE,
                               SS_ERR_PARSE};
    for (int i = 0; i < 5; i++)
        ck_assert_msg(r->results[i]->status == (uint32_t)want[i], "call %d: %u (%s)", i,
                      r->results[i]->status, r->results[i]->message);
    ck_assert_str_eq(r->results[1]->message, "unknown batch method");
    shadowsync__v1__batch_reply__free_unpacked(r, NULL);
    free(resp);
    float row[2];
    ck_assert_int_eq(ss__emb_store_lookup(F.store, "b", ids, 1, row, NULL, 0), SS_OK);
    ck_assert_float_eq(row[0], -1.0f); /* the good push, once */
    ck_assert_float_eq(row[1], -2.0f);
    /* 1025 calls: the whole batch refused, nothing applied. */
    Shadowsync__V1__BatchCall **many = malloc(1025 * sizeof *many);
    for (int i = 0; i < 1025; i++)
        many[i] = &calls[0];
    m.n_calls = 1025;
    m.calls = many;
    ck_assert_int_eq(call(SS_EMB_M_BATCH, &m.base, NULL, NULL), SS_ERR_TOO_LARGE);
    ck_assert_int_eq(ss__emb_store_lookup(F.store, "b", ids, 1, row, NULL, 0), SS_OK);
    ck_assert_float_eq(row[0], -1.0f);
    free(many);
    for (int i = 0; i < 5; i++)
        free(calls[i].request.data);
}
END_TEST

/* A trainer's remote tables (of two dims) through the many-calls: one
 * Batch call where each table made its own, the same rows; pushes (and
 * a push with the next fetch) applied once each; cached tables' misses
 * and warm-ups in one Batch too, and their row sync. */
START_TEST(test_many_tables_go_in_one_batch) {
    ss_trainer *t = open_trainer();
    ss_table_config a = table_config("many.a", SS_TABLE_REMOTE);
    ss_table_config b = table_config("many.b", SS_TABLE_REMOTE);
    b.dim = 3;
    ss_table *tb[2];
    ck_assert_int_eq(ss_table_open(t, &a, &tb[0]), SS_OK);
    ck_assert_int_eq(ss_table_open(t, &b, &tb[1]), SS_OK);
    const uint64_t ids[5] = {1, 2, 7, 7, 8};
    const size_t counts[2] = {2, 3};
    const float g[13] = {1, 1, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3};
    const unsigned long batches = served_ok(SS_EMB_M_BATCH);
    const unsigned long lookups = served_ok(SS_EMB_M_LOOKUP), pushes = served_ok(SS_EMB_M_PUSH);
    ck_assert_int_eq(ss_table_push_many(tb, 2, ids, counts, g), SS_OK);
    ck_assert_int_eq(ss_table_flush(tb[0]), SS_OK);
    ck_assert_int_eq(ss_table_flush(tb[1]), SS_OK);
    float rows[13];
    ck_assert_int_eq(ss_table_lookup_many(tb, 2, ids, counts, rows), SS_OK);
    /* SGD at lr 1 from 0: -g; id 7 twice: its gradients add up */
    const float want[13] = {-1, -1, -2, -2, -3, -3, -3, -3, -3, -3, -3, -3, -3};
    for (int i = 0; i < 13; i++)
        ck_assert_float_eq(rows[i], want[i]);
    ss_table_fetch_many *f;
    ck_assert_int_eq(ss_table_push_prefetch_many(tb, 2, ids, counts, g, ids, counts, &f), SS_OK);
    ck_assert_int_eq(ss_table_fetch_many_wait(f, rows), SS_OK);
    for (int i = 0; i < 13; i++) /* the push applied first: twice -g now */
        ck_assert_float_eq(rows[i], 2 * want[i]);
    ck_assert_uint_eq(served_ok(SS_EMB_M_BATCH), batches + 3);
    ck_assert_uint_eq(served_ok(SS_EMB_M_LOOKUP), lookups); /* nothing table by table */
    ck_assert_uint_eq(served_ok(SS_EMB_M_PUSH), pushes);
    /* Cached tables over the same rows: misses filled by one Batch, warm
     * too, and their row sync. */
    ss_table_config ca = table_config("many.a", SS_TABLE_CACHED), cb = ca;
    cb.name = "many.b";
    cb.dim = 3;
    ss_table *cached[2];
    ck_assert_int_eq(ss_table_open(t, &ca, &cached[0]), SS_OK);
    ck_assert_int_eq(ss_table_open(t, &cb, &cached[1]), SS_OK);
    ck_assert_int_eq(ss_table_warm_many(cached, 2, ids, counts), SS_OK);
    ck_assert_int_eq(ss_table_lookup_many(cached, 2, ids, counts, rows), SS_OK);
    for (int i = 0; i < 13; i++)
        ck_assert_float_eq(rows[i], 2 * want[i]);
    ck_assert_uint_eq(served_ok(SS_EMB_M_LOOKUP), lookups);
    ck_assert_int_eq(ss_table_push_many(cached, 2, ids, counts, g), SS_OK); /* applied here */
    ck_assert_int_eq(ss_table_flush(cached[0]), SS_OK);
    ck_assert_int_eq(ss_table_flush(cached[1]), SS_OK);
    ss_table_stats s;
    ck_assert_int_eq(ss_table_get_stats(cached[1], &s), SS_OK);
    ck_assert_uint_eq(s.synced_rows, 2); /* rows 7 and 8 went to the shard */
    ck_assert_int_eq(ss_trainer_close(t), SS_OK);
}
END_TEST

SS_CHECK_MAIN("emb_rpc", 60, setup, teardown, test_bad_input_over_grpc, test_batch_bad_input,
              test_many_tables_go_in_one_batch, test_request_limits,
              test_push_lookup_pushes_then_reads, test_remote_table_through_hooks,
              test_cached_table_syncs_and_evicts, test_cached_table_warm_loads_ahead,
              test_elastic_encodings_over_grpc, test_cached_table_encoded_sync_conserves,
              test_a_lookup_past_the_read_share_goes_through,
              test_a_lookup_that_failed_in_transit_is_made_again)
