/* Device groups (shadow/device.h, ss_trainer_add_dense_device): the group
 * logic, the engine's and the hooks' device paths, checked by hand with
 * the stand-in backend (tests/device_standin.h) on every machine, and
 * with the CUDA runtime where a GPU is (skipped, saying so, elsewhere). */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent_procs.h"
#include "check_run.h"
#include "device_standin.h"
#include "procs.h"
#include "shadow/engine.h"
#include "shadow/host_average_transport.h"
#include "shadow/inproc_transport.h"
#include "shadow/kernels.h"
#ifdef SS_HAVE_CUDA
#include "shadow/kernels_cuda.h"
#endif
#include "shadow/replica.h"
#include "shadowsync/shadowsync.h"
#include "transport_checks.h"

static char tmpdir[] = "/tmp/ss-device-XXXXXX";

static void fill(float *x, size_t n, float v) {
    for (size_t i = 0; i < n; i++)
        x[i] = v;
}

static void expect_said(const char *text, const char *needle) {
    ck_assert_msg(strstr(text, needle), "\"%s\" does not say \"%s\"", text, needle);
}

/* A trainer that syncs nothing (the device groups' own calls under test). */
static ss_trainer *open_unsynced_trainer(void) {
    ss_trainer_config c;
    ss_trainer_config_init(&c);
    c.mode = SS_SYNC_NONE;
    ss_trainer *t;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_OK);
    return t;
}

/* The real backend with no GPU (every CI machine): no device, and why. */
START_TEST(test_without_a_device_says_why) {
    ss__device_backend_set(NULL);
    const char *why = "";
    if (ss__device_count(&why) > 0) {
        printf("test_without_a_device_says_why: skipped, this machine has a CUDA device\n");
        return;
    }
    ck_assert_int_eq(ss_device_count(), 0);
    expect_said(ss_last_error(), "no CUDA device: ");
    ss_trainer *t = open_unsynced_trainer();
    ss_dense *g = NULL;
    ck_assert_int_eq(ss_trainer_add_dense_device(t, "w", 16, 0, NULL, &g), SS_ERR_UNSUPPORTED);
    ck_assert_ptr_null(g);
    expect_said(ss_last_error(), "group w on device 0: no CUDA device: ");
    /* The trainer goes on with host groups. */
    ck_assert_int_eq(ss_trainer_add_dense(t, "w", 16, NULL, &g), SS_OK);
    ck_assert_int_eq(ss_dense_device(g), -1);
    ck_assert_ptr_null(ss_dense_device_data(g));
    ck_assert_int_eq(ss_trainer_close(t), SS_OK);
}
END_TEST

/* The stand-in backend installed, and an in-process transport to sync
 * through. */
static ss__transport *standin_and_inproc(void) {
    ss__device_backend_set(&standin_backend);
    ss__inproc_config icfg = {.round_deadline_ms = 5000};
    ss__transport *t;
    ck_assert_int_eq(ss__inproc_transport_create(&icfg, &t, NULL, 0), SS_OK);
    return t;
}

static ss__engine *engine_on(ss__transport *t) {
    ss__engine_config cfg = {.transport = t, .threads = 1};
    ss__engine *e;
    ck_assert_int_eq(ss__engine_create(&cfg, &e, NULL, 0), SS_OK);
    return e;
}

static ss__replica *standin_replica(size_t n, const float *init) {
    ss__replica *r;
    ck_assert_int_eq(ss__replica_create_device(1, n, NULL, &r, NULL, 0), SS_OK);
    ck_assert_ptr_null(ss__replica_data(r));
    ck_assert_ptr_nonnull(ss__replica_device(r));
    ck_assert_int_eq(ss__replica_load(r, init), SS_OK);
    return r;
}

static float device_at(ss__replica *r, size_t i) {
    return ss__device_group_data(ss__replica_device(r))[i]; /* stand-in: host memory */
}

/* S-EASGD, alpha 0.5, by hand: host member A = [2, 4] sets the centre and
 * moves nothing; device member B = [4, 0] gets d = 0.5 (s - c) = [1, -2]
 * and becomes [3, 2], through one copy down, one up and one kernel. */
START_TEST(test_standin_easgd_by_hand) {
    ss__transport *t = standin_and_inproc();
    ss__engine *ea = engine_on(t), *eb = engine_on(t);
    ss__replica *a, *b = standin_replica(2, (const float[]){4, 0});
    ck_assert_int_eq(ss__replica_create(2, &a, NULL, 0), SS_OK);
    ss__replica_data(a)[0] = 2;
    ss__replica_data(a)[1] = 4;
    ss__sync_params p = {.algo = SS_ALGO_EASGD, .alpha = 0.5f};
    ss__engine_group *ga, *gb;
    ck_assert_int_eq(ss__engine_add_group(ea, "w", a, &p, &ga), SS_OK);
    ck_assert_int_eq(ss__engine_add_group(eb, "w", b, &p, &gb), SS_OK);
    ck_assert_int_eq(ss__engine_run_round(ea, ga), SS_OK);
    int down = standin.to_host, up = standin.to_device, kernels = standin.kernels;
    ck_assert_int_eq(ss__engine_run_round(eb, gb), SS_OK);
    ck_assert_int_eq(standin.to_host - down, 1);
    ck_assert_int_eq(standin.to_device - up, 1);
    ck_assert_int_eq(standin.kernels - kernels, 1);
    ck_assert_float_eq(device_at(b, 0), 3.0f);
    ck_assert_float_eq(device_at(b, 1), 2.0f);
    float c[2];
    ck_assert_int_eq(ss__transport_read_central(t, "w", c, 2), SS_OK);
    ck_assert_float_eq(c[0], 3.0f);
    ck_assert_float_eq(c[1], 2.0f);
    ss__engine_destroy(ea);
    ss__engine_destroy(eb);
    ss__replica_destroy(a);
    ss__replica_destroy(b);
    ck_assert_int_eq(standin.streams, 0); /* the group's stream went with it */
    ss__transport_destroy(t);
}
END_TEST

/* A group larger than a staging buffer goes by chunks, two buffers in
 * turn: 10 floats through buffers of 4 are 3 copies each way. */
START_TEST(test_standin_chunks_through_two_buffers) {
    ss__device_backend_set(&standin_backend);
    ss__device_set_staging_floats(4);
    float init[10], x[10], ones[10];
    for (int i = 0; i < 10; i++) {
        init[i] = (float)i;
        ones[i] = 1.0f;
    }
    ss__replica *r = standin_replica(10, init);
    ck_assert_int_eq(standin.to_device, 3); /* the initial values */
    ck_assert_int_eq(standin.events, 2);
    ck_assert_int_eq(ss__replica_snapshot(r, x), SS_OK);
    ck_assert_int_eq(standin.to_host, 3);
    ck_assert_mem_eq(x, init, sizeof x);
    ck_assert_int_eq(ss__replica_add_scaled(r, ones, 2.0f), SS_OK);
    ck_assert_int_eq(standin.to_device, 6);
    ck_assert_int_eq(standin.kernels, 3);
    ck_assert_int_eq(ss__replica_snapshot(r, x), SS_OK);
    for (int i = 0; i < 10; i++)
        ck_assert_float_eq(x[i], (float)i + 2.0f);
    standin.fail_to_host = 1; /* a failed chunk fails the copy */
    ck_assert_int_eq(ss__replica_snapshot(r, x), SS_ERR_IO);
    ss__replica_destroy(r);
    ck_assert_int_eq(standin.events, 0);
    ss__device_set_staging_floats(0);
}
END_TEST

/* Page-locked round buffers (the engine's): a snapshot into them is one
 * copy straight down, not 3 chunks through staging; a delta from them goes
 * up chunk by chunk straight from them. Other memory still goes through
 * the staging buffers. The engine pins its buffers for a device replica
 * and unpins them when the group goes. */
START_TEST(test_standin_pinned_buffers_skip_staging) {
    ss__device_backend_set(&standin_backend);
    ss__device_set_staging_floats(4);
    float init[10], round[30], plain[10], ones[10];
    for (int i = 0; i < 10; i++) {
        init[i] = (float)i;
        ones[i] = 1.0f;
    }
    ss__replica *r = standin_replica(10, init);
    ss__device_pin pin;
    ck_assert_int_eq(ss__device_group_pin(ss__replica_device(r), round, 25, &pin), SS_OK);
    ck_assert_int_eq(standin.pinned, 1);
    int down = standin.to_host;
    ck_assert_int_eq(ss__replica_snapshot(r, round + 10), SS_OK);
    ck_assert_int_eq(standin.to_host - down, 1);
    ck_assert_mem_eq(round + 10, init, sizeof init);
    for (int i = 0; i < 10; i++)
        round[15 + i] = 1.0f;
    int up = standin.to_device, kernels = standin.kernels;
    ck_assert_int_eq(ss__replica_add_scaled(r, round + 15, 2.0f), SS_OK);
    ck_assert_int_eq(standin.to_device - up, 3);
    ck_assert_int_eq(standin.kernels - kernels, 3);
    ck_assert_ptr_eq(standin.last_upload_from, round + 23); /* the last chunk, in place */
    /* Plain memory: through the staging buffers. */
    down = standin.to_host;
    ck_assert_int_eq(ss__replica_snapshot(r, plain), SS_OK);
    ck_assert_int_eq(standin.to_host - down, 3);
    for (int i = 0; i < 10; i++)
        ck_assert_float_eq(plain[i], (float)i + 2.0f);
    ck_assert_int_eq(ss__replica_add_scaled(r, ones, -2.0f), SS_OK);
    ck_assert_ptr_ne(standin.last_upload_from, ones + 8);
    /* 10 floats from round + 20 would run past the 25 pinned: staged. */
    down = standin.to_host;
    ck_assert_int_eq(ss__replica_snapshot(r, round + 20), SS_OK);
    ck_assert_int_eq(standin.to_host - down, 3);
    ck_assert_mem_eq(round + 20, init, sizeof init);
    ss__device_unpin(&pin);
    ck_assert_int_eq(standin.pinned, 0);
    ss__device_unpin(&pin); /* twice: nothing */
    ck_assert_int_eq(standin.pinned, 0);
    ss__replica_destroy(r);

    /* The engine's own buffers, for the group's life. */
    ss__transport *t = standin_and_inproc();
    ss__engine *e = engine_on(t);
    r = standin_replica(10, init);
    ss__sync_params p = {.algo = SS_ALGO_EASGD, .alpha = 0.5f};
    ss__engine_group *g;
    ck_assert_int_eq(ss__engine_add_group(e, "w", r, &p, &g), SS_OK);
    ck_assert_int_eq(standin.pinned, 1);
    down = standin.to_host;
    ck_assert_int_eq(ss__engine_run_round(e, g), SS_OK);
    ck_assert_int_eq(standin.to_host - down, 1);
    ss__engine_destroy(e);
    ck_assert_int_eq(standin.pinned, 0);
    ss__replica_destroy(r);
    ss__transport_destroy(t);
    ss__device_set_staging_floats(0);
}
END_TEST

/* S-MA across a host and a device member: both move to the mean. */
START_TEST(test_standin_ma_host_and_device) {
    ss__transport *t = standin_and_inproc();
    ss__replica *r[2];
    ck_assert_int_eq(ss__replica_create(2, &r[0], NULL, 0), SS_OK); /* [0, 0] */
    r[1] = standin_replica(2, (const float[]){2, 6});
    ss__sync_params p = {.algo = SS_ALGO_MA};
    round_arg args[2];
    for (int k = 0; k < 2; k++) {
        args[k].e = engine_on(t);
        ck_assert_int_eq(ss__engine_add_group(args[k].e, "w", r[k], &p, &args[k].g), SS_OK);
    }
    run_rounds_together(args, 2, 1);
    float x[2];
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(ss__replica_snapshot(r[k], x), SS_OK);
        ck_assert_float_eq(x[0], 1.0f);
        ck_assert_float_eq(x[1], 3.0f);
        ss__engine_destroy(args[k].e);
        ss__replica_destroy(r[k]);
    }
    ss__transport_destroy(t);
}
END_TEST

/* A copy that fails abandons the round whole (nothing sent, nothing
 * applied) and says which call on which device; a delta kernel that fails
 * fails the round too. The next round works. */
START_TEST(test_standin_failures_fail_the_round) {
    ss__transport *t = standin_and_inproc();
    ss__engine *e = engine_on(t);
    ss__replica *r = standin_replica(2, (const float[]){5, 7});
    ss__sync_params p = {.algo = SS_ALGO_EASGD, .alpha = 0.5f};
    ss__engine_group *g;
    ck_assert_int_eq(ss__engine_add_group(e, "w", r, &p, &g), SS_OK);
    standin.fail_to_host = 1;
    ck_assert_int_eq(ss__engine_run_round(e, g), SS_ERR_IO);
    expect_said(ss__device_last_error(), "device 1: copying a snapshot to the host failed: "
                                         "stand-in failure injected by the test");
    float c[2];
    ck_assert_int_eq(ss__transport_read_central(t, "w", c, 2), SS_ERR_STATE); /* nothing sent */
    ck_assert_float_eq(device_at(r, 0), 5.0f);
    standin.fail_kernel = 1;
    ck_assert_int_eq(ss__engine_run_round(e, g), SS_ERR_IO);
    expect_said(ss__device_last_error(), "applying a delta failed");
    ss__group_stats st;
    ck_assert_int_eq(ss__engine_group_stats(g, &st), SS_OK);
    ck_assert_uint_eq(st.failed_rounds, 2);
    ck_assert_int_eq(ss__engine_run_round(e, g), SS_OK);
    ck_assert_int_eq(ss__engine_group_stats(g, &st), SS_OK);
    ck_assert_uint_eq(st.rounds, 1);
    ss__engine_destroy(e);
    ss__replica_destroy(r);
    ss__transport_destroy(t);
}
END_TEST

/* The public calls' bad input, and a group's life on a (stand-in) device. */
START_TEST(test_api_device_group) {
    ss__device_backend_set(&standin_backend);
    ck_assert_int_eq(ss_device_count(), STANDIN_DEVICES);
    ss_trainer *t = open_unsynced_trainer();
    ss_dense *g = NULL;
    ck_assert_int_eq(ss_trainer_add_dense_device(t, "w", 4, -1, NULL, &g), SS_ERR_INVALID_ARGUMENT);
    expect_said(ss_last_error(), "device -1: a CUDA device ordinal is >= 0");
    ck_assert_int_eq(ss_trainer_add_dense_device(t, "w", 4, 2, NULL, &g), SS_ERR_INVALID_ARGUMENT);
    expect_said(ss_last_error(), "device 2: this process sees 2 CUDA devices");
    ck_assert_int_eq(ss_trainer_add_dense_device(t, "w", 0, 0, NULL, &g), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss_trainer_add_dense_device(t, "bad name", 4, 0, NULL, &g),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(g);
    const float init[4] = {1, 2, 3, 4};
    ck_assert_int_eq(ss_trainer_add_dense_device(t, "w", 4, 1, init, &g), SS_OK);
    ck_assert_int_eq(ss_dense_device(g), 1);
    ck_assert_ptr_null(ss_dense_data(g));
    ck_assert_ptr_nonnull(ss_dense_device_data(g));
    ck_assert_uint_eq(ss_dense_size(g), 4);
    float x[4];
    ck_assert_int_eq(ss_dense_read(g, x), SS_OK);
    ck_assert_mem_eq(x, init, sizeof x);
    ck_assert_int_eq(ss_dense_read(g, NULL), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss_trainer_add_dense_device(t, "w", 4, 0, NULL, &g), SS_ERR_EXISTS);
    ck_assert_int_eq(ss_trainer_close(t), SS_OK);
    ck_assert_int_eq(standin.streams, 0);
}
END_TEST

/* An in-process agent on tmpdir/run/<sock_name> (written to sock) syncing
 * through `transport`, with `threads` shadow threads and rounds 1 ms
 * apart; its metrics in *m. */
static ss__agent *inproc_agent(ss__transport *transport, const char *sock_name, uint32_t threads,
                               char *sock, size_t socklen, ss__metrics **m) {
    ck_assert_int_eq(ss__metrics_create(m, NULL, 0), SS_OK);
    snprintf(sock, socklen, "%s/run/%s", tmpdir, sock_name);
    ss__agent_config acfg = {.socket_path = sock,
                             .transport = transport,
                             .metrics = *m,
                             .shadow_threads = threads,
                             .min_round_gap = 1};
    ss__agent *agent;
    ck_assert_int_eq(ss__agent_create(&acfg, &agent, NULL, 0), SS_OK);
    return agent;
}

/* A trainer named `name` whose groups the agent on `sock` syncs by `algo`,
 * with no final rounds. */
static ss_trainer *agent_trainer(const char *sock, const char *name, const char *algo) {
    ss_trainer_config c;
    ss_trainer_config_init(&c);
    c.name = name;
    c.agent = sock;
    c.algo = algo;
    c.final_rounds = 0;
    ss_trainer *t;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_OK);
    return t;
}

/* Steps t until g's replica (read into x, n floats) has settled at 2 at
 * both ends and the agent has published a round into the shared header;
 * at most tries steps, pause_us apart. */
static bool settles_at_2(ss_trainer *t, ss_dense *g, float *x, size_t n, int tries, int pause_us) {
    bool settled = false;
    ss_dense_stats st = {0};
    for (int i = 0; i < tries && !(settled && st.rounds > 0); i++) {
        ck_assert_int_eq(ss_trainer_step(t), SS_OK);
        usleep((useconds_t)pause_us);
        ck_assert_int_eq(ss_dense_read(g, x), SS_OK);
        settled = fabsf(x[0] - 2.0f) < 1e-3f && fabsf(x[n - 1] - 2.0f) < 1e-3f;
        ck_assert_int_eq(ss_dense_get_stats(g, &st), SS_OK);
    }
    return settled && st.rounds > 0;
}

/* Agent mode: the trainer exports its device group by CUDA IPC and the
 * agent's shadow pool syncs it on its own stream. S-EASGD, alpha 0.5,
 * against a centre of 1 that another member set: x + c is conserved (3 +
 * 1), so the device replica settles at 2. */
START_TEST(test_standin_through_an_agent) {
    ss__transport *to_ps = standin_and_inproc();
    enum { N = 256 };
    static float x[N];
    uint64_t other;
    ck_assert_int_eq(ss__transport_join(to_ps, "w", N, &other), SS_OK);
    fill(x, N, 1.0f);
    ck_assert_int_eq(ss__transport_easgd_exchange(to_ps, "w", other, x, 0.5f, x, N), SS_OK);
    ss__metrics *m;
    char sock[300];
    ss__agent *agent = inproc_agent(to_ps, "agent.sock", 1, sock, sizeof sock, &m);
    ss_trainer *t = agent_trainer(sock, "b", "easgd");
    static float init[N];
    fill(init, N, 3.0f);
    ss_dense *g;
    ck_assert_int_eq(ss_trainer_add_dense_device(t, "w", N, 1, init, &g), SS_OK);
    ck_assert_int_eq(standin.exported, 1);
    /* Until the replica settles and the agent has published its rounds
     * into the shared header. */
    ck_assert_msg(settles_at_2(t, g, x, N, 5000, 1000), "the device replica is at %g, not 2",
                  (double)x[0]);
    ck_assert_int_eq(standin.opened, 1); /* the agent's side */
    /* The agent's checkpoint reads the device memory, not the memfd. */
    size_t saved = 0;
    ck_assert_int_eq(ss__agent_checkpoint(agent, tmpdir, &saved), SS_OK);
    ck_assert_uint_eq(saved, 1);
    char path[400];
    snprintf(path, sizeof path, "%s/w.f32", tmpdir);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    static float on_disk[N];
    ck_assert_uint_eq(fread(on_disk, sizeof(float), N, f), N);
    fclose(f);
    ck_assert_float_eq_tol(on_disk[N - 1], 2.0f, 1e-3f);
    ck_assert_int_eq(ss_trainer_close(t), SS_OK);
    ss__agent_destroy(agent);
    ck_assert_int_eq(standin.closed, 1); /* the agent closed its mapping */
    ss__metrics_destroy(m);
    ss__transport_destroy(to_ps);
}
END_TEST

/* Host averaging of device groups (shadowsync-agent --host-average): two
 * trainers' device groups on one agent, S-MA. The agent averages their
 * host snapshots in memory and takes part in the PS's round as one
 * member; both replicas move to the mean, (2 + 6) / 2 = 4. */
START_TEST(test_standin_host_average_through_an_agent) {
    ss__transport *to_ps = standin_and_inproc(), *host;
    ck_assert_int_eq(ss__host_average_transport_create(to_ps, 2000, &host, NULL, 0), SS_OK);
    ss__metrics *m;
    char sock[300];
    ss__agent *agent = inproc_agent(host, "agent-ha.sock", 2, sock, sizeof sock, &m);
    enum { N = 64 };
    static float init[N], x[N];
    ss_trainer *t[2];
    ss_dense *g[2];
    for (int k = 0; k < 2; k++) {
        t[k] = agent_trainer(sock, k ? "b" : "a", "ma");
        fill(init, N, k ? 6.0f : 2.0f);
        ck_assert_int_eq(ss_trainer_add_dense_device(t[k], "w", N, k, init, &g[k]), SS_OK);
    }
    int settled = 0;
    for (int i = 0; i < 5000 && settled < 2; i++) {
        settled = 0;
        for (int k = 0; k < 2; k++) {
            ck_assert_int_eq(ss_trainer_step(t[k]), SS_OK);
            ck_assert_int_eq(ss_dense_read(g[k], x), SS_OK);
            settled += x[0] == 4.0f && x[N - 1] == 4.0f;
        }
        usleep(1000);
    }
    ck_assert_msg(settled == 2, "the device replicas did not both reach 4 (one is at %g)",
                  (double)x[0]);
    ss__central_group_info info;
    size_t k;
    ck_assert_int_eq(ss__central_describe(ss__inproc_central(to_ps), &info, 1, &k), SS_OK);
    ck_assert_uint_eq(info.members, 1); /* one member for the whole host */
    for (int j = 0; j < 2; j++)
        ck_assert_int_eq(ss_trainer_close(t[j]), SS_OK);
    ss__agent_destroy(agent);
    ss__metrics_destroy(m);
    ss__transport_destroy(host);
    ss__transport_destroy(to_ps);
}
END_TEST

static ss_trainer *open_foreground(const char *ps, const char *name) {
    ss_trainer_config c;
    ss_trainer_config_init(&c);
    c.ps = ps;
    c.name = name;
    c.mode = SS_SYNC_FOREGROUND;
    c.algo = "easgd";
    c.sync_every = 1;
    c.final_rounds = 0;
    c.timeout_ms = 5000;
    ss_trainer *t;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_OK);
    return t;
}

/* Through a real PS, foreground S-EASGD, alpha 0.5, by hand: host trainer
 * A = 1 sets the centre; device trainer B = 3 becomes 2; the trainer's
 * metrics count B's round in shadowsync_device_copy_seconds. */
static void foreground_easgd_on_device(void) {
    char log[300], ps[64];
    snprintf(log, sizeof log, "%s/ps-%d.log", tmpdir, (int)getpid());
    char *extra[] = {"--http", "", NULL};
    pid_t pid = proc_start_ps(log, ps, sizeof ps, "127.0.0.1:0", extra);
    ss_trainer *a = open_foreground(ps, "a"), *b = open_foreground(ps, "b");
    enum { N = 1000 };
    static float init[N], x[N];
    ss_dense *ga, *gb;
    fill(init, N, 1.0f);
    ck_assert_int_eq(ss_trainer_add_dense(a, "w", N, init, &ga), SS_OK);
    fill(init, N, 3.0f);
    ck_assert_int_eq(ss_trainer_add_dense_device(b, "w", N, 0, init, &gb), SS_OK);
    ck_assert_int_eq(ss_trainer_step(a), SS_OK);
    ck_assert_int_eq(ss_trainer_step(b), SS_OK);
    ck_assert_int_eq(ss_dense_read(gb, x), SS_OK);
    for (size_t i = 0; i < N; i++)
        ck_assert_msg(x[i] == 2.0f, "x[%zu] = %g, want 2", i, (double)x[i]);
    char text[16384];
    ck_assert_int_eq(ss_trainer_metrics(b, text, sizeof text, NULL), SS_OK);
    expect_said(text, "shadowsync_device_copy_seconds_count{trainer=\"b\",group=\"w\","
                      "algo=\"easgd\"} 1");
    ck_assert_int_eq(ss_trainer_close(a), SS_OK);
    ck_assert_int_eq(ss_trainer_close(b), SS_OK);
    kill(pid, SIGTERM);
    proc_wait(pid, 30);
}

/* The CUDA runtime's backend, and whether it sees a device; without one
 * the test says it is skipped, and why. */
static bool real_device_or_skip(const char *test) {
    ss__device_backend_set(NULL);
    if (ss_device_count() > 0)
        return true;
    printf("%s: skipped: %s\n", test, ss_last_error());
    return false;
}

START_TEST(test_standin_foreground_through_a_ps) {
    ss__device_backend_set(&standin_backend);
    foreground_easgd_on_device();
}
END_TEST

/* The same on a real GPU, through the CUDA runtime's copies and kernel. */
START_TEST(test_cuda_foreground_through_a_ps) {
    if (!real_device_or_skip("test_cuda_foreground_through_a_ps"))
        return;
    foreground_easgd_on_device();
}
END_TEST

#ifdef SS_HAVE_CUDA
/* Random floats in [-1, 1), never zeros (they hide unwritten outputs). */
static void random_fill(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / (double)(1ull << 23) - 1.0);
    }
}

enum { K_ADD, K_ELASTIC, K_ACC, K_SCALE, K_SUB, K_KERNELS };
static const char *const kernel_names[K_KERNELS] = {"add_scaled", "elastic", "accumulate", "scale",
                                                    "sub"};

/* Runs kernel k on the device over (a, b, c) + off and on the host over
 * (ha, hb, hc) + off: the arrays each kernel writes end up in both. */
static void run_both(int k, float *a, float *b, float *c, float *ha, float *hb, float *hc,
                     size_t off, size_t n) {
    int err = 0;
    switch (k) {
    case K_ADD:
        err = ss__cuda_live_add_scaled(NULL, a + off, b + off, 0.37f, n);
        ss__kernel_live_add_scaled(ha + off, hb + off, 0.37f, n);
        break;
    case K_ELASTIC:
        err = ss__cuda_elastic_exchange(NULL, a + off, b + off, c + off, 0.3f, n);
        ss__kernel_elastic_exchange(ha + off, hb + off, hc + off, 0.3f, n);
        break;
    case K_ACC:
        err = ss__cuda_accumulate(NULL, a + off, b + off, n);
        ss__kernel_accumulate(ha + off, hb + off, n);
        break;
    case K_SCALE:
        err = ss__cuda_scale(NULL, a + off, 0.77f, n);
        ss__kernel_scale(ha + off, 0.77f, n);
        break;
    case K_SUB:
        err = ss__cuda_sub(NULL, c + off, a + off, b + off, n);
        ss__kernel_sub(hc + off, ha + off, hb + off, n);
        break;
    }
    ck_assert_msg(err == 0, "%s: launch error %d", kernel_names[k], err);
}
#endif

/* Each CUDA kernel against its CPU twin (shadow/kernels.h) on fresh random
 * data: the float4 paths and, one float off alignment, the scalar ones;
 * tails; a size that fills the device many times over. Every array is
 * compared whole, so an element a kernel skipped keeps its random value
 * and fails. The device contracts a * b + c into one rounding (FMA), the
 * host does not: 1e-6 relative. */
START_TEST(test_cuda_kernels_match_the_cpu) {
    if (!real_device_or_skip("test_cuda_kernels_match_the_cpu"))
        return;
#ifdef SS_HAVE_CUDA
    const ss__device_backend *be = &ss__device_backend_cuda;
    static const size_t sizes[] = {1, 5, 4099, (size_t)1 << 22};
    const size_t max = ((size_t)1 << 22) + 1, bytes = max * sizeof(float);
    float *a, *b, *c;
    ck_assert_int_eq(be->device_alloc(0, bytes, (void **)&a), 0);
    ck_assert_int_eq(be->device_alloc(0, bytes, (void **)&b), 0);
    ck_assert_int_eq(be->device_alloc(0, bytes, (void **)&c), 0);
    float *h[3], *got = malloc(bytes);
    for (int j = 0; j < 3; j++)
        ck_assert_ptr_nonnull(h[j] = malloc(bytes));
    float *dev[3] = {a, b, c};
    uint64_t seed = 1;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
        for (size_t off = 0; off < 2; off++)
            for (int k = 0; k < K_KERNELS; k++) {
                const size_t n = sizes[si], len = n + off;
                for (int j = 0; j < 3; j++) {
                    random_fill(h[j], len, seed++);
                    ck_assert_int_eq(be->copy_to_device(0, NULL, dev[j], h[j], len * 4), 0);
                }
                run_both(k, a, b, c, h[0], h[1], h[2], off, n);
                ck_assert_int_eq(be->stream_sync(0, NULL), 0);
                for (int j = 0; j < 3; j++) {
                    ck_assert_int_eq(be->copy_to_host(0, NULL, got, dev[j], len * 4), 0);
                    ck_assert_int_eq(be->stream_sync(0, NULL), 0);
                    /* The first element off (one check: Check's assertions
                     * cost a pipe write each). */
                    size_t i = 0;
                    while (i < len && fabsf(got[i] - h[j][i]) <= 1e-6f * (1.0f + fabsf(h[j][i])))
                        i++;
                    ck_assert_msg(
                        i == len, "%s, n %zu, offset %zu: array %d [%zu] is %.9g, want %.9g",
                        kernel_names[k], n, off, j, i, (double)got[i % len], (double)h[j][i % len]);
                }
            }
    for (int j = 0; j < 3; j++) {
        be->device_free(0, dev[j]);
        free(h[j]);
    }
    free(got);
#endif
}
END_TEST

/* Agent mode on a real GPU: the device group crosses into a separate
 * shadowsync-agent process by CUDA IPC, and the agent's pool syncs it on
 * its own stream through a real PS. As test_standin_through_an_agent:
 * host trainer A (1) set the centre; x + c is conserved (3 + 1), so the
 * device replica settles at 2; the agent counts its device copies. */
START_TEST(test_cuda_through_an_agent_process) {
    if (!real_device_or_skip("test_cuda_through_an_agent_process"))
        return;
    char log[300], ps[64], sock[300], http[128];
    snprintf(log, sizeof log, "%s/ps-agent.log", tmpdir);
    char *no_http[] = {"--http", "", NULL};
    pid_t ps_pid = proc_start_ps(log, ps, sizeof ps, "127.0.0.1:0", no_http);
    enum { N = 300000 };
    static float init[N], x[N];
    ss_trainer *a = open_foreground(ps, "a");
    ss_dense *ga, *gb;
    fill(init, N, 1.0f);
    ck_assert_int_eq(ss_trainer_add_dense(a, "w", N, init, &ga), SS_OK);
    ck_assert_int_eq(ss_trainer_step(a), SS_OK);
    snprintf(log, sizeof log, "%s/agent.log", tmpdir);
    snprintf(sock, sizeof sock, "%s/agent-cuda.sock", tmpdir);
    char *extra[] = {"--min-round-gap", "1", NULL};
    pid_t agent = agent_start(log, sock, ps, http, sizeof http, extra);
    ss_trainer *b = agent_trainer(sock, "b", "easgd");
    fill(init, N, 3.0f);
    ck_assert_int_eq(ss_trainer_add_dense_device(b, "w", N, 0, init, &gb), SS_OK);
    ck_assert_msg(settles_at_2(b, gb, x, N, 3000, 2000),
                  "the device replica is at %g, not 2 (agent log %s)", (double)x[0], log);
    ck_assert_double_gt(agent_metric(http, "shadowsync_device_copy_seconds_count", "group=\"w\""),
                        0);
    ck_assert_int_eq(ss_trainer_close(b), SS_OK);
    ck_assert_int_eq(ss_trainer_close(a), SS_OK);
    kill(agent, SIGTERM);
    proc_wait(agent, 30);
    kill(ps_pid, SIGTERM);
    proc_wait(ps_pid, 30);
}
END_TEST

int main(void) {
    if (proc_main_start(tmpdir))
        return EXIT_FAILURE;
    int rc =
        ss__check_tests("device", 120, NULL, NULL, test_without_a_device_says_why,
                        test_standin_easgd_by_hand, test_standin_chunks_through_two_buffers,
                        test_standin_pinned_buffers_skip_staging, test_standin_ma_host_and_device,
                        test_standin_failures_fail_the_round, test_api_device_group,
                        test_standin_through_an_agent, test_standin_host_average_through_an_agent,
                        test_standin_foreground_through_a_ps, test_cuda_foreground_through_a_ps,
                        test_cuda_kernels_match_the_cpu, test_cuda_through_an_agent_process);
    proc_remove_tree(tmpdir);
    return rc;
}
