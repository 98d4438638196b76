/* rpc/: a real shadowsync-ps process on 127.0.0.1, engines talking to it
 * through the gRPC transport, and bad input that must not hurt it. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "procs.h"
#include "ps/dense_service.h"
#include "rpc/grpc_transport.h"
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
    ck_assert_int_eq(ss__grpc_transport_create(&cfg, &t), SS_OK);
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

START_TEST(test_ma_round_of_three_engines_over_grpc) {
    start_ps();
    ss__transport *t[3];
    ss__engine *e[3];
    ss__replica *r[3];
    round_arg args[3];
    pthread_t th[3];
    ss__sync_params p = {.algo = SS_ALGO_MA};
    for (int k = 0; k < 3; k++) {
        t[k] = connect_ps(); /* one connection per trainer, as across processes */
        ss__engine_config cfg = {.transport = t[k], .threads = 1};
        ck_assert_int_eq(ss__engine_create(&cfg, &e[k]), SS_OK);
        ck_assert_int_eq(ss__replica_create(3, &r[k]), SS_OK);
        for (int i = 0; i < 3; i++)
            ss__replica_data(r[k])[i] = (float)(k * (i + 1)); /* means: 1, 2, 3 */
        args[k].e = e[k];
        ck_assert_int_eq(ss__engine_add_group(e[k], "dense", r[k], &p, &args[k].g), SS_OK);
    }
    for (int k = 0; k < 3; k++)
        pthread_create(&th[k], NULL, run_one_round, &args[k]);
    for (int k = 0; k < 3; k++) {
        pthread_join(th[k], NULL);
        ck_assert_int_eq(args[k].st, SS_OK);
        for (int i = 0; i < 3; i++)
            ck_assert_float_eq(ss__replica_data(r[k])[i], (float)(i + 1));
    }
    for (int k = 0; k < 3; k++) {
        ss__engine_destroy(e[k]);
        ss__replica_destroy(r[k]);
        ss__transport_destroy(t[k]);
    }
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
    ck_assert_int_eq(ss__rpc_channel_create(ps_target, 0, NULL, &ch), SS_OK);
    const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x01, 0x02};
    uint8_t *resp;
    size_t len;
    char msg[256] = "";
    ck_assert_int_eq(ss__rpc_call(ch, "/shadowsync.v1.DenseSync/EasgdExchange", junk, sizeof junk,
                                  5000, false, &resp, &len, msg, sizeof msg),
                     SS_ERR_PARSE);
    ck_assert_ptr_nonnull(strstr(msg, "not a valid"));
    ck_assert_int_eq(ss__rpc_call(ch, "/shadowsync.v1.DenseSync/NoSuchMethod", junk, sizeof junk,
                                  5000, false, &resp, &len, msg, sizeof msg),
                     SS_ERR_NOT_FOUND); /* UNIMPLEMENTED, at once */
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
    ck_assert_int_eq(ss__rpc_server_start(&cfg, methods, n, &svc, &srv), SS_ERR_IO);
    ck_assert_ptr_null(srv);
    ss__rpc_server_config bad = {.listen = "127.0.0.1:0", .threads = 0};
    ck_assert_int_eq(ss__rpc_server_start(&bad, methods, n, &svc, &srv), SS_ERR_INVALID_ARGUMENT);
    stop_ps();
}
END_TEST

START_TEST(test_ps_down_times_out) {
    ss__transport *t;
    ss__grpc_transport_config cfg = {.targets = "127.0.0.1:1", .timeout_ms = 500};
    ck_assert_int_eq(ss__grpc_transport_create(&cfg, &t), SS_OK);
    uint64_t m;
    /* Calls wait for a server to come up, bounded by their deadline. */
    ck_assert_int_eq(ss__transport_join(t, "g", 2, &m), SS_ERR_TIMEOUT);
    ss__transport_destroy(t);
}
END_TEST

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    return ss__check_tests("rpc", 60, NULL, NULL, test_easgd_over_grpc,
                           test_ma_round_of_three_engines_over_grpc,
                           test_bad_input_never_hurts_the_ps,
                           test_server_on_a_taken_port_fails_cleanly, test_ps_down_times_out);
}
