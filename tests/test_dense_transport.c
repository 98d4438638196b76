/* rpc/dense/grpc_transport.c: a real shadowsync-ps process on 127.0.0.1, engines talking to it
 * through the gRPC transport, and bad input that must not hurt it. */
#include <arpa/inet.h>
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "common/clock.h"
#include "http_client.h"
#include "ports.h"
#include "procs.h"
#include "ps/dense_service.h"
#include "rpc/dense/grpc_transport.h"
#include "rpc/http/http.h"
#include "rpc/rpc.h"
#include "rpc_checks.h"
#include "shadow/engine.h"
#include "transport_checks.h"

static pid_t ps_pid;
static char ps_target[64];
static char ps_log[64];

/* Starts shadowsync-ps on a free port (its output in a log file). */
static void start_ps(void) {
    snprintf(ps_log, sizeof ps_log, "/tmp/ss-test-rpc-%d.log", (int)getpid());
    char *args[] = {"--max-group-floats", "1000", "--round-deadline-ms", "300", NULL};
    ps_pid = proc_start_ps(ps_log, ps_target, sizeof ps_target, "127.0.0.1:0", args);
}

static void stop_ps(void) {
    kill(ps_pid, SIGTERM);
    int status;
    ck_assert_int_eq(waitpid(ps_pid, &status, 0), ps_pid);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 0); /* graceful shutdown */
    unlink(ps_log);
}

static ss__transport *connect_ps(void) {
    ss__transport *t;
    ss__grpc_transport_config cfg = {
        .targets = ps_target, .timeout_ms = 5000, .round_wait_ms = 2000};
    ck_assert_int_eq(ss__grpc_transport_create(&cfg, &t, NULL, 0), SS_OK);
    return t;
}

START_TEST(test_easgd_over_grpc) {
    start_ps();
    ss__transport *t = connect_ps();
    check_easgd_by_hand(t, "dense");
    check_bmuf_rounds_by_hand(t, "bmuf"); /* the parameters travel, the PS holds the state */
    ss__transport_destroy(t);
    stop_ps();
}
END_TEST

static double i_plus_1(int i) {
    return i + 1;
}

START_TEST(test_ma_round_of_three_engines_over_grpc) {
    start_ps();
    ss__transport *t[3];
    ss__replica *r[3];
    round_arg args[3];
    const ss__sync_params p = {.algo = SS_ALGO_MA};
    for (int k = 0; k < 3; k++) {
        t[k] = connect_ps(); /* one connection per trainer, as across processes */
        start_round_member(t[k], "dense", &p, 3, k, i_plus_1, &r[k], &args[k]);
    }
    run_rounds_together(args, 3, 1);
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 3; i++)
            ck_assert_float_eq(ss__replica_data(r[k])[i], (float)(i + 1));
    }
    stop_round_members(args, r, 3);
    for (int k = 0; k < 3; k++)
        ss__transport_destroy(t[k]);
    stop_ps();
}
END_TEST

/* Through a PS, a member whose replica stands still joins an MA round
 * another member opened (the PS's heartbeat reply says the round waits for
 * it), long before the PS's 5 s round deadline (transport_checks.h). */
START_TEST(test_still_member_joins_a_round_through_the_ps) {
    snprintf(ps_log, sizeof ps_log, "/tmp/ss-test-rpc-%d.log", (int)getpid());
    char *args[] = {"--round-deadline-ms", "5000", NULL};
    ps_pid = proc_start_ps(ps_log, ps_target, sizeof ps_target, "127.0.0.1:0", args);
    ss__transport *to = connect_ps(), *ts = connect_ps();
    check_still_member_joins(to, ts);
    ss__transport_destroy(to);
    ss__transport_destroy(ts);
    stop_ps();
}
END_TEST

/* Every case one by one, with counters: test_ps_bad_input.c. Here: the
 * real process survives them. */
START_TEST(test_bad_input_never_hurts_the_ps) {
    start_ps();
    ss__transport *t = connect_ps();
    uint64_t a, x;
    ck_assert_int_eq(ss__transport_join(t, "g", 2, &a), SS_OK);
    float d[4], c[2];
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "g", a, (const float[]){1, 1}, 0.5f, d, 2),
                     SS_OK);
    /* unknown group, unknown member */
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "nope", a, (const float[]){1, 1}, 0.5f, d, 2),
                     SS_ERR_NOT_FOUND);
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "g", 77, (const float[]){1, 1}, 0.5f, d, 2),
                     SS_ERR_NOT_FOUND);
    /* NaN / Inf payloads */
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "g", a, (const float[]){NAN, 1}, 0.5f, d, 2),
                     SS_ERR_NON_FINITE);
    ss__round_result rr;
    ck_assert_int_eq(
        ss__transport_allreduce_mean(t, "g", a, (const float[]){1, INFINITY}, c, 2, &rr),
        SS_ERR_NON_FINITE);
    /* a group larger than the server's limit (1000 floats) */
    ck_assert_int_eq(ss__transport_join(t, "big", 2000, &x), SS_ERR_INVALID_ARGUMENT);

    /* garbage bytes and a call with an expired deadline, at the RPC level */
    ss__rpc_channel *ch;
    ck_assert_int_eq(ss__rpc_channel_create(ps_target, 0, NULL, &ch, NULL, 0), SS_OK);
    assert_garbage_refused(ch, "/shadowsync.v1.DenseSync/EasgdExchange", false, SS_ERR_PARSE,
                           "not a valid");
    /* UNIMPLEMENTED, at once */
    assert_garbage_refused(ch, "/shadowsync.v1.DenseSync/NoSuchMethod", false, SS_ERR_NOT_FOUND,
                           NULL);
    ss__rpc_channel_destroy(ch);

    /* The central variable is untouched and the server still serves. */
    ck_assert_int_eq(ss__transport_read_central(t, "g", c, 2), SS_OK);
    ck_assert_float_eq(c[0], 1.0f);
    ck_assert_float_eq(c[1], 1.0f);
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "g", a, (const float[]){3, 1}, 0.5f, d, 2),
                     SS_OK);
    ck_assert_float_eq(d[0], 1.0f);
    ss__transport_destroy(t);
    stop_ps();
}
END_TEST

START_TEST(test_server_on_a_taken_port_fails_cleanly) {
    start_ps();
    size_t n;
    const ss__rpc_method *methods = ss__dense_service_methods(&n);
    ss__dense_service svc = {.max_floats = 16};
    ss__rpc_server_config cfg = {.listen = ps_target, .threads = 2};
    ss__rpc_server *srv = NULL;
    char why[400];
    ck_assert_int_eq(ss__rpc_server_start(&cfg, methods, n, &svc, &srv, why, sizeof why),
                     SS_ERR_IO);
    ck_assert_ptr_null(srv);
    /* Said in words: the address and the system's reason. */
    ck_assert_ptr_nonnull(strstr(why, ps_target));
    ck_assert_ptr_nonnull(strstr(why, "already in use"));
    /* A PEM file that is not there: its path. */
    ss__rpc_tls tls = {.cert_file = "/nonexistent/server.pem", .key_file = "/nonexistent/k.pem"};
    ss__rpc_server_config tcfg = {.listen = "127.0.0.1:0", .threads = 1, .tls = &tls};
    ck_assert_int_eq(ss__rpc_server_start(&tcfg, methods, n, &svc, &srv, why, sizeof why),
                     SS_ERR_IO);
    ck_assert_ptr_nonnull(strstr(why, "/nonexistent/server.pem"));
    ss__rpc_server_config bad = {.listen = "127.0.0.1:0", .threads = 0};
    ck_assert_int_eq(ss__rpc_server_start(&bad, methods, n, &svc, &srv, NULL, 0),
                     SS_ERR_INVALID_ARGUMENT);
    stop_ps();
}
END_TEST

/* Nothing listens: the join says so, with the address and the reason,
 * after the probe's time (the call's 500 ms here), not the call's own
 * deadline: calls wait for a server to come up. */
START_TEST(test_ps_down_is_said_at_once) {
    ss__transport *t;
    ss__grpc_transport_config cfg = {.targets = "127.0.0.1:1", .timeout_ms = 500};
    ck_assert_int_eq(ss__grpc_transport_create(&cfg, &t, NULL, 0), SS_OK);
    uint64_t m;
    ss__rpc_clear_failure();
    ck_assert_int_eq(ss__transport_join(t, "g", 2, &m), SS_ERR_IO);
    ck_assert_str_eq(ss__rpc_last_failure(),
                     "cannot reach the PS at 127.0.0.1:1 (connection refused)");
    ss__transport_destroy(t);
}
END_TEST

/* The probe itself: a listening socket is reachable, the same port once
 * closed is refused, and what is not host:port is left to gRPC. */
START_TEST(test_tcp_reachable_says_why_not) {
    int port;
    const int fd = test_silent_listener(&port);
    char addr[32], why[128] = "";
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    ck_assert_msg(ss__tcp_reachable(addr, 1000, why, sizeof why), "%s: %s", addr, why);
    close(fd);
    ck_assert(!ss__tcp_reachable(addr, 1000, why, sizeof why));
    ck_assert_str_eq(why, "connection refused");
    ck_assert(ss__tcp_reachable("unix:/nowhere", 1000, why, sizeof why));
}
END_TEST

/* A network namespace of the test process's own, lo up (root, ip and nft;
 * false, said, without them): its PS and clients talk over its lo only,
 * and nft rules there cut it. */
static bool own_network(void) {
    if (geteuid() != 0 || system("command -v nft ip >/dev/null") != 0 ||
        unshare(CLONE_NEWNET) != 0) {
        fprintf(stderr, "skipped: needs root, ip and nft for a network namespace\n");
        return false;
    }
    ck_assert_int_eq(system("ip link set lo up"), 0);
    ck_assert_int_eq(system("nft add table inet t && nft add chain inet t in '{ type filter hook "
                            "input priority 0; }'"),
                     0);
    return true;
}

/* A lost SYN costs no second: in a network namespace of its own (root and
 * nft; skipped without them), nft drops every other SYN to a listener, so
 * each connection's first SYN is lost. The kernel sends it again only
 * after 1 s; a connect given 900 ms makes it by sending its SYN again on
 * a new socket (it timed out before). Its second connection too. */
START_TEST(test_a_lost_syn_is_sent_again) {
    if (!own_network())
        return;
    int port;
    const int listener = test_silent_listener(&port);
    char cmd[512], addr[32], why[128] = "";
    snprintf(cmd, sizeof cmd,
             "nft add rule inet t in tcp dport %d 'tcp flags & (syn | ack) == syn' numgen inc mod "
             "2 == 0 drop",
             port);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    for (int i = 0; i < 2; i++) {
        const int fd = ss__tcp_connect(addr, 900, why, sizeof why);
        ck_assert_msg(fd >= 0, "connection %d: %s", i, why);
        close(fd);
    }
    close(listener);
}
END_TEST

/* A PS that stops answering on a live connection (SIGSTOP: its kernel
 * still acks TCP, as a network partition keeps a connection "open"): the
 * client's keepalive ping goes unanswered and the connection is given up,
 * so the call fails as unreachable (SS_ERR_IO) long before its 20 s
 * deadline (SS_ERR_TIMEOUT), and a call once the PS runs again goes
 * through on a new connection. "Once": the channel redials while the PS
 * is still stopped, and the kernel accepts that connection too; a call
 * made the instant the PS resumes could go out on it and meet a keepalive
 * watchdog armed during the stop (it failed so, "keepalive watchdog
 * timeout", in 3 of 12 runs here, and once in CI). The wait of one
 * keepalive timeout lets any such watchdog fire first. */
START_TEST(test_a_silent_connection_is_given_up) {
    start_ps();
    ss__transport *t;
    ss__grpc_transport_config cfg = {.targets = ps_target, .timeout_ms = 20000};
    ck_assert_int_eq(ss__grpc_transport_create(&cfg, &t, NULL, 0), SS_OK);
    uint64_t a;
    float d[2];
    ck_assert_int_eq(ss__transport_join(t, "g", 2, &a), SS_OK);
    proc_freeze(ps_pid);
    ss_status silent = ss__transport_easgd_exchange(t, "g", a, (const float[]){1, 1}, 0.5f, d, 2);
    char why[600];
    snprintf(why, sizeof why, "%s", ss__rpc_last_failure());
    kill(ps_pid, SIGCONT);
    ss__sleep_ns((uint64_t)(SS_RPC_KEEPALIVE_TIMEOUT_MS + 1000) * 1000000ull);
    ss_status again = ss__transport_easgd_exchange(t, "g", a, (const float[]){1, 1}, 0.5f, d, 2);
    snprintf(why + strlen(why), sizeof why - strlen(why), "; then %s", ss__rpc_last_failure());
    ss__transport_destroy(t);
    stop_ps();
    ck_assert_msg(silent == SS_ERR_IO, "the call to a silent PS said %s (%s)",
                  ss_status_name(silent), why);
    ck_assert_msg(again == SS_OK, "the call after the PS resumed said %s (%s)",
                  ss_status_name(again), why);
}
END_TEST

/* A partition under a bulk stream (nft drops every TCP packet): the call
 * on it fails within seconds (the stream's TCP keepalive and user
 * timeout give it up), not at its 30 s deadline; once the link is back
 * the next call goes through. */
START_TEST(test_a_partitioned_stream_is_given_up) {
    if (!own_network())
        return;
    start_ps();
    uint64_t a;
    float d[2];
    ss__transport *t = stream_member(ps_target, 30000, 0, &a);
    ck_assert_uint_eq(ss__grpc_transport_bulk_batches(t), 1);
    ck_assert_int_eq(system("nft add rule inet t in meta l4proto tcp drop"), 0);
    const uint64_t t0 = ss__now_ns();
    ss_status cut = ss__transport_easgd_exchange(t, "g", a, (const float[]){1, 1}, 0.5f, d, 2);
    const double took_s = (double)(ss__now_ns() - t0) / 1e9;
    ck_assert_int_eq(system("nft flush chain inet t in"), 0);
    ck_assert_msg(cut != SS_OK && took_s < 20, "the call across the partition: %s after %.1f s",
                  ss_status_name(cut), took_s);
    ss_status again = SS_ERR_IO;
    for (int i = 0; i < 50 && again != SS_OK; i++, usleep(100000))
        again = ss__transport_easgd_exchange(t, "g", a, (const float[]){1, 1}, 0.5f, d, 2);
    ck_assert_int_eq(again, SS_OK);
    ss__transport_destroy(t);
    stop_ps();
}
END_TEST

/* ---- the client's batches: a window per channel, replies read in place ---- */

#define ECHO_CHANNELS 2
#define ECHO_CALLS    6         /* per channel */
#define ECHO_PAYLOAD  (1 << 20) /* a reply of several slices */

static _Atomic int echo_in_flight[ECHO_CHANNELS], echo_most[ECHO_CHANNELS];

/* Echoes the request after 150 ms, counting the calls of each channel
 * (the request's first byte) that are in the handler at once. */
static void h_echo(void *ctx, const uint8_t *req, size_t len, ss__rpc_reply *reply) {
    (void)ctx;
    int ch = req[0] % ECHO_CHANNELS;
    int now = atomic_fetch_add(&echo_in_flight[ch], 1) + 1;
    for (int most = atomic_load(&echo_most[ch]);
         now > most && !atomic_compare_exchange_weak(&echo_most[ch], &most, now);) {
    }
    usleep(150000);
    atomic_fetch_sub(&echo_in_flight[ch], 1);
    reply->data = malloc(len);
    memcpy(reply->data, req, len);
    reply->len = len;
}

static uint8_t echo_byte(size_t i) {
    return (uint8_t)(i * 7 + i / 251);
}

/* Reads a stretch of the reply's payload that crosses slices, where it
 * lies, and one past its end (refused). */
static ss_status read_echo(ss__rpc_request *rq, const ss__rpc_message *msg, void *arg) {
    (void)arg;
    if (ss__rpc_message_length(msg) != rq->len + rq->payload_len)
        return SS_ERR_SIZE_MISMATCH;
    static _Thread_local uint8_t got[300000];
    const size_t at = 123457; /* into the payload */
    if (!ss__rpc_message_copy(msg, rq->len + at, got, sizeof got))
        return SS_ERR_PARSE;
    for (size_t i = 0; i < sizeof got; i++)
        if (got[i] != echo_byte(at + i))
            return SS_ERR_PARSE;
    if (ss__rpc_message_copy(msg, rq->len + rq->payload_len - 4, got, 5))
        return SS_ERR_INTERNAL; /* one byte past the end must be refused */
    rq->resp_len = 1;           /* read here */
    return SS_OK;
}

/* A server for the batch tests and ECHO_CHANNELS channels to it, with
 * ECHO_CALLS calls of each channel ready in rq: a 2-byte head (the
 * channel, then the call; the channels' calls interleave) and the
 * ECHO_PAYLOAD-byte payload, to method 0, replies read by on_reply. */
typedef struct echo_rig {
    ss__rpc_server *srv;
    ss__rpc_channel *ch[ECHO_CHANNELS];
    uint8_t *payload;
    uint8_t heads[ECHO_CHANNELS * ECHO_CALLS][2];
    ss__rpc_request rq[ECHO_CHANNELS * ECHO_CALLS];
} echo_rig;

static size_t echo_max_inflight;  /* the rig's server's bound (0: the default) */
static ss__metrics *echo_metrics; /* the rig's server's metrics (NULL: none) */

static void echo_rig_start(echo_rig *g, const ss__rpc_method *m, size_t nm,
                           ss__rpc_on_reply on_reply) {
    memset(g, 0, sizeof *g);
    ss__rpc_server_config cfg = {.listen = "127.0.0.1:0",
                                 .threads = 2,
                                 .max_inflight_bytes = echo_max_inflight,
                                 .metrics = echo_metrics};
    ck_assert_int_eq(ss__rpc_server_start(&cfg, m, nm, NULL, &g->srv, NULL, 0), SS_OK);
    char target[32];
    snprintf(target, sizeof target, "127.0.0.1:%d", ss__rpc_server_port(g->srv));
    for (int c = 0; c < ECHO_CHANNELS; c++)
        ck_assert_int_eq(ss__rpc_channel_create(target, 2 * ECHO_PAYLOAD, NULL, &g->ch[c], NULL, 0),
                         SS_OK);
    g->payload = malloc(ECHO_PAYLOAD);
    for (size_t i = 0; i < ECHO_PAYLOAD; i++)
        g->payload[i] = echo_byte(i);
    for (int i = 0; i < ECHO_CHANNELS * ECHO_CALLS; i++) {
        g->heads[i][0] = (uint8_t)(i % ECHO_CHANNELS);
        g->heads[i][1] = (uint8_t)i;
        g->rq[i] = (ss__rpc_request){.ch = g->ch[i % ECHO_CHANNELS],
                                     .method = m[0].path,
                                     .req = g->heads[i],
                                     .len = 2,
                                     .payload = g->payload,
                                     .payload_len = ECHO_PAYLOAD,
                                     .on_reply = on_reply};
    }
}

static void echo_rig_stop(echo_rig *g) {
    for (int i = 0; i < ECHO_CHANNELS * ECHO_CALLS; i++)
        free(g->rq[i].resp);
    for (int c = 0; c < ECHO_CHANNELS; c++)
        ss__rpc_channel_destroy(g->ch[c]);
    ss__rpc_server_stop(g->srv);
    free(g->payload);
}

/* Runs ECHO_CALLS calls on each of two channels with a window; returns the
 * most calls of one channel the server saw at once. */
static int echo_batch(uint32_t window) {
    static const ss__rpc_method m = {"/t.T/Echo", h_echo, true, NULL, false, 0, NULL, false, false};
    echo_rig g;
    echo_rig_start(&g, &m, 1, read_echo);
    for (int c = 0; c < ECHO_CHANNELS; c++)
        atomic_store(&echo_most[c], 0);
    ck_assert_int_eq(ss__rpc_call_windowed(g.rq, ECHO_CHANNELS * ECHO_CALLS, 20000, true, window),
                     SS_OK);
    for (int i = 0; i < ECHO_CHANNELS * ECHO_CALLS; i++) {
        ck_assert_int_eq(g.rq[i].status, SS_OK);
        ck_assert_ptr_null(g.rq[i].resp); /* read in place, never gathered */
        ck_assert_uint_eq(g.rq[i].resp_len, 1);
    }
    int most = 0;
    for (int c = 0; c < ECHO_CHANNELS; c++)
        most = echo_most[c] > most ? echo_most[c] : most;
    echo_rig_stop(&g);
    return most;
}

START_TEST(test_window_bounds_calls_in_flight_per_channel) {
    ck_assert_int_le(echo_batch(2), 2);
    ck_assert_int_eq(echo_batch(1), 1);
    /* Without a window all of a channel's calls are in the server at once
     * (each holds it 150 ms): the bound above is the window's doing. */
    ck_assert_int_gt(echo_batch(0), 2);
}
END_TEST

/* Replies with one byte, whatever came. */
static void h_tiny(void *ctx, const uint8_t *req, size_t len, ss__rpc_reply *reply) {
    (void)ctx, (void)req, (void)len;
    reply->data = calloc(1, 1);
    reply->len = 1;
}

/* Replies with ECHO_PAYLOAD bytes, whatever came. */
static void h_big(void *ctx, const uint8_t *req, size_t len, ss__rpc_reply *reply) {
    (void)ctx, (void)req, (void)len;
    reply->data = calloc(1, ECHO_PAYLOAD);
    reply->len = ECHO_PAYLOAD;
}

/* One call of len request bytes to method on ch. */
static void call_once(ss__rpc_channel *ch, const char *method, size_t len) {
    uint8_t *req = calloc(1, len), *resp = NULL;
    size_t rlen = 0;
    ck_assert_int_eq(ss__rpc_call(ch, method, req, len, 20000, true, &resp, &rlen, NULL, 0), SS_OK);
    free(req);
    free(resp);
}

/* What the adaptive window reads: a batch's bulk calls' end times and its
 * channels, and each channel's round trip from its small calls only (a
 * big request with a small reply, or the other way round, measures the
 * transfer, not the path). The echo handler holds each call 150 ms, so
 * with a window of 1 a channel's 6 calls end at least 5 x 150 ms apart (a
 * lower bound: a busy machine only stretches it), and a small echo's round
 * trip is at least 150 ms. */
START_TEST(test_batch_stats_and_round_trip) {
    static const ss__rpc_method m[] = {
        {"/t.T/Echo", h_echo, true, NULL, false, 0, NULL, false, false},
        {"/t.T/Tiny", h_tiny, true, NULL, false, 0, NULL, false, false},
        {"/t.T/Big", h_big, true, NULL, false, 0, NULL, false, false}};
    echo_rig g;
    echo_rig_start(&g, m, 3, NULL);
    ss__rpc_batch_stats bs;
    ck_assert_int_eq(
        ss__rpc_call_windowed_stats(g.rq, ECHO_CHANNELS * ECHO_CALLS, 20000, true, 1, &bs), SS_OK);
    ck_assert_uint_eq(bs.channels, ECHO_CHANNELS);
    ck_assert_uint_eq(bs.large_ok, ECHO_CHANNELS * ECHO_CALLS);
    ck_assert_uint_ge(bs.last_end_ns - bs.first_end_ns, (ECHO_CALLS - 1) * 150000000ull);
    /* Bulk calls say nothing of the round trip, either way. */
    call_once(g.ch[0], m[1].path, ECHO_PAYLOAD); /* big request, 1-byte reply */
    call_once(g.ch[0], m[2].path, 2);            /* 2-byte request, big reply */
    for (int c = 0; c < ECHO_CHANNELS; c++)
        ck_assert_uint_eq(ss__rpc_channel_rtt_ns(g.ch[c]), 0);
    call_once(g.ch[0], m[0].path, 2); /* small both ways */
    ck_assert_uint_ge(ss__rpc_channel_rtt_ns(g.ch[0]), 150000000ull);
    ck_assert_uint_lt(ss__rpc_channel_rtt_ns(g.ch[0]), 20000000000ull);
    ck_assert_uint_eq(ss__rpc_channel_rtt_ns(g.ch[1]), 0);
    echo_rig_stop(&g);
}
END_TEST

/* The adapted window by hand (ss__grpc_window_next), then on a model of a
 * long path: 20 ms round trip, a chunk every 0.42 ms once full (512 KiB at
 * 10 Gbit/s), so a window W ends calls max(0.42, 20.42 / W) ms apart. */
START_TEST(test_window_adapts_to_the_round_trip) {
    const uint64_t ms = 1000000;
    /* the figures below are for this floor and margin */
    ck_assert_uint_eq(SS_GRPC_WINDOW, 2);
    ck_assert_uint_eq(SS_GRPC_WINDOW_MARGIN, 8);
    /* short path: rtt / interval = 0.1, under half a chunk: the floor */
    ck_assert_uint_eq(ss__grpc_window_next(2, ms / 10, 1e6, 1), 2);
    /* half a chunk: 2 -> want 8 + 1 (0.5 rounds up) = 9, halfway 6 */
    ck_assert_uint_eq(ss__grpc_window_next(2, ms / 2, 1e6, 1), 6);
    /* 20 / 5 = 4 held: want 12; halfway from 2 is 7 */
    ck_assert_uint_eq(ss__grpc_window_next(2, 20 * ms, 5e6, 1), 7);
    /* two channels share the interval: 20 / (2.5 x 2) = 4 held, again 7 */
    ck_assert_uint_eq(ss__grpc_window_next(2, 20 * ms, 2.5e6, 2), 7);
    /* full: 20 / 0.42 = 47.6 held, want 56; from 8: 32 */
    ck_assert_uint_eq(ss__grpc_window_next(8, 20 * ms, 0.42e6, 1), 32);
    /* a very long path stops at the cap */
    ck_assert_uint_eq(ss__grpc_window_next(SS_GRPC_WINDOW_MAX, 1000 * ms, 1e6, 1),
                      SS_GRPC_WINDOW_MAX);
    /* back on a short path it comes down by halves, rounded down, to the
     * floor: 56 -> 29 -> 15 -> 8 -> 5 -> 3 -> 2 */
    const uint32_t down[] = {56, 29, 15, 8, 5, 3, 2};
    for (int i = 0; i + 1 < 7; i++)
        ck_assert_uint_eq(ss__grpc_window_next(down[i], ms / 10, 0.42e6, 1), down[i + 1]);
    /* nothing measured: unchanged */
    ck_assert_uint_eq(ss__grpc_window_next(9, 0, 1e6, 1), 9);
    ck_assert_uint_eq(ss__grpc_window_next(9, ms, 0, 1), 9);
    /* On the model, from the start (SS_GRPC_ROUND_WINDOW): 12, 16, 20 ...
     * 4 more a batch (2 MiB), then it settles at 56 (the margin over the
     * 47.6 chunks the path holds). */
    uint32_t w = SS_GRPC_ROUND_WINDOW;
    for (int batch = 0; batch < 16; batch++) {
        double interval = fmax(0.42e6, 20.42e6 / w);
        w = ss__grpc_window_next(w, 20 * ms, interval, 1);
    }
    ck_assert_msg(w >= 54 && w <= 57, "after 16 batches the window is %u, not about 56", w);
}
END_TEST

/* Clients that cut one group into chunks of another size (another
 * version, another setting, another shard list) would sync to other
 * groups on the same PS and never be averaged together: the PS refuses
 * the overlapping chunk and says why. The same cut joins again fine. */
START_TEST(test_other_chunking_is_refused_with_why) {
    start_ps();
    ss__transport *t[3];
    const size_t chunks[3] = {100, 150, 100};
    uint64_t m;
    for (int k = 0; k < 3; k++) {
        ss__grpc_transport_config cfg = {
            .targets = ps_target, .timeout_ms = 5000, .chunk_floats = chunks[k]};
        ck_assert_int_eq(ss__grpc_transport_create(&cfg, &t[k], NULL, 0), SS_OK);
    }
    ck_assert_int_eq(ss__transport_join(t[0], "g", 300, &m), SS_OK);
    ck_assert_int_eq(ss__transport_join(t[1], "g", 300, &m), SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(ss__rpc_last_failure(), "chunk g[0:150) overlaps chunk g["));
    ck_assert_int_eq(ss__transport_join(t[2], "g", 300, &m), SS_OK);
    ck_assert_int_eq(ss__transport_join(t[1], "other", 300, &m), SS_OK); /* other groups: free */
    for (int k = 0; k < 3; k++)
        ss__transport_destroy(t[k]);
    stop_ps();
}
END_TEST

/* Group "w": 8 chunks. */
#define W_CHUNK  100
#define W_FLOATS (8 * W_CHUNK)

typedef struct mean_arg {
    ss__transport *t;
    uint64_t member;
    float *s, *avg;
    ss_status st;
} mean_arg;

static void *mean_thread(void *p) {
    mean_arg *a = p;
    ss__round_result res;
    a->st = ss__transport_allreduce_mean(a->t, "w", a->member, a->s, a->avg, W_FLOATS, &res);
    return NULL;
}

/* Chunks of group "w" in the PS's /status whose open round holds one
 * snapshot. */
static int chunks_with_one_snapshot(const char *http) {
    char *text = NULL;
    int n = 0;
    if (http_request(http, "/status", NULL, NULL, 0, &text) == 200)
        for (const char *p = text; (p = strstr(p, "\"round_contributors\": 1,")); p++)
            n++;
    free(text);
    return n;
}

/* An MA round's chunk replies wait at the PS for every member, so a
 * member sends its whole shard (up to SS_GRPC_ROUND_WINDOW chunks) before
 * it waits, whatever the S-EASGD window is (set to 2 here): with member B
 * absent, all 8 of A's chunks reach the PS, not only 2. The round then
 * closes with B's snapshot, the mean of both. Over gRPC, then on the PS's
 * bulk streams (the default path): there each waiting call needs a
 * stream of its own (a stream's server takes its calls one by one). */
static void round_sends_its_whole_shard(bool bulk) {
    char log[64], target[64], http[100], addr[64];
    snprintf(log, sizeof log, "/tmp/ss-test-rpc-w-%d.log", (int)getpid());
    char *args[] = {"--max-group-floats",
                    "200000",
                    "--round-deadline-ms",
                    "30000",
                    "--member-timeout-ms",
                    "60000",
                    "--http",
                    "127.0.0.1:0",
                    NULL};
    pid_t pid = proc_start_ps(log, target, sizeof target, "127.0.0.1:0", args);
    proc_address_after(log, "http on", addr, sizeof addr);
    snprintf(http, sizeof http, "http://%s", addr);
    mean_arg a[2];
    for (int k = 0; k < 2; k++) {
        ss__grpc_transport_config cfg = {.targets = target,
                                         .timeout_ms = 5000,
                                         .round_wait_ms = 30000,
                                         .chunk_floats = W_CHUNK,
                                         .window = 2,
                                         .bulk = bulk};
        ck_assert_int_eq(ss__grpc_transport_create(&cfg, &a[k].t, NULL, 0), SS_OK);
        ck_assert_int_eq(ss__transport_join(a[k].t, "w", W_FLOATS, &a[k].member), SS_OK);
        a[k].s = malloc(W_FLOATS * sizeof(float));
        a[k].avg = malloc(W_FLOATS * sizeof(float));
        ck_assert(a[k].s && a[k].avg);
        for (int i = 0; i < W_FLOATS; i++)
            a[k].s[i] = (float)(k * 2 + i % 5); /* mean: 1 + i % 5 */
    }
    pthread_t th[2];
    ck_assert_int_eq(pthread_create(&th[0], NULL, mean_thread, &a[0]), 0);
    int seen = 0;
    for (int i = 0; i < 1000 && (seen = chunks_with_one_snapshot(http)) < 8; i++)
        usleep(10000);
    ck_assert_msg(seen == 8, "%s: %d of 8 chunks reached the PS before the round closed",
                  bulk ? "streams" : "gRPC", seen);
    ck_assert_int_eq(pthread_create(&th[1], NULL, mean_thread, &a[1]), 0);
    for (int k = 0; k < 2; k++) {
        pthread_join(th[k], NULL);
        ck_assert_int_eq(a[k].st, SS_OK);
        for (int i = 0; i < W_FLOATS; i++)
            if (a[k].avg[i] != (float)(1 + i % 5))
                ck_abort_msg("member %d float %d: %g, not %d", k, i, a[k].avg[i], 1 + i % 5);
        ss__transport_destroy(a[k].t);
        free(a[k].s);
        free(a[k].avg);
    }
    kill(pid, SIGTERM);
    proc_wait(pid, 10);
    unlink(log);
}

START_TEST(test_round_sends_its_whole_shard_before_waiting) {
    round_sends_its_whole_shard(false);
    round_sends_its_whole_shard(true);
}
END_TEST

/* The mean of the members' starting values in the test below. */
static double i_mod_7_plus_1(int i) {
    return i % 7 + 1;
}

/* Compressed sync through the real PS: 3 engines in int8 MA rounds over a
 * group cut into 3 chunks. The first round resets the mirrors (float32);
 * a reply's quantization error goes out with the next round, so after a
 * few rounds the replicas agree to far less than one int8 step, and the
 * mean is the true one to within a step. Then S-EASGD (a new group):
 * x + c is conserved, as with float32. */
START_TEST(test_compressed_sync_over_grpc) {
    start_ps();
    enum { N = 300 };
    ss__transport *t[3];
    ss__replica *r[3];
    round_arg args[3];
    const ss__sync_params p = {.algo = SS_ALGO_MA};
    for (int k = 0; k < 3; k++) {
        ss__grpc_transport_config cfg = {.targets = ps_target,
                                         .timeout_ms = 5000,
                                         .round_wait_ms = 2000,
                                         .chunk_floats = 100,
                                         .encoding = SS_ENC_INT8};
        ck_assert_int_eq(ss__grpc_transport_create(&cfg, &t[k], NULL, 0), SS_OK);
        ck_assert_uint_eq(ss__transport_wire_bytes(t[k], N), ss__codec_size(SS_ENC_INT8, N));
        start_round_member(t[k], "dense", &p, N, k, i_mod_7_plus_1, &r[k], &args[k]);
    }
    run_rounds_together(args, 3, 4);
    double spread, off;
    replicas_agree(r, 3, N, i_mod_7_plus_1, &spread, &off);
    /* One int8 step of a reply is 12/255 = 0.047 here. */
    ck_assert_msg(spread < 1e-4, "replicas still %g apart", spread);
    ck_assert_msg(off < 0.047, "the mean is off by %g", off);
    stop_round_members(args, r, 3);
    /* S-EASGD with fp16: the member moves by -d, the PS's c by +d. */
    uint64_t m;
    float x[N], d[N], c[N], x0[N];
    ck_assert_int_eq(ss__transport_join(t[0], "easgd", N, &m), SS_OK);
    for (int i = 0; i < N; i++)
        x[i] = x0[i] = 0.001f * (float)i;
    ck_assert_int_eq(ss__transport_easgd_exchange(t[0], "easgd", m, x, 0.5f, d, N), SS_OK);
    for (int i = 0; i < N; i++)
        x[i] += 1.0f; /* the trainer moves on */
    for (int round = 0; round < 6; round++) {
        ck_assert_int_eq(ss__transport_easgd_exchange(t[0], "easgd", m, x, 0.5f, d, N), SS_OK);
        for (int i = 0; i < N; i++)
            x[i] -= d[i];
    }
    ck_assert_int_eq(ss__transport_read_central(t[0], "easgd", c, N), SS_OK);
    for (int i = 0; i < N; i++) {
        /* c started as x0 (the first snapshot), x at x0 + 1 after it. */
        ck_assert_msg(fabsf(x[i] + c[i] - (2 * x0[i] + 1.0f)) < 1e-5f, "x + c drifted at %d", i);
        ck_assert_msg(fabsf(x[i] - c[i]) < 0.05f, "x and c %g apart at %d", x[i] - c[i], i);
    }
    for (int k = 0; k < 3; k++)
        ss__transport_destroy(t[k]);
    stop_ps();
}
END_TEST

/* The first request's handler holds its bytes until every other call
 * has been refused (or 10 s). */
static void h_hold(void *ctx, const uint8_t *req, size_t len, ss__rpc_reply *reply) {
    (void)ctx, (void)req, (void)len;
    ss__counter *refused;
    ss__metrics_counter(echo_metrics, "shadowsync_rpc_inflight_refused_total",
                        "Requests refused because the server already held --max-inflight-mb of "
                        "request bytes.",
                        NULL, &refused);
    for (int i = 0; i < 10000 && ss__counter_value(refused) < ECHO_CHANNELS * ECHO_CALLS - 1; i++)
        usleep(1000);
    reply->data = malloc(1);
    reply->data[0] = 1;
    reply->len = 1;
}

/* The bytes a server holds at once are bounded: with room for one 1 MiB
 * request, every call that arrives while the first one is held is
 * refused, saying which limit, and the first is served. Each is timed. */
START_TEST(test_bytes_in_flight_are_bounded) {
    static const ss__rpc_method m = {"/t.T/Hold", h_hold, true, NULL, false, 0, NULL, false, false};
    ck_assert_int_eq(ss__metrics_create(&echo_metrics, NULL, 0), SS_OK);
    echo_max_inflight = ECHO_PAYLOAD + ECHO_PAYLOAD / 2;
    echo_rig g;
    echo_rig_start(&g, &m, 1, NULL);
    ss__rpc_call_windowed(g.rq, ECHO_CHANNELS * ECHO_CALLS, 20000, true, ECHO_CALLS);
    int ok = 0, refused = 0;
    for (int i = 0; i < ECHO_CHANNELS * ECHO_CALLS; i++) {
        ok += g.rq[i].status == SS_OK;
        refused += g.rq[i].status == SS_ERR_TOO_LARGE;
    }
    ck_assert_int_eq(ok, 1);
    ck_assert_int_eq(refused, ECHO_CHANNELS * ECHO_CALLS - 1);
    echo_rig_stop(&g);
    /* Every call, served or refused, is in the method's latency
     * histogram; the served one waited for all the refusals. */
    char *text;
    size_t len;
    ck_assert_int_eq(ss__metrics_render(echo_metrics, &text, &len), SS_OK);
    const char *count = strstr(text, "shadowsync_rpc_server_seconds_count{method=\"/t.T/Hold\"} ");
    const char *inf =
        strstr(text, "shadowsync_rpc_server_seconds_bucket{method=\"/t.T/Hold\",le=\"+Inf\"} ");
    ck_assert_msg(count && inf, "%s", text);
    ck_assert_int_eq(atoi(strchr(count, '}') + 2), ECHO_CHANNELS * ECHO_CALLS);
    ck_assert_int_eq(atoi(strchr(inf, '}') + 2), ECHO_CHANNELS * ECHO_CALLS);
    free(text);
    ss__metrics_destroy(echo_metrics);
    echo_metrics = NULL;
    echo_max_inflight = 0;
}
END_TEST

/* ---- readers and writers ---- */

static _Atomic int reads_in;
static _Atomic bool reads_go;

/* A bulk read that takes its time: held until reads_go (or 10 s). */
static void h_read_held(void *ctx, const uint8_t *req, size_t len, ss__rpc_reply *reply) {
    (void)ctx, (void)req, (void)len;
    atomic_fetch_add(&reads_in, 1);
    for (int i = 0; i < 10000 && !atomic_load(&reads_go); i++)
        usleep(1000);
    reply->data = malloc(1);
    reply->data[0] = 1;
    reply->len = 1;
}

static void h_write(void *ctx, const uint8_t *req, size_t len, ss__rpc_reply *reply) {
    (void)ctx, (void)req, (void)len;
    reply->data = malloc(1);
    reply->data[0] = 2;
    reply->len = 1;
}

enum { MANY_READS = SS_RPC_DEFAULT_READS_PER_PEER + SS_RPC_WAITING_READS_PER_PEER + 2 };
typedef struct reads_arg {
    ss__rpc_request rq[MANY_READS];
    size_t n;
    uint8_t byte;
} reads_arg;

static void *run_reads(void *p) {
    reads_arg *a = p;
    ss__rpc_call_windowed(a->rq, a->n, 20000, false, (uint32_t)a->n);
    return NULL;
}

static void start_reads(reads_arg *a, ss__rpc_channel *ch, const char *method, size_t n,
                        pthread_t *th) {
    memset(a, 0, sizeof *a);
    a->n = n;
    a->byte = 1;
    for (size_t i = 0; i < n; i++)
        a->rq[i] = (ss__rpc_request){.ch = ch, .method = method, .req = &a->byte, .len = 1};
    atomic_store(&reads_in, 0);
    atomic_store(&reads_go, false);
    pthread_create(th, NULL, run_reads, a);
}

static void wait_for(_Atomic int *v, int want) {
    for (int i = 0; i < 10000 && atomic_load(v) < want; i++)
        usleep(1000);
    ck_assert_int_eq(atomic_load(v), want);
}

static ss__counter *rpc_counter(ss__metrics *m, const char *name, const char *help) {
    ss__counter *c;
    ck_assert_int_eq(ss__metrics_counter(m, name, help, NULL, &c), SS_OK);
    return c;
}

/* Slow reads (each handler on a thread of its own) of one connection,
 * held until `waiting` of them wait their turn; then all let go. */
static void held_reads(reads_arg *a, ss__rpc_channel *ch, size_t n, ss__counter *waited,
                       uint64_t waiting) {
    pthread_t th;
    const uint64_t before = ss__counter_value(waited);
    start_reads(a, ch, "/t.T/Slow", n, &th);
    wait_for(&reads_in, SS_RPC_DEFAULT_READS_PER_PEER);
    for (int i = 0; i < 10000 && ss__counter_value(waited) - before < waiting; i++)
        usleep(1000);
    ck_assert_uint_eq(ss__counter_value(waited) - before, waiting);
    usleep(100000);
    /* the waiting ones' handlers have not run */
    ck_assert_int_eq(atomic_load(&reads_in), SS_RPC_DEFAULT_READS_PER_PEER);
    atomic_store(&reads_go, true);
    pthread_join(th, NULL);
}

/* A server of methods m with one thread of each kind; a call of `held`
 * (on *held_ch) holds its thread while a call of `other` (on *other_ch)
 * must be served within 3 s; then the held one is let go. */
static void served_while_held(const ss__rpc_server_config *cfg, const ss__rpc_method *m, size_t n,
                              const char *held, const char *other, ss__rpc_server **srv,
                              ss__rpc_channel **held_ch, ss__rpc_channel **other_ch, reads_arg *a) {
    ck_assert_int_eq(ss__rpc_server_start(cfg, m, n, NULL, srv, NULL, 0), SS_OK);
    char target[32];
    snprintf(target, sizeof target, "127.0.0.1:%d", ss__rpc_server_port(*srv));
    ck_assert_int_eq(ss__rpc_channel_create(target, 0, NULL, held_ch, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__rpc_channel_create(target, 0, NULL, other_ch, NULL, 0), SS_OK);
    pthread_t th;
    start_reads(a, *held_ch, held, 1, &th);
    wait_for(&reads_in, 1); /* its thread is held */
    uint8_t one = 1, *resp = NULL;
    size_t rl;
    ck_assert_int_eq(ss__rpc_call(*other_ch, other, &one, 1, 3000, false, &resp, &rl, NULL, 0),
                     SS_OK);
    ck_assert_uint_eq(resp[0], 2);
    free(resp);
    atomic_store(&reads_go, true);
    pthread_join(th, NULL);
    ck_assert_int_eq(a->rq[0].status, SS_OK);
    free(a->rq[0].resp);
}

/* Reads never hold up writers: with the one reader thread held in a slow
 * read, a write is served at once (before, reads and writes shared the
 * threads: the write waited for the read). And one connection may have
 * SS_RPC_DEFAULT_READS_PER_PEER reads in flight; the next ones wait their
 * turn (a trainer's tables share a connection: refused, they failed its
 * lookups), and only past SS_RPC_WAITING_READS_PER_PEER waiting is a read
 * refused at the door, saying so. */
START_TEST(test_reads_never_hold_up_writers) {
    static const ss__rpc_method m[] = {
        {"/t.T/Read", h_read_held, false, NULL, true, 0, NULL, false, false},
        {"/t.T/Slow", h_read_held, true, NULL, true, 0, NULL, false, false},
        {"/t.T/Write", h_write, false, NULL, false, 0, NULL, false, false}};
    ss__metrics *metrics;
    ck_assert_int_eq(ss__metrics_create(&metrics, NULL, 0), SS_OK);
    ss__rpc_server_config cfg = {
        .listen = "127.0.0.1:0", .threads = 1, .metrics = metrics, .max_blocked_calls = 16};
    ss__rpc_server *srv;
    ss__rpc_channel *reader, *writer;
    static reads_arg a;
    served_while_held(&cfg, m, 3, "/t.T/Read", "/t.T/Write", &srv, &reader, &writer, &a);

    ss__counter *waited = rpc_counter(metrics, "shadowsync_rpc_reads_waited_total",
                                      "Reads that waited for their turn because their connection "
                                      "already had its share (reads_per_peer) in flight.");
    ss__counter *unfair = rpc_counter(metrics, "shadowsync_rpc_unfair_refused_total",
                                      "Reads refused because their connection already had its "
                                      "share (reads_per_peer) in flight and 256 more waiting.");
    held_reads(&a, reader, 6, waited, 6 - SS_RPC_DEFAULT_READS_PER_PEER);
    for (int i = 0; i < 6; i++) {
        ck_assert_msg(a.rq[i].status == SS_OK, "read %d: %s", i, a.rq[i].msg);
        free(a.rq[i].resp);
    }
    ck_assert_int_eq(atomic_load(&reads_in), 6); /* the waiting ones went after */
    ck_assert_uint_eq(ss__counter_value(unfair), 0);

    /* As many as may wait, and 2 more: those 2 are refused. */
    held_reads(&a, reader, MANY_READS, waited, SS_RPC_WAITING_READS_PER_PEER);
    int ok = 0, refused = 0;
    for (int i = 0; i < MANY_READS; i++) {
        ok += a.rq[i].status == SS_OK;
        refused += a.rq[i].status == SS_ERR_TOO_LARGE && strstr(a.rq[i].msg, "share") != NULL;
        free(a.rq[i].resp);
    }
    ck_assert_int_eq(ok, MANY_READS - 2);
    ck_assert_int_eq(refused, 2);
    ck_assert_uint_eq(ss__counter_value(unfair), 2);
    ss__rpc_channel_destroy(reader);
    ss__rpc_channel_destroy(writer);
    ss__rpc_server_stop(srv);
    ss__metrics_destroy(metrics);
}
END_TEST

/* ---- the HTTP endpoint under a connection flood ---- */

#define FLOOD 70 /* more than the old 64-connection cap */

typedef struct flood {
    int fds[FLOOD];
    _Atomic bool stop;
} flood;

/* Slowloris from 127.0.0.2 (another client address than the probe's):
 * every connection sends a request line, then one header byte every
 * 300 ms, never finishing its headers. */
static void *trickle(void *p) {
    flood *f = p;
    while (!atomic_load(&f->stop)) {
        for (int i = 0; i < FLOOD; i++)
            if (f->fds[i] >= 0 && send(f->fds[i], "X", 1, MSG_NOSIGNAL) != 1) {
                close(f->fds[i]);
                f->fds[i] = -1;
            }
        usleep(300000);
    }
    return NULL;
}

static int connect_from(const char *from, int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in src = {.sin_family = AF_INET},
                       dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, from, &src.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
    if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0 ||
        connect(fd, (struct sockaddr *)&dst, sizeof dst) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* 70 connections of one client that never finish their headers took
 * every slot of the endpoint (64, a thread each) and /healthz went
 * unanswered for the whole attack: a liveness probe would restart the
 * PS. One address may now hold only a few; the probe from another is
 * answered while the flood goes on. */
START_TEST(test_http_answers_healthz_during_a_slowloris) {
    ss__metrics *m;
    ck_assert_int_eq(ss__metrics_create(&m, NULL, 0), SS_OK);
    ss__http_config cfg = {.bind = "127.0.0.1:0", .metrics = m};
    ss__http_server *h;
    ck_assert_int_eq(ss__http_server_start(&cfg, &h, NULL, 0), SS_OK);
    const int port = ss__http_server_port(h);
    flood f = {.stop = false};
    int open = 0;
    for (int i = 0; i < FLOOD; i++) {
        f.fds[i] = connect_from("127.0.0.2", port);
        if (f.fds[i] >= 0 &&
            send(f.fds[i], "GET /healthz HTTP/1.1\r\nHost: x\r\n", 32, MSG_NOSIGNAL) == 32)
            open++;
    }
    ck_assert_int_eq(open, FLOOD); /* the kernel accepts them all: the endpoint decides */
    pthread_t th;
    pthread_create(&th, NULL, trickle, &f);
    usleep(500000); /* the endpoint has taken what it takes */
    char base[64], *body = NULL;
    snprintf(base, sizeof base, "http://127.0.0.1:%d", port);
    long code = http_request(base, "/healthz", NULL, NULL, 0, &body);
    atomic_store(&f.stop, true);
    pthread_join(th, NULL);
    ck_assert_int_eq(code, 200);
    ck_assert_str_eq(body, "ok\n");
    free(body);
    for (int i = 0; i < FLOOD; i++)
        if (f.fds[i] >= 0)
            close(f.fds[i]);
    ss__http_server_stop(h);
    ss__metrics_destroy(m);
}
END_TEST

/* The peers' methods have a queue of their own: with the one writer
 * thread held in a handler that waits (as a PS's request waits for rows a
 * peer is giving), a peers_only call is served at once (before, it was
 * dispatched by the held thread's queue and waited: each PS of a fleet
 * moving rows held the other's Handoff to its deadline). */
START_TEST(test_peers_have_a_queue_of_their_own) {
    static const ss__rpc_method m[] = {
        {"/t.T/Held", h_read_held, false, NULL, false, 0, NULL, false, false},
        {"/t.T/Peer", h_write, false, NULL, false, 0, NULL, true, false}};
    ss__rpc_server_config cfg = {.listen = "127.0.0.1:0", .threads = 1};
    ss__rpc_server *srv;
    ss__rpc_channel *held, *peer;
    static reads_arg a;
    served_while_held(&cfg, m, 2, "/t.T/Held", "/t.T/Peer", &srv, &held, &peer, &a);
    ss__rpc_channel_destroy(held);
    ss__rpc_channel_destroy(peer);
    ss__rpc_server_stop(srv);
}
END_TEST

SS_CHECK_MAIN("rpc", 60, NULL, NULL, test_easgd_over_grpc, test_ma_round_of_three_engines_over_grpc,
              test_still_member_joins_a_round_through_the_ps, test_bad_input_never_hurts_the_ps,
              test_server_on_a_taken_port_fails_cleanly, test_ps_down_is_said_at_once,
              test_tcp_reachable_says_why_not, test_a_lost_syn_is_sent_again,
              test_a_partitioned_stream_is_given_up, test_window_bounds_calls_in_flight_per_channel,
              test_batch_stats_and_round_trip, test_window_adapts_to_the_round_trip,
              test_compressed_sync_over_grpc, test_other_chunking_is_refused_with_why,
              test_round_sends_its_whole_shard_before_waiting, test_a_silent_connection_is_given_up,
              test_http_answers_healthz_during_a_slowloris, test_bytes_in_flight_are_bounded,
              test_reads_never_hold_up_writers, test_peers_have_a_queue_of_their_own)
