/* Embedding rows on the bulk stream (rpc/bulk/bulk.h, rpc/bulk/bulk_pool.h):
 * lookups, pushes and push-lookups through a real shadowsync-ps with
 * --bulk-listen give the rows the same calls over gRPC give; a PS that
 * dies and comes back on its address gets the client's rows on a new
 * stream. (Over mutual TLS, a read-only certificate, a trainer's remote
 * table: test_bulk.c.) */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "http_client.h"
#include "procs.h"
#include "rpc/dense/grpc_transport.h"
#include "rpc/emb/emb_client.h"
#include "rpc/rpc.h"

static pid_t ps_pid;
static char ps_target[64], ps_log[128];

/* shadowsync-ps on listen with a bulk port and /metrics at *base. */
static void start_ps(const char *listen, char *base, size_t baselen) {
    snprintf(ps_log, sizeof ps_log, "/tmp/ss-test-bulk-rows-%d.log", (int)getpid());
    char *args[] = {"--bulk-listen", "127.0.0.1:0", "--http", "127.0.0.1:0", NULL};
    ps_pid = proc_start_ps(ps_log, ps_target, sizeof ps_target, listen, args);
    char http[64];
    proc_address_after(ps_log, "http on", http, sizeof http);
    snprintf(base, baselen, "http://%s", http);
}

/* The PS SIGKILLed (a crash: no graceful stop), its log removed. */
static void kill_ps(void) {
    kill(ps_pid, SIGKILL);
    proc_wait(ps_pid, 10);
    unlink(ps_log);
}

static void stop_ps(void) {
    kill(ps_pid, SIGTERM);
    ck_assert_int_eq(proc_wait(ps_pid, 30), 0); /* exit 0: a graceful stop */
    unlink(ps_log);
}

/* The PS's count of a method's calls served ok (method: the end of its
 * path and a label, e.g. "Embedding/Lookup\",result=\"ok\"}"), from
 * /metrics at base. */
static double served(const char *base, const char *method) {
    char *metrics = NULL;
    ck_assert_int_eq(http_request(base, "/metrics", NULL, NULL, 0, &metrics), 200);
    const double n = metric_sum(metrics, "shadowsync_rpc_requests_total", method);
    free(metrics);
    return n;
}

#define ON_BULK "\",result=\"ok\",transport=\"bulk\""

/* Embedding rows on the stream: lookups, pushes and push-lookups through
 * a client with the bulk streams on give the rows a gRPC client reads of
 * the same table, bit for bit; every such batch goes on the stream (the
 * PS's per-method series say transport="bulk"); a non-finite push is
 * refused by the method's own check with the gRPC path's status and
 * changes nothing; Elastic stays on gRPC. */
START_TEST(test_embedding_rows_on_the_stream_as_over_grpc) {
    char base[80];
    start_ps("127.0.0.1:0", base, sizeof base);
    ss__emb_client *b, *g;
    ck_assert_int_eq(ss__emb_client_create(ps_target, NULL, 5000, &b, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_client_use_bulk(b, true), SS_OK);
    ck_assert_int_eq(ss__emb_client_create(ps_target, NULL, 5000, &g, NULL, 0), SS_OK);
    ss__emb_spec spec;
    ck_assert_int_eq(ss__emb_spec_init(&spec, "rows", 8), SS_OK);
    ck_assert_int_eq(ss__emb_client_open_table(b, &spec, NULL, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_client_open_table(g, &spec, NULL, NULL, 0), SS_OK);
    enum { N = SS_EMB_BULK_CHUNK + 300, S = 300, D = 8 }; /* N: two calls on the stream */
    static uint64_t ids[N], more[N];
    static float grads[N * D], rb[N * D], rg[N * D], before[N * D];
    for (int i = 0; i < N; i++) {
        ids[i] = (uint64_t)i * 7919u + 1;
        more[i] = ids[i] + 3;
    }
    for (int i = 0; i < N * D; i++)
        grads[i] = 0.01f * (float)(i % 13) - 0.05f;
    ck_assert_int_eq(ss__emb_client_push(b, &spec, ids, N, grads), SS_OK);
    ck_assert_int_eq(ss__emb_client_lookup(b, &spec, ids, N, rb), SS_OK);
    ck_assert_int_eq(ss__emb_client_lookup(g, &spec, ids, N, rg), SS_OK);
    ck_assert(memcmp(rb, rg, sizeof rb) == 0);
    ck_assert_int_eq(ss__emb_client_push_lookup(b, &spec, more, N, grads, ids, N, rb), SS_OK);
    ck_assert_int_eq(ss__emb_client_lookup(g, &spec, ids, N, rg), SS_OK);
    ck_assert(memcmp(rb, rg, sizeof rb) == 0);
    ck_assert_uint_eq(ss__emb_client_bulk_batches(b), 3);
    ck_assert_uint_eq(ss__emb_client_bulk_batches(g), 0);
    /* NaN in a push of one call: refused whole, as over gRPC, and nothing
     * moved (a push of several calls is checked call by call: the
     * trainer checks the whole push first, trainer-hooks/tables.c) */
    memcpy(before, rg, sizeof before);
    grads[5 * D + 2] = NAN;
    ck_assert_int_eq(ss__emb_client_push(b, &spec, ids, S, grads), SS_ERR_NON_FINITE);
    ck_assert_int_eq(ss__emb_client_push(g, &spec, ids, S, grads), SS_ERR_NON_FINITE);
    ck_assert_int_eq(ss__emb_client_lookup(b, &spec, ids, S, rb), SS_OK);
    ck_assert(memcmp(rb, before, S * D * sizeof *rb) == 0);
    ck_assert_uint_eq(ss__emb_client_bulk_batches(b), 5);
    ck_assert_int_eq(ss__emb_client_elastic(b, &spec, ids, N, rb, 0.5f, SS_ENC_F32, rg), SS_OK);
    ck_assert_uint_eq(ss__emb_client_bulk_batches(b), 5); /* Elastic: gRPC */
    ss__emb_client_destroy(b);
    ss__emb_client_destroy(g);
    ck_assert_double_eq(served(base, "Embedding/Lookup" ON_BULK), 3); /* 2 + 1 calls */
    ck_assert_double_eq(served(base, "PushLookup" ON_BULK), 2);
    ck_assert_double_ge(served(base, "Embedding/Lookup\",result=\"ok\"}"), 2);
    stop_ps();
}
END_TEST

/* A PS started on a port of its own (its address in listen, to start it
 * again there) and a client of it with the streams on and the table
 * named name (dim 4) open. */
static ss__emb_client *ps_and_client(uint32_t timeout_ms, const char *name, char *base,
                                     size_t baselen, char listen[64], ss__emb_spec *spec) {
    start_ps("127.0.0.1:0", base, baselen);
    snprintf(listen, 64, "%s", ps_target);
    ss__emb_client *c;
    ck_assert_int_eq(ss__emb_client_create(ps_target, NULL, timeout_ms, &c, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_client_use_bulk(c, true), SS_OK);
    ck_assert_int_eq(ss__emb_spec_init(spec, name, 4), SS_OK);
    ck_assert_int_eq(ss__emb_client_open_table(c, spec, NULL, NULL, 0), SS_OK);
    return c;
}

/* The PS started again on listen and c's table opened on it: its first
 * calls may find the channel still reconnecting (10 s at most). */
static void table_again_after_restart(ss__emb_client *c, const ss__emb_spec *spec,
                                      const char *listen, char *base, size_t baselen) {
    start_ps(listen, base, baselen);
    ck_assert_str_eq(ps_target, listen);
    ss_status st = SS_ERR_IO;
    for (int i = 0; i < 40 && st != SS_OK; i++)
        if ((st = ss__emb_client_open_table(c, spec, NULL, NULL, 0)) != SS_OK)
            usleep(250000);
    ck_assert_int_eq(st, SS_OK);
}

/* The PS SIGKILLed under a client with the streams on: its next lookup
 * fails (the stream and the channel are gone), it does not hang; a PS
 * started again on the same address (a new bulk port) serves the same
 * client's rows on a new stream, its ticket asked for again. */
START_TEST(test_rows_after_the_ps_restarts) {
    char base[80], listen[64];
    ss__emb_spec spec;
    ss__emb_client *c = ps_and_client(2000, "back", base, sizeof base, listen, &spec);
    const uint64_t ids[2] = {11, 12};
    float rows[8], again[8];
    ck_assert_int_eq(ss__emb_client_lookup(c, &spec, ids, 2, rows), SS_OK);
    ck_assert_uint_eq(ss__emb_client_bulk_batches(c), 1);
    kill_ps();
    ck_assert_int_ne(ss__emb_client_lookup(c, &spec, ids, 2, again), SS_OK);
    table_again_after_restart(c, &spec, listen, base, sizeof base);
    ck_assert_int_eq(ss__emb_client_lookup(c, &spec, ids, 2, again), SS_OK);
    ck_assert(memcmp(rows, again, sizeof rows) == 0); /* a row's start is its id's */
    ck_assert_uint_ge(ss__emb_client_bulk_batches(c), 2);
    ss__emb_client_destroy(c);
    ck_assert_double_eq(served(base, "Embedding/Lookup" ON_BULK), 1);
    stop_ps();
}
END_TEST

/* The PS SIGKILLed and started again while the client makes no call: its
 * idle stream to the old PS is dead. The first push after the restart (a
 * push is never retried) goes through, on a new stream: the dead one is
 * not used (it failed the push with SS_ERR_IO, and an MA round the same
 * way, before idle streams were checked). */
START_TEST(test_a_dead_idle_stream_is_not_used) {
    char base[80], listen[64];
    ss__emb_spec spec;
    ss__emb_client *c = ps_and_client(5000, "idle", base, sizeof base, listen, &spec);
    const uint64_t ids[2] = {3, 4};
    const float grads[8] = {0};
    ck_assert_int_eq(ss__emb_client_push(c, &spec, ids, 2, grads), SS_OK);
    ck_assert_uint_eq(ss__emb_client_bulk_batches(c), 1); /* its stream is idle now */
    kill_ps();
    table_again_after_restart(c, &spec, listen, base, sizeof base);
    ck_assert_int_eq(ss__emb_client_push(c, &spec, ids, 2, grads), SS_OK);
    ck_assert_uint_eq(ss__emb_client_bulk_batches(c), 2); /* on a new stream */
    ss__emb_client_destroy(c);
    stop_ps();
}
END_TEST

SS_CHECK_MAIN("bulk_rows", 60, NULL, NULL, test_embedding_rows_on_the_stream_as_over_grpc,
              test_rows_after_the_ps_restarts, test_a_dead_idle_stream_is_not_used)
