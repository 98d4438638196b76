/* rpc/gossip_transport: decentralized averaging between members on
 * 127.0.0.1, no PS: hand-computed rounds, consensus, a dead peer skipped,
 * bad pulls refused, and an open listen address refused without a token. */
#include <check.h>

#include "check_run.h"
#include "rpc_checks.h"
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "rpc/peer/gossip_transport.h"
#include "rpc/peer/peer_sync.pb-c.h"
#include "rpc/rpc.h"
#include "shadow/engine.h"
#include "transport_checks.h"

#define M 3

/* M members on 127.0.0.1 that know each other's ports. */
static void start_members(ss__transport **t, uint32_t m, bool random) {
    char peers[512] = "";
    for (uint32_t r = 0; r < m; r++) {
        ss__gossip_config cfg = {.peers = "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
                                 .rank = r,
                                 .listen = "127.0.0.1:0",
                                 .timeout_ms = 2000,
                                 .random = random,
                                 .insecure_loopback = true};
        ck_assert_int_eq(ss__gossip_transport_create(&cfg, &t[r], NULL, 0), SS_OK);
        char one[40];
        snprintf(one, sizeof one, "%s127.0.0.1:%d", r ? "," : "", ss__gossip_transport_port(t[r]));
        strcat(peers, one);
    }
    for (uint32_t r = 0; r < m; r++)
        ck_assert_int_eq(ss__gossip_transport_set_peers(t[r], peers), SS_OK);
}

/* M members started, each joined to group "w" of 2 floats (its id in id[r]). */
static void start_joined(ss__transport **t, uint64_t *id) {
    start_members(t, M, false);
    for (int r = 0; r < M; r++)
        ck_assert_int_eq(ss__transport_join(t[r], "w", 2, &id[r]), SS_OK);
}

START_TEST(test_pull_rounds_by_hand) {
    ss__transport *t[M];
    uint64_t id[M];
    start_joined(t, id);
    float out[2];
    ss__round_result rr;
    /* Nobody has a snapshot yet: member 1's first round has no one to pull
     * from (and says so), but leaves its snapshot to be pulled. */
    ck_assert_int_eq(
        ss__transport_round(t[1], "w", id[1], (const float[]){2, 4}, NULL, out, 2, &rr),
        SS_ERR_STATE);
    /* Member 0's ring starts at rank 1: the mean of [0, 0] and [2, 4]. */
    ck_assert_int_eq(
        ss__transport_round(t[0], "w", id[0], (const float[]){0, 0}, NULL, out, 2, &rr), SS_OK);
    ck_assert_float_eq(out[0], 1.0f);
    ck_assert_float_eq(out[1], 2.0f);
    ck_assert_uint_eq(rr.participants, 2);
    /* Its next round goes to rank 2, which has no snapshot: skipped for
     * rank 1 within the same round. */
    ck_assert_int_eq(
        ss__transport_round(t[0], "w", id[0], (const float[]){1, 2}, NULL, out, 2, &rr), SS_OK);
    ck_assert_float_eq(out[0], 1.5f);
    ck_assert_float_eq(out[1], 3.0f);
    /* No central variable: S-EASGD and S-BMUF are refused; read_central
     * gives the member's own latest snapshot. */
    float d[2];
    ck_assert_int_eq(ss__transport_easgd_exchange(t[0], "w", id[0], out, 0.5f, d, 2),
                     SS_ERR_INVALID_ARGUMENT);
    ss__bmuf_params bp = {.eta = 0.3f, .zeta = 1.0f};
    ck_assert_int_eq(ss__transport_round(t[0], "w", id[0], out, &bp, d, 2, &rr),
                     SS_ERR_INVALID_ARGUMENT);
    float c[2];
    ck_assert_int_eq(ss__transport_read_central(t[0], "w", c, 2), SS_OK);
    ck_assert_float_eq(c[0], 1.0f);
    ck_assert_float_eq(c[1], 2.0f);
    for (int r = 0; r < M; r++)
        ss__transport_destroy(t[r]);
}
END_TEST

/* Engines in the background, S-MA over gossip: replicas that start apart
 * agree; then a member dies and the others' rounds go on without waiting
 * for it. */
START_TEST(test_engines_reach_consensus_and_survive_a_dead_peer) {
    enum { N = 1000 };
    for (int random = 0; random < 2; random++) {
        ss__transport *t[M];
        start_members(t, M, random);
        ss__engine *e[M];
        ss__replica *x[M];
        ss__engine_group *g[M];
        ss__sync_params p = {.algo = SS_ALGO_MA};
        for (int r = 0; r < M; r++) {
            ss__engine_config cfg = {.transport = t[r], .threads = 1};
            ck_assert_int_eq(ss__engine_create(&cfg, &e[r], NULL, 0), SS_OK);
            ck_assert_int_eq(ss__replica_create(N, &x[r], NULL, 0), SS_OK);
            for (int i = 0; i < N; i++)
                ss__replica_data(x[r])[i] = (float)(10 * r) + 0.001f * (float)i;
            ck_assert_int_eq(ss__engine_add_group(e[r], "dense", x[r], &p, &g[r]), SS_OK);
        }
        /* Rounds one after another, 30 each. */
        for (int k = 0; k < 30; k++)
            for (int r = 0; r < M; r++) {
                ss_status st = ss__engine_run_round(e[r], g[r]);
                ck_assert(st == SS_OK || (k == 0 && st == SS_ERR_STATE));
            }
        double spread = 0;
        for (int i = 0; i < N; i++)
            for (int r = 1; r < M; r++)
                spread = fmax(spread,
                              fabs((double)ss__replica_data(x[r])[i] - ss__replica_data(x[0])[i]));
        ck_assert_msg(spread < 1e-3, "schedule %d: replicas still %g apart (from 20)", random,
                      spread);
        /* Member 2 dies. Rounds of 0 and 1 still complete, each within the
         * time of a refused connection, not a deadline. */
        ss__engine_destroy(e[2]);
        ss__transport_destroy(t[2]);
        for (int k = 0; k < 6; k++)
            for (int r = 0; r < 2; r++) {
                uint64_t t0 = ss__now_ns();
                ck_assert_int_eq(ss__engine_run_round(e[r], g[r]), SS_OK);
                ck_assert_msg(ss__now_ns() - t0 < 1500000000ull,
                              "a round waited for the dead peer");
            }
        for (int r = 0; r < 2; r++) {
            ss__engine_destroy(e[r]);
            ss__transport_destroy(t[r]);
        }
        for (int r = 0; r < M; r++)
            ss__replica_destroy(x[r]);
    }
}
END_TEST

static ss_status send_pull(ss__rpc_channel *ch, const char *group, uint64_t size) {
    Shadowsync__V1__PullRequest r = SHADOWSYNC__V1__PULL_REQUEST__INIT;
    r.group = (char *)group;
    r.size = size;
    uint8_t buf[600], *resp = NULL;
    size_t len = protobuf_c_message_pack(&r.base, buf), rlen;
    ss_status st = ss__rpc_call(ch, "/shadowsync.v1.PeerSync/Pull", buf, len, 2000, false, &resp,
                                &rlen, NULL, 0);
    free(resp);
    return st;
}

START_TEST(test_bad_pulls_and_open_doors) {
    ss__transport *t[M];
    start_members(t, M, false);
    uint64_t id;
    ck_assert_int_eq(ss__transport_join(t[0], "w", 2, &id), SS_OK);
    float out[2];
    ss__round_result rr;
    (void)ss__transport_round(t[0], "w", id, (const float[]){1, 1}, NULL, out, 2, &rr);
    char target[40];
    snprintf(target, sizeof target, "127.0.0.1:%d", ss__gossip_transport_port(t[0]));
    ss__rpc_channel *ch;
    ck_assert_int_eq(ss__rpc_channel_create(target, 0, NULL, &ch, NULL, 0), SS_OK);
    ck_assert_int_eq(send_pull(ch, "w", 2), SS_OK);
    ck_assert_int_eq(send_pull(ch, "w", 3), SS_ERR_SIZE_MISMATCH);
    ck_assert_int_eq(send_pull(ch, "nope", 2), SS_ERR_NOT_FOUND);
    ck_assert_int_eq(send_pull(ch, "../etc", 2), SS_ERR_INVALID_ARGUMENT);
    assert_garbage_refused(ch, "/shadowsync.v1.PeerSync/Pull", false, SS_OK, NULL);
    ss__rpc_channel_destroy(ch);
    for (int r = 0; r < M; r++)
        ss__transport_destroy(t[r]);
    /* Lists that name no one else, a rank outside the list, an open address
     * with no token: refused. */
    ss__transport *x;
    ss__gossip_config cfg = {.peers = "127.0.0.1:0", .rank = 0, .timeout_ms = 100};
    ck_assert_int_eq(ss__gossip_transport_create(&cfg, &x, NULL, 0), SS_ERR_INVALID_ARGUMENT);
    cfg.peers = "127.0.0.1:0,127.0.0.1:1";
    cfg.rank = 2;
    char why[400];
    ck_assert_int_eq(ss__gossip_transport_create(&cfg, &x, why, sizeof why),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(why, "rank 2") != NULL, "why: %s", why);
    cfg.rank = 0;
    cfg.listen = "0.0.0.0:0";
    unsetenv("SHADOWSYNC_AUTH_TOKEN_FILE");
    ck_assert_int_eq(ss__gossip_transport_create(&cfg, &x, why, sizeof why), SS_ERR_PERMISSION);
    ck_assert_msg(strstr(why, "0.0.0.0:0") != NULL, "why: %s", why);
    /* Loopback without a token: refused too, unless said so. */
    cfg.listen = "127.0.0.1:0";
    ck_assert_int_eq(ss__gossip_transport_create(&cfg, &x, NULL, 0), SS_ERR_PERMISSION);
    cfg.insecure_loopback = true;
    ck_assert_int_eq(ss__gossip_transport_create(&cfg, &x, NULL, 0), SS_OK);
    ss__transport_destroy(x);
}
END_TEST

/* A trainer that finishes leaves: the others stop pulling from it, and a
 * member whose peers have all left averages alone (its final rounds
 * succeed) instead of failing for want of a peer. */
START_TEST(test_peers_that_leave_are_passed_over) {
    ss__transport *t[M];
    uint64_t id[M];
    start_joined(t, id);
    float out[2];
    ss__round_result rr;
    /* Members 1 and 2 publish snapshots, then 1 leaves for good. */
    (void)ss__transport_round(t[1], "w", id[1], (const float[]){2, 2}, NULL, out, 2, &rr);
    ck_assert_int_eq(
        ss__transport_round(t[2], "w", id[2], (const float[]){4, 4}, NULL, out, 2, &rr), SS_OK);
    ck_assert_int_eq(ss__transport_leave(t[1], "w", id[1]), SS_OK);
    /* Member 0's ring starts at rank 1, which left: it pulls 2. */
    ck_assert_int_eq(
        ss__transport_round(t[0], "w", id[0], (const float[]){0, 0}, NULL, out, 2, &rr), SS_OK);
    ck_assert_float_eq(out[0], 2.0f);
    ck_assert_uint_eq(rr.participants, 2);
    /* 2 leaves too: 0 is alone, its round is its own snapshot. */
    ck_assert_int_eq(ss__transport_leave(t[2], "w", id[2]), SS_OK);
    ss__transport_destroy(t[2]); /* and is gone: nothing is pulled from it */
    ck_assert_int_eq(
        ss__transport_round(t[0], "w", id[0], (const float[]){6, 8}, NULL, out, 2, &rr), SS_OK);
    ck_assert_float_eq(out[0], 6.0f);
    ck_assert_float_eq(out[1], 8.0f);
    ck_assert_uint_eq(rr.participants, 1);
    ss__transport_destroy(t[0]);
    ss__transport_destroy(t[1]);
}
END_TEST

SS_CHECK_MAIN("gossip", 60, NULL, NULL, test_pull_rounds_by_hand,
              test_engines_reach_consensus_and_survive_a_dead_peer, test_bad_pulls_and_open_doors,
              test_peers_that_leave_are_passed_over)
