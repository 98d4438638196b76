/* shadow/forest + rpc/tree_transport: the forest packed over a topology
 * (hand-computed loads), S-MA rounds up and down the trees between members
 * on 127.0.0.1 (exact means), a member away failing the round in time and
 * the round retried once it is back, bad pushes refused. */
#include <check.h>

#include "check_run.h"
#include "ports.h"
#include "rpc_checks.h"
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "rpc/pb_wire.h"
#include "rpc/rpc.h"
#include "rpc/tree/tree_sync.pb-c.h"
#include "rpc/tree/tree_transport.h"
#include "shadow/forest.h"

/* Follows parents from every member: each reaches the root, no cycles. */
static void assert_spanning_tree(const ss__forest *f, uint32_t p) {
    const int32_t *par = f->parent + (size_t)p * f->members;
    ck_assert_int_eq(par[f->root[p]], -1);
    for (uint32_t m = 0; m < f->members; m++) {
        uint32_t v = m, hops = 0;
        while (par[v] >= 0 && hops <= f->members) {
            v = (uint32_t)par[v];
            hops++;
        }
        ck_assert_uint_eq(v, f->root[p]);
        ck_assert_uint_le(hops, f->depth[p]);
    }
}

static uint32_t degree(const ss__forest *f, uint32_t p, uint32_t m) {
    uint32_t kids[SS_FOREST_MAX_MEMBERS];
    return ss__forest_children(f, p, m, kids) + (f->parent[(size_t)p * f->members + m] >= 0);
}

START_TEST(test_forest_by_hand) {
    ss__topology t;
    ss__forest f;
    /* Two members, 10 floats: two partitions of 5, one rooted at each;
     * each host carries both partitions once each way: 40 bytes at 10
     * Gbit/s = 3.2e-8 s. */
    ck_assert_int_eq(ss__topology_uniform(2, 10.0, &t), SS_OK);
    ck_assert_int_eq(ss__forest_pack(&t, 10, 0, &f), SS_OK);
    ck_assert_uint_eq(f.parts, 2);
    ck_assert_uint_eq(f.part_off[1], 5);
    ck_assert_uint_eq(f.part_off[2], 10);
    ck_assert_uint_ne(f.root[0], f.root[1]);
    ck_assert_double_eq_tol(f.bottleneck_s, 3.2e-8, 1e-15);
    ss__forest_free(&f);
    ss__topology_free(&t);
    /* Four members, 4000 floats: four trees of 1000 floats (4000 bytes).
     * Each tree has 3 edges, so 24 host-ends of 4000 bytes in all; packed
     * evenly that is 6 x 4000 bytes per host, 1.92e-5 s at 10 Gbit/s (the
     * same bytes as a ring all-reduce: 2 (N - 1) / N of the group each
     * way), every member the root of one tree. */
    ck_assert_int_eq(ss__topology_uniform(4, 10.0, &t), SS_OK);
    ck_assert_int_eq(ss__forest_pack(&t, 4000, 0, &f), SS_OK);
    ck_assert_uint_eq(f.parts, 4);
    bool rooted[4] = {false};
    for (uint32_t p = 0; p < 4; p++) {
        assert_spanning_tree(&f, p);
        rooted[f.root[p]] = true;
    }
    for (int m = 0; m < 4; m++)
        ck_assert(rooted[m]);
    ck_assert_double_eq_tol(f.bottleneck_s, 1.92e-5, 1e-12);
    ss__forest_free(&f);
    ss__topology_free(&t);
    /* Hosts of several members: 5 members 2 to a host are 3 hosts, the
     * last with one; no members per host is refused. */
    ss__topology g;
    ck_assert_int_eq(ss__topology_grouped(5, 2, 10.0, &g), SS_OK);
    ck_assert_uint_eq(g.hosts, 3);
    ck_assert_uint_eq(g.host[1], 0);
    ck_assert_uint_eq(g.host[2], 1);
    ck_assert_uint_eq(g.host[4], 2);
    ck_assert_double_eq(g.link[2 * 3 + 1], 10.0);
    ck_assert_double_eq(g.nic[2], 10.0);
    ss__topology_free(&g);
    ck_assert_int_eq(ss__topology_grouped(5, 0, 10.0, &g), SS_ERR_INVALID_ARGUMENT);
}
END_TEST

static void write_file(const char *path, const char *text) {
    FILE *fp = fopen(path, "w");
    ck_assert_ptr_nonnull(fp);
    fputs(text, fp);
    fclose(fp);
}

START_TEST(test_forest_avoids_the_slow_host) {
    char path[] = "/tmp/ss_topo_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    /* Hosts a, b, d at 10 Gbit/s; c at 1 Gbit/s (its link to each, and its
     * NIC). Two members on a share it (local). */
    write_file(path, "# racks\ndefault 10\nlocal 100\nlink a c 1\nlink b c 1\nlink d c 1\n"
                     "nic c 1\n");
    const char *members[] = {"a:1", "a:2", "b:1", "c:1", "d:1"};
    ss__topology t;
    char why[200] = "";
    ck_assert_int_eq(ss__topology_load(path, members, 5, &t, why, sizeof why), SS_OK);
    ck_assert_uint_eq(t.hosts, 4);
    ck_assert_uint_eq(t.host[0], t.host[1]);
    ck_assert_double_eq(t.nic[t.host[2]], 10.0);
    ck_assert_double_eq(t.nic[t.host[3]], 1.0);
    ss__forest f;
    ck_assert_int_eq(ss__forest_pack(&t, 5000, 0, &f), SS_OK);
    /* c sends and receives each partition once (a leaf everywhere): 5000
     * floats each way over 1 Gbit/s is the least any packing can give it,
     * 1.6e-4 s; anything more through c would be the bottleneck. */
    for (uint32_t p = 0; p < f.parts; p++) {
        assert_spanning_tree(&f, p);
        ck_assert_uint_eq(degree(&f, p, 3), 1);
    }
    ck_assert_double_eq_tol(f.bottleneck_s, 1.6e-4, 1e-12);
    ss__forest_free(&f);
    ss__topology_free(&t);
    /* Two racks of two hosts: 10 Gbit/s inside a rack, 1 Gbit/s across.
     * Each tree must cross once (a star would cross twice), each through
     * a different pair of hosts: 4000 bytes per tree over 1 Gbit/s,
     * 3.2e-5 s. */
    write_file(path, "default 1\nlink a1 a2 10\nlink b1 b2 10\nnic a1 10\nnic a2 10\n"
                     "nic b1 10\nnic b2 10\n");
    const char *racks[] = {"a1:1", "a2:1", "b1:1", "b2:1"};
    ck_assert_int_eq(ss__topology_load(path, racks, 4, &t, why, sizeof why), SS_OK);
    ck_assert_int_eq(ss__forest_pack(&t, 4000, 0, &f), SS_OK);
    for (uint32_t p = 0; p < f.parts; p++) {
        assert_spanning_tree(&f, p);
        int cross = 0;
        for (uint32_t m = 0; m < 4; m++) {
            int32_t up = f.parent[(size_t)p * 4 + m];
            cross += up >= 0 && (m < 2) != (up < 2);
        }
        ck_assert_int_eq(cross, 1);
    }
    ck_assert_double_eq_tol(f.bottleneck_s, 3.2e-5, 1e-12);
    ss__forest_free(&f);
    ss__topology_free(&t);
    /* Bad files say which line. */
    write_file(path, "default 10\nlink a c\n");
    ck_assert_int_eq(ss__topology_load(path, members, 5, &t, why, sizeof why),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(why, "line 2"));
    write_file(path, "nic c -1\n");
    ck_assert_int_eq(ss__topology_load(path, members, 5, &t, why, sizeof why),
                     SS_ERR_INVALID_ARGUMENT);
    unlink(path);
    ck_assert_int_eq(ss__topology_load(path, members, 5, &t, why, sizeof why), SS_ERR_IO);
    ck_assert_ptr_nonnull(strstr(why, path));
}
END_TEST

#define M 4
#define N 10

static char member_list[512]; /* the last start_members' peers */
/* Where member r listens (NULL: a port the kernel picks). A member that a
 * test restarts on its address gets a reserved port (ports.h). */
static const char *member_listen[M];

/* m members on 127.0.0.1 that know each other's ports. */
static void start_members(ss__transport **t, uint32_t m, uint32_t timeout_ms) {
    char peers[512] = "";
    for (uint32_t r = 0; r < m; r++) {
        ss__tree_config cfg = {.peers = "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,127.0.0.1:4",
                               .rank = r,
                               .listen = member_listen[r] ? member_listen[r] : "127.0.0.1:0",
                               .timeout_ms = timeout_ms,
                               .insecure_loopback = true};
        char why[200];
        ck_assert_int_eq(ss__tree_transport_create(&cfg, &t[r], why, sizeof why), SS_OK);
        char one[40];
        snprintf(one, sizeof one, "%s127.0.0.1:%d", r ? "," : "", ss__tree_transport_port(t[r]));
        strcat(peers, one);
    }
    for (uint32_t r = 0; r < m; r++)
        ck_assert_int_eq(ss__tree_transport_set_peers(t[r], peers), SS_OK);
    snprintf(member_list, sizeof member_list, "%s", peers);
}

typedef struct member_round {
    ss__transport *t;
    float s[N], out[N];
    ss__round_result rr;
    ss_status st;
} member_round;

static void *round_main(void *p) {
    member_round *a = p;
    a->st = ss__transport_round(a->t, "w", 1, a->s, NULL, a->out, N, &a->rr);
    return NULL;
}

static void *leave_main(void *p) {
    ss__transport_leave(p, "w", 1);
    return NULL;
}

/* The first m members' snapshots r * base + i, and the round of each
 * but member `skip` (M: none) started on a thread of th. */
static void start_rounds(member_round *a, uint32_t m, float base, uint32_t skip,
                         void *(*round)(void *), pthread_t *th) {
    for (uint32_t r = 0; r < m; r++) {
        for (int i = 0; i < N; i++)
            a[r].s[i] = (float)r * base + (float)i;
        if (r != skip)
            pthread_create(&th[r], NULL, round, &a[r]);
    }
}

/* Waits for the rounds start_rounds started. */
static void join_rounds(pthread_t *th, uint32_t m, uint32_t skip) {
    for (uint32_t r = 0; r < m; r++)
        if (r != skip)
            pthread_join(th[r], NULL);
}

/* One round of the first `m` members at once, member r's snapshot
 * r * base + i. */
static void rounds_together(member_round *a, uint32_t m, float base) {
    pthread_t th[M];
    start_rounds(a, m, base, M, round_main, th);
    join_rounds(th, m, M);
}

/* The first m members' rounds succeeded, with `participants` members in
 * each, as round number `round` (0: any). */
static void assert_rounds(const member_round *a, uint32_t m, uint64_t round,
                          uint32_t participants) {
    for (uint32_t r = 0; r < m; r++) {
        ck_assert_int_eq(a[r].st, SS_OK);
        if (round)
            ck_assert_uint_eq(a[r].rr.round, round);
        ck_assert_uint_eq(a[r].rr.participants, participants);
    }
}

/* Every member in t that is there, gone. */
static void stop_members(ss__transport **t) {
    for (int r = 0; r < M; r++)
        if (t[r])
            ss__transport_destroy(t[r]);
}

/* M members that know each other, joined to `group`, a[r] ready to run
 * member r's rounds. */
static void start_joined(ss__transport **t, member_round *a, const char *group,
                         uint32_t timeout_ms) {
    start_members(t, M, timeout_ms);
    memset(a, 0, M * sizeof *a);
    for (int r = 0; r < M; r++) {
        uint64_t id;
        ck_assert_int_eq(ss__transport_join(t[r], group, N, &id), SS_OK);
        a[r].t = t[r];
    }
}

/* start_joined, then one round of all M members, which succeeds. */
static void start_after_a_round(ss__transport **t, member_round *a, uint32_t timeout_ms) {
    start_joined(t, a, "w", timeout_ms);
    rounds_together(a, M, 1.0f);
    for (int r = 0; r < M; r++)
        ck_assert_int_eq(a[r].st, SS_OK);
}

START_TEST(test_tree_rounds_by_hand) {
    ss__transport *t[M];
    member_round a[M];
    start_joined(t, a, "w", 5000);
    const ss__forest *f = ss__tree_transport_forest(t[0], "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(f->parts, M);
    /* Member r holds r * base + i: the mean is 1.5 base + i, exact in
     * float, the same at every member. */
    for (int round = 1; round <= 3; round++) {
        float base = 10.0f * (float)round;
        rounds_together(a, M, base);
        assert_rounds(a, M, (uint64_t)round, M);
        for (int r = 0; r < M; r++)
            for (int i = 0; i < N; i++)
                ck_assert_float_eq(a[r].out[i], 1.5f * base + (float)i);
    }
    float c[N];
    ck_assert_int_eq(ss__transport_read_central(t[2], "w", c, N), SS_OK);
    ck_assert_float_eq(c[0], 45.0f);
    /* No central variable: S-EASGD is refused; so are bad block momenta. */
    float d[N];
    ck_assert_int_eq(ss__transport_easgd_exchange(t[0], "w", 1, a[0].s, 0.5f, d, N),
                     SS_ERR_INVALID_ARGUMENT);
    ss__bmuf_params bad = {.eta = 1.5f, .zeta = 0.5f};
    ck_assert_int_eq(ss__transport_round(t[0], "w", 1, a[0].s, &bad, d, N, &a[0].rr),
                     SS_ERR_INVALID_ARGUMENT);
    stop_members(t);
}
END_TEST

/* A member that roots a tree hears of the others' round (their sums come
 * up to it) before it takes part: its transport says the round waits for
 * it, so an idle trainer's engine joins (shadow/engine.c, idle_contact). */
START_TEST(test_a_root_hears_the_round_that_waits_for_it) {
    ss__transport *t[M];
    member_round a[M];
    start_joined(t, a, "w", 5000);
    const ss__forest *f = ss__tree_transport_forest(t[0], "w");
    ck_assert_ptr_nonnull(f);
    const uint32_t still = f->root[0];
    ck_assert(!ss__transport_round_waiting(t[still], "w", 1)); /* no round yet */
    pthread_t th[M];
    start_rounds(a, M, 1.0f, still, round_main, th);
    uint64_t deadline = ss__now_ns() + 4000000000ull;
    while (!ss__transport_round_waiting(t[still], "w", 1) && ss__now_ns() < deadline)
        ss__sleep_ns(1000000);
    ck_assert_msg(ss__transport_round_waiting(t[still], "w", 1),
                  "the others' round not seen as waiting at a root");
    round_main(&a[still]);
    join_rounds(th, M, still);
    assert_rounds(a, M, 0, M);
    ck_assert(!ss__transport_round_waiting(t[still], "w", 1)); /* done */
    stop_members(t);
}
END_TEST

START_TEST(test_member_away_fails_the_round_in_time_then_it_is_retried) {
    ss__transport *t[M];
    member_round a[M];
    start_joined(t, a, "w", 300);
    /* Member 3 does not take part: the others' round fails at its
     * deadline (0.3 s), not later, twice. */
    for (int k = 0; k < 2; k++) {
        uint64_t t0 = ss__now_ns();
        rounds_together(a, M - 1, 1.0f);
        double s = (double)(ss__now_ns() - t0) / 1e9;
        ck_assert_double_lt(s, 2.0);
        for (int r = 0; r < M - 1; r++)
            ck_assert_int_eq(a[r].st, SS_ERR_TIMEOUT);
    }
    /* Round numbers advance only on success: with member 3 back, round 1
     * is tried again and goes through. */
    rounds_together(a, M, 4.0f);
    assert_rounds(a, M, 1, M);
    /* Every member got one and the same mean. */
    for (int r = 1; r < M; r++)
        ck_assert_mem_eq(a[r].out, a[0].out, sizeof a[0].out);
    stop_members(t);
}
END_TEST

static void *bmuf_round_main(void *p) {
    member_round *a = p;
    static const ss__bmuf_params bp = {.eta = 0.5f, .zeta = 0.5f};
    a->st = ss__transport_round(a->t, "b", 1, a->s, &bp, a->out, N, &a->rr);
    return NULL;
}

/* S-BMUF on trees: each partition's root keeps the block state of its
 * partition (Chen & Huo, classic): round 1 starts it at the mean (w = b =
 * avg), round 2 with eta = zeta = 0.5 moves by m = 0.5 (avg2 - b). */
START_TEST(test_bmuf_rounds_by_hand) {
    ss__transport *t[M];
    member_round a[M];
    start_joined(t, a, "b", 5000);
    for (int round = 1; round <= 2; round++) {
        pthread_t th[M];
        /* avg: 15 + i, then 30 + i */
        start_rounds(a, M, 10.0f * (float)round, M, bmuf_round_main, th);
        join_rounds(th, M, M);
        /* Round 1: b = avg = 15 + i. Round 2: G = 15, m = 7.5, w = b = 22.5 + i. */
        for (int r = 0; r < M; r++) {
            ck_assert_int_eq(a[r].st, SS_OK);
            for (int i = 0; i < N; i++)
                ck_assert_float_eq(a[r].out[i], (round == 1 ? 15.0f : 22.5f) + (float)i);
        }
    }
    stop_members(t);
}
END_TEST

/* A trainer that finishes leaves its groups: the others build their trees
 * again without it, also in the middle of a round, and go on. */
START_TEST(test_a_member_that_leaves_is_left_out) {
    ss__transport *t[M];
    member_round a[M];
    start_after_a_round(t, a, 5000);
    /* Members 0-2 start round 2 and wait for member 3, which leaves. */
    pthread_t th[M];
    start_rounds(a, M - 1, 2.0f, M, round_main, th);
    usleep(100000);
    uint64_t t0 = ss__now_ns();
    ck_assert_int_eq(ss__transport_leave(t[3], "w", 1), SS_OK);
    join_rounds(th, M - 1, M);
    ck_assert_double_lt((double)(ss__now_ns() - t0) / 1e9, 2.0); /* not the 5 s deadline */
    /* The mean of the three: r * 2 + i over r = 0, 1, 2 is 2 + i. */
    assert_rounds(a, M - 1, 2, M - 1);
    for (int r = 0; r < M - 1; r++)
        for (int i = 0; i < N; i++)
            ck_assert_float_eq(a[r].out[i], 2.0f + (float)i);
    /* And the next rounds without it. */
    rounds_together(a, M - 1, 3.0f);
    for (int r = 0; r < M - 1; r++) {
        ck_assert_int_eq(a[r].st, SS_OK);
        ck_assert_float_eq(a[r].out[0], 3.0f);
    }
    stop_members(t);
}
END_TEST

/* A member whose every mean of a round is in, when a member that finished
 * that round leaves, keeps the round: it hands the means to its children
 * in the new trees and finishes, instead of redoing the round on the new
 * trees and waiting for sums from members that are past it. A round with
 * only some means in starts again. Member 0's buffers are set by hand:
 * round 2's means all in (each partition's mean 7 + i, 4 members), round
 * 3's first partition only. */
START_TEST(test_a_round_whose_means_are_in_survives_a_leave) {
    ss__transport *t[M];
    member_round a[M];
    start_after_a_round(t, a, 300);
    const uint32_t parts = ss__tree_transport_forest(t[0], "w")->parts;
    float mean[N];
    for (int i = 0; i < N; i++)
        mean[i] = 7.0f + (float)i;
    ck_assert_int_eq(ss__tree_transport_buffer_means(t[0], "w", 2, mean, parts, M), SS_OK);
    ck_assert_int_eq(ss__tree_transport_buffer_means(t[0], "w", 3, mean, 1, M), SS_OK);
    ck_assert_int_eq(ss__transport_leave(t[3], "w", 1), SS_OK);
    ck_assert_int_eq(ss__tree_transport_counts_gone(t[0], "w", 3), 1); /* the leave is in */
    uint32_t means_in, fewest;
    bool sum_from;
    ck_assert(ss__tree_transport_buffered(t[0], "w", 2, 0, &means_in, &fewest, &sum_from));
    ck_assert_uint_eq(means_in, parts);
    ck_assert_uint_eq(fewest, M);
    ck_assert(!ss__tree_transport_buffered(t[0], "w", 3, 0, &means_in, &fewest, &sum_from));
    /* Member 0 alone finishes round 2 at once, with the means it had (the
     * 300 ms deadline would end it if it waited for sums). */
    round_main(&a[0]);
    assert_rounds(a, 1, 2, M);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(a[0].out[i], 7.0f + (float)i);
    /* It sent no sums up for a round whose means it had: the others hold
     * none from it (means only, where it is their parent). */
    for (int r = 1; r < M - 1; r++) {
        if (ss__tree_transport_buffered(t[r], "w", 2, 0, &means_in, &fewest, &sum_from))
            ck_assert_msg(!sum_from, "member 0 sent member %d a sum of round 2", r);
    }
    stop_members(t);
}
END_TEST

/* A member that leaves is gone from the group at once, before the others
 * hear of it: while its leave is still on its way (here: to member 2, a
 * socket that never answers, so the announcement takes until its
 * deadline), member 0 already counts it gone and probes it with that view.
 * Before, the leaver still had the group, read the view as having been
 * left out by mistake, came back at a higher version, and the probe's
 * answer brought it back at member 0, whose next rounds then waited for it
 * to their deadlines. */
START_TEST(test_a_member_that_leaves_does_not_come_back) {
    int hole_port;
    const int hole = test_silent_listener(&hole_port); /* connects, never answers */
    ss__transport *t[M] = {NULL};
    char peers[512] = "";
    for (uint32_t r = 0; r < M; r++) {
        char one[40];
        if (r == 2) {
            snprintf(one, sizeof one, ",127.0.0.1:%d", hole_port);
        } else {
            ss__tree_config cfg = {.peers = "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,127.0.0.1:4",
                                   .rank = r,
                                   .listen = "127.0.0.1:0",
                                   .timeout_ms = 2000,
                                   .insecure_loopback = true};
            char why[200];
            ck_assert_int_eq(ss__tree_transport_create(&cfg, &t[r], why, sizeof why), SS_OK);
            snprintf(one, sizeof one, "%s127.0.0.1:%d", r ? "," : "",
                     ss__tree_transport_port(t[r]));
        }
        strcat(peers, one);
    }
    for (uint32_t r = 0; r < M; r++) {
        if (!t[r])
            continue;
        ck_assert_int_eq(ss__tree_transport_set_peers(t[r], peers), SS_OK);
        uint64_t id;
        ck_assert_int_eq(ss__transport_join(t[r], "w", N, &id), SS_OK);
    }
    pthread_t leaver;
    pthread_create(&leaver, NULL, leave_main, t[3]);
    bool heard = false;
    for (int k = 0; k < 100 && !heard; k++) { /* member 0 hears at once; 2 never answers */
        usleep(10000);
        heard = ss__tree_transport_counts_gone(t[0], "w", 3) == 1;
    }
    ck_assert_msg(heard, "member 0 did not hear member 3 leave");
    ss__tree_transport_probe(t[0], "w", 3, 1000);
    ck_assert_msg(ss__tree_transport_counts_gone(t[0], "w", 3) == 1,
                  "member 3 came back after it left");
    pthread_join(leaver, NULL);
    stop_members(t);
    close(hole);
}
END_TEST

/* Rounds of the first m members until one succeeds at every one of them
 * with `participants` members in it; the tries it took (fails past max). */
static int tries_until_ok(member_round *a, uint32_t m, float base, uint32_t participants, int max) {
    for (int k = 1; k <= max; k++) {
        rounds_together(a, m, base);
        bool ok = true;
        for (uint32_t r = 0; r < m; r++)
            ok = ok && a[r].st == SS_OK && a[r].rr.participants == participants;
        if (ok)
            return k;
    }
    ck_abort_msg("no round of %u members with %u in it in %d tries", m, participants, max);
    return 0;
}

/* A member whose process dies (no Leave) holds up one round: the members
 * that waited for it probe it, find nobody and leave it out, and the
 * rounds go on without it. Restarted on its address, it is refused for a
 * membership that differs, learns that it was left out, comes back at a
 * higher version, and the rounds count it again. Member 3 of 4. */
START_TEST(test_a_dead_member_is_left_out_and_comes_back) {
    ss__transport *t[M];
    member_round a[M];
    char reserved[40];
    snprintf(reserved, sizeof reserved, "127.0.0.1:%d", test_reserve_port());
    member_listen[3] = reserved;
    start_after_a_round(t, a, 300);
    member_listen[3] = NULL;
    const int port3 = ss__tree_transport_port(t[3]);
    ss__transport_destroy(t[3]); /* as if killed: it says nothing */
    ck_assert_int_le(tries_until_ok(a, M - 1, 2.0f, M - 1, 5), 3);
    for (int r = 0; r < M - 1; r++)
        for (int i = 0; i < N; i++) /* r * 2 + i over r = 0, 1, 2 */
            ck_assert_float_eq(a[r].out[i], 2.0f + (float)i);
    ck_assert_int_eq(tries_until_ok(a, M - 1, 2.0f, M - 1, 1), 1); /* and on, at once */

    char listen[40];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port3);
    ss__tree_config cfg = {.peers = member_list,
                           .rank = 3,
                           .listen = listen,
                           .timeout_ms = 300,
                           .insecure_loopback = true};
    char why[200];
    ck_assert_int_eq(ss__tree_transport_create(&cfg, &t[3], why, sizeof why), SS_OK);
    uint64_t id;
    ck_assert_int_eq(ss__transport_join(t[3], "w", N, &id), SS_OK);
    a[3].t = t[3];
    tries_until_ok(a, M, 3.0f, M, 6);
    for (int r = 0; r < M; r++)
        for (int i = 0; i < N; i++) /* 1.5 * 3 + i */
            ck_assert_float_eq(a[r].out[i], 4.5f + (float)i);
    stop_members(t);
}
END_TEST

/* A forged leave: member 1 "leaves" at version 2^31 - 1 (before, member 1
 * then came back at 2^31, which packed to 0, and was never readmitted).
 * A version more than SS_TREE_MAX_VERSION_STEP past the known one is
 * refused, and so is one at the 64-bit edge; a forged leave within the
 * step (it cannot be told from a real one) only costs member 1 a round:
 * it learns it was left out and comes back, every time. */
/* A message of another member's, made by hand, to member `to`'s method;
 * msg gets the refusal. */
static ss_status call_member(ss__transport *to, const char *method, const ProtobufCMessage *m,
                             char *msg, size_t msglen) {
    char target[40];
    snprintf(target, sizeof target, "127.0.0.1:%d", ss__tree_transport_port(to));
    ss__rpc_channel *ch;
    ck_assert_int_eq(ss__rpc_channel_create(target, 0, NULL, &ch, NULL, 0), SS_OK);
    uint8_t req[256], *resp = NULL;
    ck_assert_uint_le(protobuf_c_message_get_packed_size(m), sizeof req);
    size_t rl;
    ss_status st = ss__rpc_call(ch, method, req, protobuf_c_message_pack(m, req), 2000, false,
                                &resp, &rl, msg, msglen);
    free(resp);
    ss__rpc_channel_destroy(ch);
    return st;
}

static ss_status forged_leave(ss__transport *to, uint32_t from, uint64_t version) {
    Shadowsync__V1__TreeLeave lv = SHADOWSYNC__V1__TREE_LEAVE__INIT;
    lv.group = "w";
    lv.from = from;
    lv.version = version;
    char msg[200] = "";
    ss_status st = call_member(to, "/shadowsync.v1.TreeSync/Leave", &lv.base, msg, sizeof msg);
    if (st == SS_ERR_INVALID_ARGUMENT)
        ck_assert_ptr_nonnull(strstr(msg, "past the known"));
    return st;
}

START_TEST(test_a_forged_leave_version_cannot_lock_a_member_out) {
    ss__transport *t[M];
    member_round a[M];
    start_after_a_round(t, a, 300);
    ck_assert_int_eq(forged_leave(t[0], 1, (1ull << 31) - 1), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(forged_leave(t[0], 1, UINT64_MAX), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(forged_leave(t[0], 1, SS_TREE_MAX_VERSION_STEP + 1), SS_ERR_INVALID_ARGUMENT);
    /* One step past the known version in its low 32 bits, 2^32 past in all
     * 64: versions are compared whole. */
    for (uint64_t v = (1ull << 32) + 1; v <= (1ull << 32) + 3; v++)
        ck_assert_int_eq(forged_leave(t[0], 1, v), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(tries_until_ok(a, M, 2.0f, M, 1), 1); /* nobody was left out */
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(forged_leave(t[0], 1, 0), SS_OK); /* plausible: one past the known */
        tries_until_ok(a, M, 3.0f + (float)k, M, 6);       /* member 1 is back */
    }
    stop_members(t);
}
END_TEST

/* A probe "from" member `from` to `to` carrying a view in which member m
 * is at version v, gone or not (every other member at version 0, there). */
static ss_status forged_probe(ss__transport *to, uint32_t from, uint32_t m, uint64_t v, bool gone) {
    uint8_t view[8 * M] = {0};
    const uint64_t x = v << 1 | (gone ? 1u : 0u);
    for (int b = 0; b < 8; b++)
        view[8 * m + (size_t)b] = (uint8_t)(x >> (8 * b));
    Shadowsync__V1__TreeProbe pr = SHADOWSYNC__V1__TREE_PROBE__INIT;
    pr.group = "w";
    pr.from = from;
    pr.membership = (ProtobufCBinaryData){sizeof view, view};
    char msg[200] = "";
    return call_member(to, "/shadowsync.v1.TreeSync/Probe", &pr.base, msg, sizeof msg);
}

/* A view that says member 1 left, at the version already known for it (or
 * a lower one): old news, nobody is left out; and a probe that claims to
 * come from its receiver is refused (the receiver would take itself for
 * gone). */
START_TEST(test_a_stale_view_changes_nobody) {
    ss__transport *t[M];
    member_round a[M];
    start_after_a_round(t, a, 300);
    ck_assert_int_eq(forged_probe(t[0], 2, 1, 0, true), SS_OK);
    ck_assert_int_eq(ss__tree_transport_counts_gone(t[0], "w", 1), 0);
    ck_assert_int_eq(tries_until_ok(a, M, 2.0f, M, 1), 1);
    /* Member 1 left (version 1) and is back (version 2 or more): a view
     * of its leave is older than what member 0 knows. */
    ck_assert_int_eq(forged_leave(t[0], 1, 0), SS_OK);
    tries_until_ok(a, M, 3.0f, M, 6);
    ck_assert_int_eq(ss__tree_transport_counts_gone(t[0], "w", 1), 0);
    ck_assert_int_eq(forged_probe(t[0], 2, 1, 1, true), SS_OK);
    ck_assert_int_eq(ss__tree_transport_counts_gone(t[0], "w", 1), 0);
    ck_assert_int_eq(tries_until_ok(a, M, 4.0f, M, 1), 1);
    ck_assert_int_eq(forged_probe(t[0], 0, 2, 5, true), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(tries_until_ok(a, M, 5.0f, M, 1), 1);
    stop_members(t);
}
END_TEST

/* Finite snapshots whose sum overflows (4 x 3e38): no mean goes down, so
 * no member's replica or state takes an Inf; the round fails for all, and
 * the next one, of finite sums, goes through. */
START_TEST(test_a_mean_that_overflows_goes_nowhere) {
    ss__transport *t[M];
    member_round a[M];
    start_after_a_round(t, a, 300);
    pthread_t th[M];
    for (int r = 0; r < M; r++) {
        for (int i = 0; i < N; i++) {
            a[r].s[i] = 3e38f;
            a[r].out[i] = 7.0f;
        }
        pthread_create(&th[r], NULL, round_main, &a[r]);
    }
    join_rounds(th, M, M);
    for (int r = 0; r < M; r++) {
        ck_assert_int_ne(a[r].st, SS_OK);
        for (int i = 0; i < N; i++)
            ck_assert_msg(isfinite(a[r].out[i]), "member %d got %g", r, (double)a[r].out[i]);
    }
    tries_until_ok(a, M, 1.0f, M, 6);
    stop_members(t);
}
END_TEST

static char g_push_msg[512]; /* the last send_push's refusal */

/* A push made by hand: partition p's floats (n of them). */
static ss_status send_push(ss__rpc_channel *ch, const char *group, uint64_t round, uint32_t part,
                           uint32_t kind, uint32_t from, uint32_t count, uint64_t size,
                           const float *x, size_t n) {
    Shadowsync__V1__TreePush m = SHADOWSYNC__V1__TREE_PUSH__INIT;
    m.group = (char *)group;
    m.round = round;
    m.partition = part;
    m.kind = kind;
    m.from = from;
    m.count = count;
    m.size = size;
    m.data.data = (uint8_t *)x;
    m.data.len = n * sizeof *x;
    uint8_t buf[512];
    ck_assert_uint_le(protobuf_c_message_get_packed_size(&m.base), sizeof buf);
    size_t len = protobuf_c_message_pack(&m.base, buf);
    uint8_t *resp = NULL;
    size_t rlen;
    ss_status st = ss__rpc_call(ch, "/shadowsync.v1.TreeSync/Push", buf, len, 2000, false, &resp,
                                &rlen, g_push_msg, sizeof g_push_msg);
    free(resp);
    return st;
}

START_TEST(test_bad_pushes_and_open_doors) {
    ss__transport *t[M];
    start_members(t, M, 2000);
    uint64_t id;
    ck_assert_int_eq(ss__transport_join(t[0], "w", N, &id), SS_OK);
    const ss__forest *f = ss__tree_transport_forest(t[0], "w");
    /* Member 0's child in some tree, and its parent in another. */
    uint32_t p_kid = UINT32_MAX, kid = 0, p_par = UINT32_MAX, par = 0;
    for (uint32_t p = 0; p < f->parts; p++) {
        uint32_t kids[M];
        if (ss__forest_children(f, p, 0, kids) && p_kid == UINT32_MAX) {
            p_kid = p;
            kid = kids[0];
        }
        if (f->parent[(size_t)p * M] >= 0 && p_par == UINT32_MAX) {
            p_par = p;
            par = (uint32_t)f->parent[(size_t)p * M];
        }
    }
    ck_assert_uint_ne(p_kid, UINT32_MAX);
    ck_assert_uint_ne(p_par, UINT32_MAX);
    size_t pn = f->part_off[p_kid + 1] - f->part_off[p_kid];
    float x[N] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    char target[40];
    snprintf(target, sizeof target, "127.0.0.1:%d", ss__tree_transport_port(t[0]));
    ss__rpc_channel *ch;
    ck_assert_int_eq(ss__rpc_channel_create(target, 0, NULL, &ch, NULL, 0), SS_OK);
    ck_assert_int_eq(send_push(ch, "w", 1, p_kid, 1, kid, 1, N, x, pn), SS_OK);
    ck_assert_int_eq(send_push(ch, "w", 1, p_kid, 1, kid, 1, N, x, pn), SS_OK); /* once */
    ck_assert_int_eq(send_push(ch, "nope", 1, p_kid, 1, kid, 1, N, x, pn), SS_ERR_STATE);
    ck_assert_int_eq(send_push(ch, "../etc", 1, p_kid, 1, kid, 1, N, x, pn),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(send_push(ch, "w", 1, p_kid, 1, kid, 1, N + 1, x, pn), SS_ERR_SIZE_MISMATCH);
    /* A refusal never says the group's size or shape (N = 10 floats, 4
     * members): a caller learns only that its own guess was wrong. */
    ck_assert_ptr_null(strstr(g_push_msg, "10"));
    ck_assert_ptr_null(strstr(g_push_msg, " 4 "));
    ck_assert_int_eq(send_push(ch, "w", 1, p_kid, 1, kid, 1, N, x, pn - 1), SS_ERR_SIZE_MISMATCH);
    ck_assert_int_eq(send_push(ch, "w", 1, 99, 1, kid, 1, N, x, pn), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(send_push(ch, "w", 1, p_kid, 3, kid, 1, N, x, pn), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(send_push(ch, "w", 0, p_kid, 1, kid, 1, N, x, pn), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(send_push(ch, "w", 1, p_kid, 1, kid, 0, N, x, pn), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(send_push(ch, "w", 1, p_kid, 1, 0, 1, N, x, pn), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(send_push(ch, "w", 1, p_kid, 1, 7, 1, N, x, pn), SS_ERR_INVALID_ARGUMENT);
    /* A sum from a member that is not a child there; a mean from one that
     * is not the parent. */
    ck_assert_int_eq(send_push(ch, "w", 1, p_par, 1, par, 1, N, x, pn), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(send_push(ch, "w", 1, p_kid, 2, kid, 1, N, x, pn), SS_ERR_INVALID_ARGUMENT);
    /* Rounds far ahead are refused (the sender tries again), NaN too. */
    ck_assert_int_eq(send_push(ch, "w", 5, p_kid, 1, kid, 1, N, x, pn), SS_ERR_STATE);
    x[0] = NAN;
    ck_assert_int_eq(send_push(ch, "w", 1, p_kid, 1, kid, 1, N, x, pn), SS_ERR_NON_FINITE);
    /* A leave from nobody, or from this member itself. */
    Shadowsync__V1__TreeLeave lv = SHADOWSYNC__V1__TREE_LEAVE__INIT;
    lv.group = "w";
    uint8_t lb[64];
    uint8_t *lresp = NULL;
    size_t lrl;
    lv.from = 9;
    ck_assert_int_eq(ss__rpc_call(ch, "/shadowsync.v1.TreeSync/Leave", lb,
                                  protobuf_c_message_pack(&lv.base, lb), 2000, false, &lresp, &lrl,
                                  NULL, 0),
                     SS_ERR_INVALID_ARGUMENT);
    free(lresp);
    lv.from = 0;
    ck_assert_int_eq(ss__rpc_call(ch, "/shadowsync.v1.TreeSync/Leave", lb,
                                  protobuf_c_message_pack(&lv.base, lb), 2000, false, &lresp, &lrl,
                                  NULL, 0),
                     SS_ERR_INVALID_ARGUMENT);
    free(lresp);
    /* Probes: from nobody, for a group not joined, with a view of the
     * wrong size; a good one answers with this member's view (4 members,
     * 8 bytes each, nobody gone: all zero). */
    Shadowsync__V1__TreeProbe pr = SHADOWSYNC__V1__TREE_PROBE__INIT;
    uint8_t view[32] = {0};
    struct {
        const char *group;
        uint32_t from;
        size_t view_len;
        ss_status want;
    } probes[] = {{"w", 9, 32, SS_ERR_INVALID_ARGUMENT},
                  {"../etc", 1, 32, SS_ERR_INVALID_ARGUMENT},
                  {"nope", 1, 32, SS_ERR_STATE},
                  {"w", 1, 31, SS_ERR_INVALID_ARGUMENT},
                  {"w", 1, 32, SS_OK}};
    for (size_t k = 0; k < sizeof probes / sizeof *probes; k++) {
        pr.group = (char *)probes[k].group;
        pr.from = probes[k].from;
        pr.membership = (ProtobufCBinaryData){probes[k].view_len, view};
        ck_assert_int_eq(ss__rpc_call(ch, "/shadowsync.v1.TreeSync/Probe", lb,
                                      protobuf_c_message_pack(&pr.base, lb), 2000, false, &lresp,
                                      &lrl, NULL, 0),
                         probes[k].want);
        if (probes[k].want == SS_OK) {
            Shadowsync__V1__TreePushReply *r =
                shadowsync__v1__tree_push_reply__unpack(NULL, lrl, lresp);
            ck_assert_ptr_nonnull(r);
            ck_assert_uint_eq(r->membership.len, 32);
            ck_assert_mem_eq(r->membership.data, view, 32);
            shadowsync__v1__tree_push_reply__free_unpacked(r, NULL);
        }
        free(lresp);
        lresp = NULL;
    }
    assert_garbage_refused(ch, "/shadowsync.v1.TreeSync/Push", false, SS_OK, NULL);
    ss__rpc_channel_destroy(ch);
    stop_members(t);
    /* One member, a rank outside the list, an open address with no token,
     * a topology file that is not there: refused, saying why. */
    ss__transport *x2;
    char why[600];
    ss__tree_config cfg = {.peers = "127.0.0.1:0", .rank = 0, .timeout_ms = 100};
    ck_assert_int_eq(ss__tree_transport_create(&cfg, &x2, why, sizeof why),
                     SS_ERR_INVALID_ARGUMENT);
    cfg.peers = "127.0.0.1:0,127.0.0.1:1";
    cfg.rank = 2;
    ck_assert_int_eq(ss__tree_transport_create(&cfg, &x2, why, sizeof why),
                     SS_ERR_INVALID_ARGUMENT);
    cfg.rank = 0;
    cfg.topology = "/nonexistent/topology";
    ck_assert_int_eq(ss__tree_transport_create(&cfg, &x2, why, sizeof why), SS_ERR_IO);
    ck_assert_ptr_nonnull(strstr(why, "/nonexistent/topology"));
    cfg.topology = NULL;
    cfg.listen = "0.0.0.0:0";
    unsetenv("SHADOWSYNC_AUTH_TOKEN_FILE");
    ck_assert_int_eq(ss__tree_transport_create(&cfg, &x2, why, sizeof why), SS_ERR_PERMISSION);
    ck_assert_ptr_nonnull(strstr(why, "SHADOWSYNC_AUTH_TOKEN_FILE"));
    /* Loopback without a token: refused too, unless said so. */
    cfg.listen = "127.0.0.1:0";
    ck_assert_int_eq(ss__tree_transport_create(&cfg, &x2, why, sizeof why), SS_ERR_PERMISSION);
    ck_assert_ptr_nonnull(strstr(why, "--insecure-loopback"));
    cfg.insecure_loopback = true;
    ck_assert_int_eq(ss__tree_transport_create(&cfg, &x2, why, sizeof why), SS_OK);
    ss__transport_destroy(x2);
}
END_TEST

SS_CHECK_MAIN("tree", 60, NULL, NULL, test_forest_by_hand, test_forest_avoids_the_slow_host,
              test_tree_rounds_by_hand, test_a_root_hears_the_round_that_waits_for_it,
              test_member_away_fails_the_round_in_time_then_it_is_retried,
              test_a_member_that_leaves_is_left_out,
              test_a_round_whose_means_are_in_survives_a_leave,
              test_a_member_that_leaves_does_not_come_back,
              test_a_dead_member_is_left_out_and_comes_back, test_bmuf_rounds_by_hand,
              test_bad_pushes_and_open_doors, test_a_forged_leave_version_cannot_lock_a_member_out,
              test_a_stale_view_changes_nobody, test_a_mean_that_overflows_goes_nowhere)
