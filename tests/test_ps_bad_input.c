/* Bad input at every DenseSync request path, sent as raw gRPC calls to the
 * PS's service code served over TCP on 127.0.0.1 (in this process, so the
 * counters can be read): each gets its status, is counted, and leaves the
 * central variable unchanged. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "common/clock.h"
#include "ps/dense_service.h"
#include "rpc/auth.h"
#include "rpc/dense/dense_sync.pb-c.h"
#include "rpc/pb_wire.h"
#include "rpc_checks.h"
#include "shadow/codec.h"
#include "shadow/inproc_transport.h"

#define SVC "/shadowsync.v1.DenseSync/"

static ss__metrics *metrics;
static ss__transport *backend;
static ss__rpc_server *srv;
static ss__dense_service svc;
static ss__rpc_channel *ch;
static uint64_t member;

static void setup(void) {
    ck_assert_int_eq(ss__metrics_create(&metrics, NULL, 0), SS_OK);
    ss__inproc_config icfg = {
        .round_deadline_ms = 200, .max_groups = 6, .max_members = 5, .max_total_floats = 4500};
    ck_assert_int_eq(ss__inproc_transport_create(&icfg, &backend, NULL, 0), SS_OK);
    svc = (ss__dense_service){.centre = ss__inproc_central(backend), .max_floats = 1000};
    ck_assert_int_eq(ss__metrics_counter(metrics, "rejected", "r", NULL, &svc.rejected), SS_OK);
    size_t n;
    const ss__rpc_method *m = ss__dense_service_methods(&n);
    ss__rpc_server_config cfg = {.listen = "127.0.0.1:0",
                                 .threads = 2,
                                 .max_message_bytes = 1000 * 4 + 4096,
                                 .metrics = metrics};
    ck_assert_int_eq(ss__rpc_server_start(&cfg, m, n, &svc, &srv, NULL, 0), SS_OK);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", ss__rpc_server_port(srv));
    ck_assert_int_eq(ss__rpc_channel_create(target, 0, NULL, &ch, NULL, 0), SS_OK);
    /* Connect before any test: a 20 ms call must not also pay for the
     * connection. Under ASan and load it could expire while connecting;
     * that is our best explanation (not reproduced) of the one flake of
     * test_expired_deadline, whose next call got UNAVAILABLE. */
    uint8_t *resp = NULL;
    size_t rlen;
    ck_assert_int_eq(ss__rpc_call(ch, "/shadowsync.v1.DenseSync/NoSuchMethod", (const uint8_t *)"",
                                  0, 30000, true, &resp, &rlen, NULL, 0),
                     SS_ERR_NOT_FOUND);
    free(resp);
    /* Group "g" of 2 floats, central variable [1, 1]. */
    ck_assert_int_eq(ss__transport_join(backend, "g", 2, &member), SS_OK);
    float d[2];
    ck_assert_int_eq(
        ss__transport_easgd_exchange(backend, "g", member, (const float[]){1, 1}, 0.5f, d, 2),
        SS_OK);
}

static void teardown(void) {
    ss__rpc_channel_destroy(ch);
    ss__rpc_server_stop(srv);
    ss__transport_destroy(backend);
    ss__metrics_destroy(metrics);
}

/* Sends a packed message; returns the call's status, its message in msg. */
static ss_status send_msg_saying(const char *method, const ProtobufCMessage *m, uint32_t timeout_ms,
                                 char *msg, size_t msglen) {
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(len ? len : 1), *resp = NULL;
    protobuf_c_message_pack(m, buf);
    size_t rlen;
    ss_status st = ss__rpc_call(ch, method, buf, len, timeout_ms, false, &resp, &rlen, msg, msglen);
    free(buf);
    free(resp);
    return st;
}

static ss_status send_msg(const char *method, const ProtobufCMessage *m, uint32_t timeout_ms) {
    return send_msg_saying(method, m, timeout_ms, NULL, 0);
}

static ss_status easgd(const char *group, uint64_t mem, const float *s, size_t n) {
    Shadowsync__V1__EasgdRequest r = SHADOWSYNC__V1__EASGD_REQUEST__INIT;
    r.group = (char *)group;
    r.member = mem;
    r.alpha = 0.5f;
    r.snapshot.data = (uint8_t *)s;
    r.snapshot.len = n * sizeof(float);
    return send_msg(SVC "EasgdExchange", &r.base, 5000);
}

/* Join a group of `size` floats, over the wire. */
static ss_status join(const char *group, uint64_t size) {
    Shadowsync__V1__JoinRequest j = SHADOWSYNC__V1__JOIN_REQUEST__INIT;
    j.group = (char *)group;
    j.size = size;
    return send_msg(SVC "Join", &j.base, 5000);
}

/* The central variable is still [1, 1]. */
static void assert_central_unchanged(void) {
    float c[2];
    ck_assert_int_eq(ss__transport_read_central(backend, "g", c, 2), SS_OK);
    ck_assert_float_eq(c[0], 1.0f);
    ck_assert_float_eq(c[1], 1.0f);
}

static uint64_t rejected(void) {
    return ss__counter_value(svc.rejected);
}

START_TEST(test_wrong_group_size) {
    uint64_t before = rejected();
    ck_assert_int_eq(easgd("g", member, (const float[]){5, 5, 5}, 3), SS_ERR_SIZE_MISMATCH);
    ck_assert_int_eq(join("g", 3), SS_ERR_SIZE_MISMATCH);
    Shadowsync__V1__ReadCentralRequest rc = SHADOWSYNC__V1__READ_CENTRAL_REQUEST__INIT;
    rc.group = "g";
    rc.size = 7;
    ck_assert_int_eq(send_msg(SVC "ReadCentral", &rc.base, 5000), SS_ERR_SIZE_MISMATCH);
    ck_assert_uint_eq(rejected(), before + 3);
    assert_central_unchanged();
}
END_TEST

START_TEST(test_unknown_group_and_member) {
    uint64_t before = rejected();
    ck_assert_int_eq(easgd("nope", member, (const float[]){5, 5}, 2), SS_ERR_NOT_FOUND);
    ck_assert_int_eq(easgd("g", member + 77, (const float[]){5, 5}, 2), SS_ERR_NOT_FOUND);
    Shadowsync__V1__HeartbeatRequest hb = SHADOWSYNC__V1__HEARTBEAT_REQUEST__INIT;
    hb.group = "g";
    hb.member = member + 77;
    ck_assert_int_eq(send_msg(SVC "Heartbeat", &hb.base, 5000), SS_ERR_NOT_FOUND);
    Shadowsync__V1__LeaveRequest lv = SHADOWSYNC__V1__LEAVE_REQUEST__INIT;
    lv.group = "nope";
    ck_assert_int_eq(send_msg(SVC "Leave", &lv.base, 5000), SS_ERR_NOT_FOUND);
    ck_assert_int_eq(join("", 2), SS_ERR_INVALID_ARGUMENT);
    /* Names travel into /status, metric labels and file names: a quote,
     * a backslash, a newline or a path are refused; a chunk range is the
     * one suffix allowed. */
    ck_assert_int_eq(join("a\"b", 2), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(join("a\\b", 2), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(join("a\nb", 2), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(join("../x", 2), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(join("g[0:2)x", 2), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(join("g[0:2)", 2), SS_OK);
    ck_assert_uint_eq(rejected(), before + 10);
    assert_central_unchanged();
}
END_TEST

/* A RoundMean request of member mem of group, its snapshot the two
 * floats at x (they outlive the request). */
static Shadowsync__V1__RoundRequest round_request(const char *group, uint64_t mem, float x[2]) {
    Shadowsync__V1__RoundRequest r = SHADOWSYNC__V1__ROUND_REQUEST__INIT;
    r.group = (char *)group;
    r.member = mem;
    r.snapshot.data = (uint8_t *)x;
    r.snapshot.len = 2 * sizeof(float);
    return r;
}

START_TEST(test_nan_and_inf_payloads) {
    uint64_t before = rejected();
    ck_assert_int_eq(easgd("g", member, (const float[]){NAN, 1}, 2), SS_ERR_NON_FINITE);
    ck_assert_int_eq(easgd("g", member, (const float[]){1, -INFINITY}, 2), SS_ERR_NON_FINITE);
    float inf[2] = {INFINITY, 0};
    Shadowsync__V1__RoundRequest r = round_request("g", member, inf);
    ck_assert_int_eq(send_msg(SVC "RoundMean", &r.base, 5000), SS_ERR_NON_FINITE);
    /* A payload that is not whole floats. */
    r.snapshot.len = 5;
    ck_assert_int_eq(send_msg(SVC "RoundMean", &r.base, 5000), SS_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(rejected(), before + 4);
    assert_central_unchanged();
}
END_TEST

/* S-BMUF's parameters are checked before the centre is touched, and the
 * refusal says which ranges hold. */
START_TEST(test_bad_bmuf_parameters_say_what) {
    uint64_t before = rejected();
    float x[2] = {3, 3};
    Shadowsync__V1__RoundRequest r = round_request("g", member, x);
    r.bmuf = true;
    r.bmuf_eta = 1.5f; /* past [0, 1) */
    r.bmuf_zeta = 1.0f;
    char msg[256] = "";
    ck_assert_int_eq(send_msg_saying(SVC "RoundMean", &r.base, 5000, msg, sizeof msg),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(msg, "bmuf needs eta in [0, 1)"), "said: %s", msg);
    ck_assert_uint_eq(rejected(), before + 1);
    assert_central_unchanged();
}
END_TEST

START_TEST(test_oversized_message_and_group) {
    /* Over the group limit (1000 floats) but under the message limit. */
    uint64_t before = rejected();
    ck_assert_int_eq(join("big", 2000), SS_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(rejected(), before + 1);
    /* Over the receive limit (8096 bytes): RESOURCE_EXHAUSTED before any
     * handler runs, counted as an error of the method. */
    static float huge[3000];
    ck_assert_int_eq(easgd("g", member, huge, 3000), SS_ERR_NO_MEMORY);
    char *text;
    size_t tlen;
    ck_assert_int_eq(ss__metrics_render(metrics, &text, &tlen), SS_OK);
    ck_assert_ptr_nonnull(strstr(text, "method=\"/shadowsync.v1.DenseSync/EasgdExchange\","
                                       "result=\"error\"} 1\n"));
    free(text);
    /* Far over it (gRPC's own cap, twice ours): refused by gRPC itself. */
    static float absurd[5000];
    ck_assert_int_eq(easgd("g", member, absurd, 5000), SS_ERR_NO_MEMORY);
    assert_central_unchanged();
    float ok[2] = {3, 1};
    ck_assert_int_eq(easgd("g", member, ok, 2), SS_OK);
    /* A method's own limit: a Join is bytes (SS_RPC_SMALL_REQUEST), so a
     * 6,000-byte one is refused, though the server takes 8,096 for a chunk. */
    static uint8_t fat_join[6000];
    uint8_t *resp = NULL;
    size_t rl;
    char msg[256] = "";
    ck_assert_int_eq(ss__rpc_call(ch, SVC "Join", fat_join, sizeof fat_join, 5000, true, &resp, &rl,
                                  msg, sizeof msg),
                     SS_ERR_NO_MEMORY);
    free(resp);
    ck_assert_ptr_nonnull(strstr(msg, "over the limit of 4096"));
    /* Every small method at its limit's edge: at the limit the message is
     * read (whatever its handler then says of it), one byte over it is
     * refused for its size, naming it. */
    static const char *const small[] = {"Join", "Leave", "ReadCentral", "Heartbeat", "Checkpoint"};
    for (size_t i = 0; i < sizeof small / sizeof *small; i++) {
        char path[64];
        snprintf(path, sizeof path, SVC "%s", small[i]);
        for (size_t len = 4095; len <= 4097; len++) {
            resp = NULL;
            msg[0] = '\0';
            ss_status st =
                ss__rpc_call(ch, path, fat_join, len, 5000, true, &resp, &rl, msg, sizeof msg);
            free(resp);
            if (len <= 4096)
                ck_assert_msg(!strstr(msg, "over the limit"), "%s of %zu bytes: %s", path, len,
                              msg);
            else
                ck_assert_msg(st == SS_ERR_NO_MEMORY && strstr(msg, "over the limit of 4096"),
                              "%s of %zu bytes: %s", path, len, msg);
        }
    }
}
END_TEST

START_TEST(test_garbage_bytes_and_unknown_method) {
    uint64_t before = rejected();
    const char *paths[] = {SVC "Join",        SVC "Leave",     SVC "EasgdExchange", SVC "RoundMean",
                           SVC "ReadCentral", SVC "Heartbeat", SVC "Checkpoint"};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++)
        assert_garbage_refused(ch, paths[i], false, SS_ERR_PARSE, "not a valid");
    ck_assert_uint_eq(rejected(), before + 7);
    assert_garbage_refused(ch, SVC "NoSuchMethod", false, SS_ERR_NOT_FOUND, NULL); /* at once */
    assert_central_unchanged();
}
END_TEST

START_TEST(test_expired_deadline) {
    /* A round of two members where only one contributes: the server waits
     * up to its 200 ms round deadline, the call's deadline is 20 ms. */
    uint64_t a, b;
    ck_assert_int_eq(ss__transport_join(backend, "slow", 2, &a), SS_OK);
    ck_assert_int_eq(ss__transport_join(backend, "slow", 2, &b), SS_OK);
    float s[2] = {1, 2};
    Shadowsync__V1__RoundRequest r = round_request("slow", a, s);
    ck_assert_int_eq(send_msg(SVC "RoundMean", &r.base, 20), SS_ERR_TIMEOUT);
    assert_central_unchanged();
    /* The server still answers. */
    float ok[2] = {3, 1};
    ck_assert_int_eq(easgd("g", member, ok, 2), SS_OK);
}
END_TEST

/* A member id is a credential: the ids of members that joined one after
 * another are not neighbours, so Leave (or a snapshot) with a guessed id
 * near one's own gets NOT_FOUND and nobody is removed. */
START_TEST(test_member_ids_are_not_guessable) {
    uint64_t id[4];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(ss__transport_join(backend, "m", 2, &id[i]), SS_OK);
    uint64_t before = rejected();
    for (int i = 0; i < 4; i++) {
        for (int64_t delta = -3; delta <= 3; delta++) {
            if (delta == 0)
                continue;
            uint64_t guess = id[i] + (uint64_t)delta;
            bool taken = false;
            for (int j = 0; j < 4; j++)
                taken = taken || guess == id[j];
            ck_assert_msg(!taken, "member %d's id %llu is %lld from another member's", i,
                          (unsigned long long)id[i], (long long)delta);
            Shadowsync__V1__LeaveRequest lv = SHADOWSYNC__V1__LEAVE_REQUEST__INIT;
            lv.group = "m";
            lv.member = guess;
            ck_assert_int_eq(send_msg(SVC "Leave", &lv.base, 5000), SS_ERR_NOT_FOUND);
        }
    }
    ck_assert_uint_eq(rejected(), before + 4 * 6);
    /* Every real member is still in: a heartbeat of each succeeds. */
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(ss__transport_heartbeat(backend, "m", id[i]), SS_OK);
}
END_TEST

/* Join over the wire; the server's message in msg. */
static ss_status join_msg(const char *group, uint64_t size, char *msg, size_t msglen) {
    Shadowsync__V1__JoinRequest j = SHADOWSYNC__V1__JOIN_REQUEST__INIT;
    j.group = (char *)group;
    j.size = size;
    uint8_t buf[256], *resp = NULL;
    size_t len = shadowsync__v1__join_request__pack(&j, buf), rl;
    ss_status st = ss__rpc_call(ch, SVC "Join", buf, len, 5000, false, &resp, &rl, msg, msglen);
    free(resp);
    return st;
}

/* This PS holds at most 6 groups, 5 members a group, 4500 floats in all
 * (a group of n takes 3 n: centre, round sum, round result): each refusal
 * says which limit, is counted under it, and lets nothing in. */
START_TEST(test_limits_on_groups_members_floats) {
    char msg[512];
    ck_assert_int_eq(join_msg("big", 1000, msg, sizeof msg), SS_OK); /* 3 x 1002 floats */
    ck_assert_int_eq(join_msg("big2", 600, msg, sizeof msg), SS_ERR_TOO_LARGE);
    ck_assert_ptr_nonnull(strstr(msg, "--max-total-floats"));
    const char *more[] = {"a1", "a2", "a3", "a4"};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(join_msg(more[i], 2, msg, sizeof msg), SS_OK);
    ck_assert_int_eq(join_msg("a5", 2, msg, sizeof msg), SS_ERR_TOO_LARGE); /* the 7th group */
    ck_assert_ptr_nonnull(strstr(msg, "--max-groups"));
    for (int i = 0; i < 4; i++) /* "g" has 1 member: 4 more make 5 */
        ck_assert_int_eq(join_msg("g", 2, msg, sizeof msg), SS_OK);
    ck_assert_int_eq(join_msg("g", 2, msg, sizeof msg), SS_ERR_TOO_LARGE);
    ck_assert_ptr_nonnull(strstr(msg, "--max-members"));
    uint64_t n[SS_CENTRAL_LIMITS];
    ss__central_refusals(ss__inproc_central(backend), n);
    ck_assert_uint_eq(n[SS_CENTRAL_LIMIT_GROUPS], 1);
    ck_assert_uint_eq(n[SS_CENTRAL_LIMIT_MEMBERS], 1);
    ck_assert_uint_eq(n[SS_CENTRAL_LIMIT_FLOATS], 1);
    assert_central_unchanged();
}
END_TEST

/* The value of an unlabelled counter the server registered. */
static uint64_t counter_of(ss__metrics *m, const char *name, const char *help) {
    ss__counter *c;
    ck_assert_int_eq(ss__metrics_counter(m, name, help, NULL, &c), SS_OK);
    return ss__counter_value(c);
}

typedef struct round_arg {
    ss__rpc_channel *ch;
    const char *group;
    uint64_t member;
    ss_status st;
} round_arg;

static ss_status round_call(ss__rpc_channel *c, const char *group, uint64_t mem, char *msg,
                            size_t msglen) {
    float x[2] = {1, 2};
    Shadowsync__V1__RoundRequest r = round_request(group, mem, x);
    uint8_t buf[256], *resp = NULL;
    size_t len = shadowsync__v1__round_request__pack(&r, buf), rl;
    ss_status st =
        ss__rpc_call(c, SVC "RoundMean", buf, len, 20000, false, &resp, &rl, msg, msglen);
    free(resp);
    return st;
}

static void *round_thread(void *p) {
    round_arg *a = p;
    a->st = round_call(a->ch, a->group, a->member, NULL, 0);
    return NULL;
}

/* Each waiting round call holds a thread: with --max-blocked-calls 2, a
 * third waiting call is refused at once (not queued, no thread), counted,
 * and the two waiting ones still close. */
START_TEST(test_blocked_calls_are_bounded) {
    ss__metrics *m;
    ss__transport *b;
    ss__rpc_server *s;
    ss__rpc_channel *c;
    ck_assert_int_eq(ss__metrics_create(&m, NULL, 0), SS_OK);
    ss__inproc_config icfg = {.round_deadline_ms = 3000};
    ck_assert_int_eq(ss__inproc_transport_create(&icfg, &b, NULL, 0), SS_OK);
    ss__dense_service sv = {.centre = ss__inproc_central(b), .max_floats = 1000};
    size_t nm;
    const ss__rpc_method *meth = ss__dense_service_methods(&nm);
    ss__rpc_server_config cfg = {
        .listen = "127.0.0.1:0", .threads = 2, .metrics = m, .max_blocked_calls = 2};
    ck_assert_int_eq(ss__rpc_server_start(&cfg, meth, nm, &sv, &s, NULL, 0), SS_OK);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", ss__rpc_server_port(s));
    ck_assert_int_eq(ss__rpc_channel_create(target, 0, NULL, &c, NULL, 0), SS_OK);
    uint64_t id[3];
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(ss__transport_join(b, "r", 2, &id[i]), SS_OK);
    round_arg a[2] = {{c, "r", id[0], SS_OK}, {c, "r", id[1], SS_OK}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, round_thread, &a[i]), 0);
    /* Both contributions are in (they wait for the third member). */
    for (int tries = 0; tries < 2000; tries++) {
        size_t k = 0;
        ss__central_group_info info;
        ss__central_describe(ss__inproc_central(b), &info, 1, &k);
        if (k == 1 && info.contributors == 2)
            break;
        ss__sleep_ns(1000000);
    }
    char msg[256] = "";
    ck_assert_int_eq(round_call(c, "r", id[2], msg, sizeof msg), SS_ERR_TOO_LARGE);
    ck_assert_ptr_nonnull(strstr(msg, "--max-blocked-calls"));
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(a[i].st, SS_OK); /* the round closed on its deadline */
    }
    ck_assert_uint_eq(counter_of(m, "shadowsync_rpc_blocked_refused_total",
                                 "Calls refused because --max-blocked-calls handlers were "
                                 "already waiting (MA/BMUF rounds)."),
                      1);
    ss__rpc_channel_destroy(c);
    ss__rpc_server_stop(s);
    ss__transport_destroy(b);
    ss__metrics_destroy(m);
}
END_TEST

/* With a token, every call must carry it (the client sends the one in
 * SHADOWSYNC_AUTH_TOKEN_FILE), reads too: a reader could copy the whole
 * centre. Refusals are PERMISSION_DENIED and counted; a refused call's
 * message is never read (a 3 MiB token-less request leaves the method's
 * received bytes at 0: before, the server buffered it, then refused). */
START_TEST(test_token_guards_every_call_before_its_body) {
    ss__metrics *m;
    ss__transport *b;
    ss__rpc_server *s;
    ck_assert_int_eq(ss__metrics_create(&m, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__inproc_transport_create(NULL, &b, NULL, 0), SS_OK);
    ss__dense_service sv = {.centre = ss__inproc_central(b), .max_floats = 1000};
    size_t nm;
    const ss__rpc_method *meth = ss__dense_service_methods(&nm);
    ss__rpc_server_config cfg = {.listen = "127.0.0.1:0",
                                 .threads = 2,
                                 .metrics = m,
                                 .auth_header = "Bearer 0123456789abcdef-right"};
    ck_assert_int_eq(ss__rpc_server_start(&cfg, meth, nm, &sv, &s, NULL, 0), SS_OK);
    char target[64], dir[] = "/tmp/ss-token-XXXXXX", right[100], wrong[100], shorty[100];
    snprintf(target, sizeof target, "127.0.0.1:%d", ss__rpc_server_port(s));
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(right, sizeof right, "%s/right", dir);
    snprintf(wrong, sizeof wrong, "%s/wrong", dir);
    snprintf(shorty, sizeof shorty, "%s/short", dir);
    const char *files[][2] = {{right, "0123456789abcdef-right\n"},
                              {wrong, "0123456789abcdef-wrong\n"},
                              {shorty, "abc\n"}};
    for (int i = 0; i < 3; i++) {
        FILE *f = fopen(files[i][0], "w");
        ck_assert_ptr_nonnull(f);
        fputs(files[i][1], f);
        fclose(f);
    }
    const char *tokens[] = {NULL, wrong, right};
    const ss_status want[] = {SS_ERR_PERMISSION, SS_ERR_PERMISSION, SS_OK};
    for (int i = 0; i < 3; i++) {
        if (tokens[i])
            setenv("SHADOWSYNC_AUTH_TOKEN_FILE", tokens[i], 1);
        else
            unsetenv("SHADOWSYNC_AUTH_TOKEN_FILE");
        ss__rpc_channel *c;
        ck_assert_int_eq(ss__rpc_channel_create(target, 0, NULL, &c, NULL, 0), SS_OK);
        Shadowsync__V1__JoinRequest j = SHADOWSYNC__V1__JOIN_REQUEST__INIT;
        j.group = "guarded";
        j.size = 2;
        uint8_t buf[64], *resp = NULL;
        size_t len = shadowsync__v1__join_request__pack(&j, buf), rl;
        char msg[256] = "";
        ck_assert_int_eq(
            ss__rpc_call(c, SVC "Join", buf, len, 5000, true, &resp, &rl, msg, sizeof msg),
            want[i]);
        if (want[i] != SS_OK)
            ck_assert_ptr_nonnull(strstr(msg, "token"));
        free(resp);
        resp = NULL;
        /* A read needs the token as well. */
        Shadowsync__V1__ReadCentralRequest rc = SHADOWSYNC__V1__READ_CENTRAL_REQUEST__INIT;
        rc.group = "guarded";
        rc.size = 2;
        len = shadowsync__v1__read_central_request__pack(&rc, buf);
        ss_status read =
            ss__rpc_call(c, SVC "ReadCentral", buf, len, 5000, true, &resp, &rl, NULL, 0);
        if (want[i] == SS_ERR_PERMISSION)
            ck_assert_int_eq(read, SS_ERR_PERMISSION);
        else /* (NOT_FOUND or STATE: nothing there yet) */
            ck_assert_int_ne(read, SS_ERR_PERMISSION);
        free(resp);
        resp = NULL;
        if (i == 0) { /* no token, a big body: refused at the door, never read */
            const size_t big = 3u << 20;
            uint8_t *body = calloc(1, big);
            ck_assert_int_eq(
                ss__rpc_call(c, SVC "EasgdExchange", body, big, 5000, true, &resp, &rl, NULL, 0),
                SS_ERR_PERMISSION);
            free(body);
            free(resp);
            resp = NULL;
            ss__counter *rx;
            const char *by[] = {"method", SVC "EasgdExchange", NULL};
            ck_assert_int_eq(ss__metrics_counter(m, "shadowsync_rpc_received_bytes_total",
                                                 "Request message bytes received, by method.", by,
                                                 &rx),
                             SS_OK);
            ck_assert_uint_eq(ss__counter_value(rx), 0);
        }
        ss__rpc_channel_destroy(c);
    }
    ck_assert_uint_eq(counter_of(m, "shadowsync_rpc_unauthorized_total",
                                 "Calls refused at the door: a missing or wrong token, or a client "
                                 "certificate that may only read calling one that changes state."),
                      5);
    /* A token file that is not a token: the client refuses to start. */
    setenv("SHADOWSYNC_AUTH_TOKEN_FILE", shorty, 1);
    ss__rpc_channel *c;
    ck_assert_int_eq(ss__rpc_channel_create(target, 0, NULL, &c, NULL, 0), SS_ERR_INVALID_ARGUMENT);
    unsetenv("SHADOWSYNC_AUTH_TOKEN_FILE");
    for (int i = 0; i < 3; i++)
        unlink(files[i][0]);
    rmdir(dir);
    ss__rpc_server_stop(s);
    ss__transport_destroy(b);
    ss__metrics_destroy(m);
}
END_TEST

/* --tls-writers: whole entries match, nothing else does; a bad list is
 * refused with the reason; a server without mutual TLS refuses writers
 * (nobody could write). The calls over TLS: tests/test_tls.sh. */
START_TEST(test_writer_identity_lists) {
    const char *list = "trainer.a,agent-7,x";
    ck_assert(ss__auth_identity_listed(list, "trainer.a", 9));
    ck_assert(ss__auth_identity_listed(list, "agent-7", 7));
    ck_assert(ss__auth_identity_listed(list, "x", 1));
    ck_assert(!ss__auth_identity_listed(list, "trainer", 7));     /* a prefix */
    ck_assert(!ss__auth_identity_listed(list, "trainer.ab", 10)); /* longer */
    ck_assert(!ss__auth_identity_listed(list, "rainer.a", 8));    /* a suffix */
    ck_assert(!ss__auth_identity_listed(list, "", 0));
    ck_assert(!ss__auth_identity_listed(list, "trainer.a,agent-7", 17));
    ck_assert(!ss__auth_identity_listed("", "x", 1));
    char why[200];
    ck_assert_int_eq(ss__auth_writers_valid(list, why, sizeof why), SS_OK);
    const char *bad[] = {"", "a,,b", "a,", ",a", "a b", "a,b\tc"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        why[0] = '\0';
        ck_assert_int_eq(ss__auth_writers_valid(bad[i], why, sizeof why), SS_ERR_INVALID_ARGUMENT);
        ck_assert_ptr_nonnull(strstr(why, "--tls-writers"));
    }
    size_t nm;
    const ss__rpc_method *meth = ss__dense_service_methods(&nm);
    ss__dense_service sv = {.max_floats = 10};
    ss__rpc_server *s;
    ss__rpc_server_config cfg = {.listen = "127.0.0.1:0", .threads = 1, .tls_writers = "a"};
    ck_assert_int_eq(ss__rpc_server_start(&cfg, meth, nm, &sv, &s, NULL, 0),
                     SS_ERR_INVALID_ARGUMENT);
}
END_TEST

/* rpc/pb_wire.c by hand: the header of a tail field, and finding it only
 * when it is the one, last, well-formed field. */
START_TEST(test_pb_wire_by_hand) {
    uint8_t h[SS_PB_BYTES_HEADER_MAX];
    ck_assert_uint_eq(ss__pb_bytes_header(4, 300, h), 3);
    ck_assert_uint_eq(h[0], 0x22); /* field 4, length-delimited */
    ck_assert_uint_eq(h[1], 0xac); /* 300 = 0b10_0101100 */
    ck_assert_uint_eq(h[2], 0x02);
    size_t prefix, off;
    /* group "g", member 5, snapshot of 8 bytes last */
    const uint8_t ok[] = {0x0a, 1, 'g', 0x10, 5, 0x22, 8, 1, 2, 3, 4, 5, 6, 7, 8};
    ck_assert(ss__pb_find_trailing_bytes(ok, sizeof ok, 4, &prefix, &off));
    ck_assert_uint_eq(prefix, 5);
    ck_assert_uint_eq(off, 7);
    const uint8_t first[] = {0x22, 2, 1, 2, 0x0a, 1, 'g'};          /* not last */
    const uint8_t twice[] = {0x22, 1, 1, 0x0a, 1, 'g', 0x22, 1, 2}; /* twice */
    const uint8_t cut[] = {0x0a, 1, 'g', 0x22, 9, 1, 2};            /* longer than the buffer */
    const uint8_t group[] = {0x0b, 0x0c, 0x22, 1, 1};               /* wire type 3 */
    const uint8_t varint[] = {0x20, 1};                             /* field 4 as a varint */
    const uint8_t long_varint[] = {0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                   0xff, 0xff, 0xff, 0x7f, 0x22, 0}; /* 70 bits */
    const uint8_t zero_field[] = {0x02, 0, 0x22, 0};                 /* field number 0 */
    ck_assert(!ss__pb_find_trailing_bytes(first, sizeof first, 4, &prefix, &off));
    ck_assert(!ss__pb_find_trailing_bytes(twice, sizeof twice, 4, &prefix, &off));
    ck_assert(!ss__pb_find_trailing_bytes(cut, sizeof cut, 4, &prefix, &off));
    ck_assert(!ss__pb_find_trailing_bytes(group, sizeof group, 4, &prefix, &off));
    ck_assert(!ss__pb_find_trailing_bytes(varint, sizeof varint, 4, &prefix, &off));
    ck_assert(!ss__pb_find_trailing_bytes(long_varint, sizeof long_varint, 4, &prefix, &off));
    ck_assert(!ss__pb_find_trailing_bytes(zero_field, sizeof zero_field, 4, &prefix, &off));
    ck_assert(!ss__pb_find_trailing_bytes(ok, sizeof ok, 3, &prefix, &off)); /* no field 3 */

    /* From the first bytes of a message (a reply still in its slices):
     * enough to reach the field's tag and length, of a message whose
     * length says where the field ends. */
    prefix = off = 0;
    ck_assert(ss__pb_find_trailing_bytes_in(ok, 7, sizeof ok, 4, &prefix, &off));
    ck_assert_uint_eq(prefix, 5);
    ck_assert_uint_eq(off, 7);
    ck_assert(!ss__pb_find_trailing_bytes_in(ok, 6, sizeof ok, 4, &prefix, &off)); /* no length */
    ck_assert(
        !ss__pb_find_trailing_bytes_in(ok, 7, sizeof ok + 1, 4, &prefix, &off)); /* not last */
    ck_assert(!ss__pb_find_trailing_bytes_in(ok, sizeof ok, sizeof ok - 1, 4, &prefix, &off));
    const uint8_t long_first[] = {0x0a, 3, 'a', 'b', 'c', 0x22, 2, 1, 2};
    ck_assert(!ss__pb_find_trailing_bytes_in(long_first, 3, sizeof long_first, 4, &prefix, &off));
    ck_assert(ss__pb_find_trailing_bytes_in(long_first, 7, sizeof long_first, 4, &prefix, &off));
    ck_assert_uint_eq(off, 7);
    ck_assert(!ss__pb_find_trailing_bytes_in(twice, 5, sizeof twice, 4, &prefix, &off));
    ck_assert(!ss__pb_find_trailing_bytes_in(twice, sizeof twice, sizeof twice, 4, &prefix, &off));
}
END_TEST

/* The EASGD handler reads a snapshot in place when it is the last field,
 * at any alignment (copied when the floats are not aligned), and any
 * other field order the ordinary way; the delta is the same every time:
 * alpha (s - c) with s = c + [2, 4], alpha 0.5, is [1, 2]. */
START_TEST(test_bulk_payload_in_place_and_in_any_order) {
    size_t nm;
    const ss__rpc_method *meth = ss__dense_service_methods(&nm), *easgd_m = NULL;
    for (size_t i = 0; i < nm; i++)
        if (!strcmp(meth[i].path, SVC "EasgdExchange"))
            easgd_m = &meth[i];
    ck_assert_ptr_nonnull(easgd_m);
    for (int last = 0; last < 2; last++)
        for (size_t k = 0; k < 4; k++) {
            float c[2];
            ck_assert_int_eq(ss__transport_read_central(backend, "g", c, 2), SS_OK);
            const float snap[2] = {c[0] + 2, c[1] + 4}, alpha = 0.5f;
            uint8_t head[32], buf[64 + 4];
            size_t h = 0;
            head[h++] = 0x0a; /* group "g" */
            head[h++] = 1;
            head[h++] = 'g';
            head[h++] = 0x10; /* member */
            uint64_t v = member;
            for (; v >= 0x80; v >>= 7)
                head[h++] = (uint8_t)(v | 0x80);
            head[h++] = (uint8_t)v;
            head[h++] = 0x1d; /* alpha */
            memcpy(head + h, &alpha, 4);
            h += 4;
            uint8_t *at = buf + k;
            size_t len = 0;
            const uint8_t tail[2] = {0x22, 8};
            if (!last) { /* snapshot first */
                memcpy(at, tail, 2);
                memcpy(at + 2, snap, 8);
                len = 10;
            }
            memcpy(at + len, head, h);
            len += h;
            if (last) {
                memcpy(at + len, tail, 2);
                memcpy(at + len + 2, snap, 8);
                len += 10;
            }
            ss__rpc_reply reply = {.status = SS_OK};
            ss__rpc_method_run(easgd_m, &svc, at, len, &reply);
            ck_assert_msg(reply.status == SS_OK, "%s", reply.message);
            Shadowsync__V1__EasgdReply *r =
                shadowsync__v1__easgd_reply__unpack(NULL, reply.len, reply.data);
            ck_assert_ptr_nonnull(r);
            ck_assert_uint_eq(r->delta.len, 8);
            float d[2];
            memcpy(d, r->delta.data, 8);
            ck_assert_float_eq(d[0], 1.0f);
            ck_assert_float_eq(d[1], 2.0f);
            shadowsync__v1__easgd_reply__free_unpacked(r, NULL);
            free(reply.data_block ? reply.data_block : reply.data);
        }
}
END_TEST

START_TEST(test_checkpoint_without_a_directory) {
    Shadowsync__V1__CheckpointRequest r = SHADOWSYNC__V1__CHECKPOINT_REQUEST__INIT;
    ck_assert_int_eq(send_msg(SVC "Checkpoint", &r.base, 5000), SS_ERR_STATE);
}
END_TEST

/* Compressed sync's requests: an encoding the PS does not know, a payload
 * whose length is not the chunk's size in its encoding, one that does not
 * decode, and a delta upload for a mirror the PS never started are each
 * refused and counted, and change nothing; a reset then starts the mirror
 * and the exchange works. */
static ss_status easgd_encoded(uint32_t enc, bool reset, uint64_t seq, uint64_t size,
                               const uint8_t *payload, size_t len) {
    Shadowsync__V1__EasgdRequest r = SHADOWSYNC__V1__EASGD_REQUEST__INIT;
    r.group = "g";
    r.member = member;
    r.alpha = 0.5f;
    r.encoding = (Shadowsync__V1__Encoding)enc;
    r.mirror_reset = reset;
    r.mirror_seq = seq;
    r.size = size;
    r.snapshot.data = (uint8_t *)payload;
    r.snapshot.len = len;
    return send_msg(SVC "EasgdExchange", &r.base, 5000);
}

START_TEST(test_compressed_requests) {
    uint64_t before = rejected();
    const uint16_t halves[2] = {0x3C00, 0x3C00}; /* fp16 1, 1 */
    ck_assert_int_eq(easgd_encoded(9, false, 0, 2, (const uint8_t *)halves, 4),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(easgd_encoded(SS_ENC_FP16, false, 0, 2, (const uint8_t *)halves, 3),
                     SS_ERR_SIZE_MISMATCH);
    ck_assert_int_eq(easgd_encoded(SS_ENC_FP16, false, 0, 0, (const uint8_t *)halves, 4),
                     SS_ERR_INVALID_ARGUMENT);
    /* No reset yet: the PS has no mirror of this member. */
    ck_assert_int_eq(easgd_encoded(SS_ENC_FP16, false, 0, 2, (const uint8_t *)halves, 4),
                     SS_ERR_STATE);
    /* A reset carries float32: a NaN in it, and one of the wrong length. */
    const float bad[2] = {NAN, 1};
    ck_assert_int_eq(easgd_encoded(SS_ENC_FP16, true, 0, 2, (const uint8_t *)bad, 8),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(easgd_encoded(SS_ENC_FP16, true, 0, 2, (const uint8_t *)halves, 4),
                     SS_ERR_SIZE_MISMATCH);
    /* An int8 block whose min is above its max. */
    uint8_t q[10];
    const float lo = 2.0f, hi = 1.0f;
    memcpy(q, &lo, 4);
    memcpy(q + 4, &hi, 4);
    q[8] = q[9] = 0;
    ck_assert_int_eq(
        easgd_encoded(SS_ENC_INT8, true, 0, 2, (const uint8_t *)(const float[]){1, 1}, 8),
        SS_OK); /* starts an int8 mirror at [1, 1]: c does not move (s = c) */
    ck_assert_int_eq(easgd_encoded(SS_ENC_INT8, false, 1, 2, q, 10), SS_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(rejected(), before + 7);
    assert_central_unchanged();
    /* The member's mirror is [1, 1] at count 1: a zero delta keeps c. */
    memset(q, 0, sizeof q);
    ck_assert_int_eq(easgd_encoded(SS_ENC_INT8, false, 1, 2, q, 10), SS_OK);
    assert_central_unchanged();
    /* The same count again (a retried call) is out of step. */
    ck_assert_int_eq(easgd_encoded(SS_ENC_INT8, false, 1, 2, q, 10), SS_ERR_STATE);
    /* A delta of +2 for both floats (min = max = 2): d = 0.5 (3 - 1) = 1. */
    const float two = 2.0f;
    memcpy(q, &two, 4);
    memcpy(q + 4, &two, 4);
    ck_assert_int_eq(easgd_encoded(SS_ENC_INT8, false, 2, 2, q, 10), SS_OK);
    float c[2];
    ck_assert_int_eq(ss__transport_read_central(backend, "g", c, 2), SS_OK);
    ck_assert_float_eq(c[0], 2.0f);
    ck_assert_float_eq(c[1], 2.0f);
    /* A mirror costs the PS 2 n floats for as long as the member stays,
     * in the same budget as the groups (--max-total-floats, 4500 here:
     * "g" and "big" take 3 x 1002, a mirror of "big" 2000 more). */
    uint64_t big;
    ck_assert_int_eq(ss__transport_join(backend, "big", 1000, &big), SS_OK);
    float *snap = calloc(1000, sizeof *snap);
    Shadowsync__V1__EasgdRequest r = SHADOWSYNC__V1__EASGD_REQUEST__INIT;
    r.group = "big";
    r.member = big;
    r.alpha = 0.5f;
    r.encoding = SHADOWSYNC__V1__ENCODING__INT8;
    r.mirror_reset = true;
    r.size = 1000;
    r.snapshot.data = (uint8_t *)snap;
    r.snapshot.len = 1000 * sizeof(float);
    ck_assert_int_eq(send_msg(SVC "EasgdExchange", &r.base, 5000), SS_ERR_TOO_LARGE);
    free(snap);
}
END_TEST

/* The comparison behind every token check, with the near misses a broken
 * one would let through (mutation testing found the suite tried only no
 * token, a same-length wrong one and the right one): every strict prefix
 * (the empty header among them), the token with a byte more, with a NUL
 * more, another scheme, the scheme in other case, the bare token, the
 * right token with its last byte changed. */
START_TEST(test_token_comparison_refuses_near_misses) {
    const char *want = "Bearer 0123456789abcdef-right";
    const size_t n = strlen(want);
    ck_assert(ss__auth_header_matches(want, want, n));
    for (size_t k = 0; k < n; k++)
        ck_assert_msg(!ss__auth_header_matches(want, want, k), "a prefix of %zu bytes passed", k);
    const char longer[] = "Bearer 0123456789abcdef-rightX";
    ck_assert(!ss__auth_header_matches(want, longer, n + 1));
    const char with_nul[] = "Bearer 0123456789abcdef-right\0";
    ck_assert(!ss__auth_header_matches(want, with_nul, n + 1));
    const char *const others[] = {"Basic  0123456789abcdef-right", "bearer 0123456789abcdef-right",
                                  "Bearer 0123456789abcdef-rightt", "Bearer 0123456789abcdef-righT",
                                  "0123456789abcdef-right"};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++)
        ck_assert_msg(!ss__auth_header_matches(want, others[i], strlen(others[i])), "%s passed",
                      others[i]);
}
END_TEST

SS_CHECK_MAIN("ps_bad_input", 60, setup, teardown, test_wrong_group_size,
              test_unknown_group_and_member, test_nan_and_inf_payloads,
              test_bad_bmuf_parameters_say_what, test_oversized_message_and_group,
              test_garbage_bytes_and_unknown_method, test_expired_deadline,
              test_member_ids_are_not_guessable, test_limits_on_groups_members_floats,
              test_blocked_calls_are_bounded, test_token_guards_every_call_before_its_body,
              test_writer_identity_lists, test_pb_wire_by_hand,
              test_bulk_payload_in_place_and_in_any_order, test_checkpoint_without_a_directory,
              test_compressed_requests, test_token_comparison_refuses_near_misses)
