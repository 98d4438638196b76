/* shadowsync-ps's embedding rows across kills: a real PS process on
 * 127.0.0.1 with a RocksDB directory, pushes acknowledged one by one,
 * SIGKILL, restart on the same database. Under --sync-writes every
 * acknowledged update is there; under write-behind every update
 * acknowledged more than --flush-lag-ms before the kill is there. Then a
 * checkpoint by RPC opens as a database holding exactly the rows of its
 * moment, and SIGTERM flushes everything. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "common/clock.h"
#include "procs.h"
#include "rpc/dense/grpc_transport.h"
#include "rpc/emb/emb_client.h"
#include "rpc/emb/embedding.pb-c.h"

enum { K = 256, DIM = 4 };

static char g_dir[64];

static void make_dir(void) {
    ss__check_tmpdir(g_dir, "ss-embdur");
}

static void remove_dir(void) {
    ss__check_rmdir(g_dir);
}

/* The K row ids every test pushes to and reads. */
static void test_ids(uint64_t *ids) {
    for (int i = 0; i < K; i++)
        ids[i] = (uint64_t)i * 7 + 1;
}

/* A fresh directory with the paths of the database and the PS log. */
static void make_paths(char *db, char *log) {
    make_dir();
    snprintf(db, 128, "%s/db", g_dir);
    snprintf(log, 128, "%s/ps.log", g_dir);
}

static ss__emb_spec table_spec(void) {
    ss__emb_spec s;
    ck_assert_int_eq(ss__emb_spec_init(&s, "dur", DIM), SS_OK);
    s.lr = 1.0f;
    s.init_scale = 0.0f; /* a row's value = number of pushes it got */
    return s;
}

static pid_t start_ps(const char *db, const char *mode, const char *log, char *target,
                      ss__emb_client **client) {
    char ckdir[160];
    snprintf(ckdir, sizeof ckdir, "%s/ckdir", g_dir);
    char *extra[] = {"--emb-db", (char *)db,   "--checkpoint-dir",
                     ckdir,      (char *)mode, "--flush-lag-ms",
                     "200",      NULL};
    if (!strcmp(mode, "--sync-writes"))
        extra[5] = NULL;
    pid_t pid = proc_start_ps(log, target, 64, "127.0.0.1:0", extra);
    ck_assert_int_eq(ss__emb_client_create(target, NULL, 5000, client, NULL, 0), SS_OK);
    ss__emb_spec spec = table_spec();
    ck_assert_int_eq(ss__emb_client_open_table(*client, &spec, NULL, NULL, 0), SS_OK);
    return pid;
}

/* Pushes +1 to K rows, one acknowledged call after another, for
 * `seconds`, then SIGKILLs the PS; ack_ns[k] is when push k+1 was acked. */
static int push_then_kill(pid_t pid, ss__emb_client *c, double seconds, uint64_t *ack_ns,
                          int max_pushes, uint64_t *kill_ns) {
    uint64_t ids[K];
    float g[K * DIM];
    test_ids(ids);
    for (int i = 0; i < K * DIM; i++)
        g[i] = -1.0f;
    ss__emb_spec spec = table_spec();
    const uint64_t until = ss__now_ns() + (uint64_t)(seconds * 1e9);
    int acked = 0;
    while (acked < max_pushes && ss__now_ns() < until) {
        ck_assert_int_eq(ss__emb_client_push(c, &spec, ids, K, g), SS_OK);
        ack_ns[acked++] = ss__now_ns();
    }
    *kill_ns = ss__now_ns();
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return acked;
}

static void read_rows(ss__emb_client *c, float *rows) {
    uint64_t ids[K];
    test_ids(ids);
    ss__emb_spec spec = table_spec();
    ck_assert_int_eq(ss__emb_client_lookup(c, &spec, ids, K, rows), SS_OK);
}

/* A PS in `mode` pushed to for `seconds` (at most max pushes, each one's
 * acknowledgement time in ack), SIGKILLed and started again on its
 * database: *acked pushes were acknowledged, *kill_ns is when it was
 * killed, rows what it holds now. Returns the PS, its client in *c. */
static pid_t push_kill_restart(const char *mode, double seconds, uint64_t *ack, int max, int *acked,
                               uint64_t *kill_ns, float *rows, ss__emb_client **c) {
    char db[128], log[128], target[64];
    make_paths(db, log);
    pid_t pid = start_ps(db, mode, log, target, c);
    *acked = push_then_kill(pid, *c, seconds, ack, max, kill_ns);
    ss__emb_client_destroy(*c);
    pid = start_ps(db, mode, log, target, c);
    read_rows(*c, rows);
    return pid;
}

/* The restarted PS stopped: it exits cleanly. */
static void stop_restarted(pid_t pid, ss__emb_client *c) {
    ss__emb_client_destroy(c);
    kill(pid, SIGTERM);
    ck_assert_int_eq(WEXITSTATUS(proc_wait(pid, 30)), 0);
    remove_dir();
}

START_TEST(test_sync_writes_survive_sigkill) {
    static uint64_t ack[100000];
    uint64_t kill_ns;
    int acked;
    float rows[K * DIM];
    ss__emb_client *c;
    pid_t pid = push_kill_restart("--sync-writes", 1.0, ack, 100000, &acked, &kill_ns, rows, &c);
    ck_assert_int_gt(acked, 10);
    for (int i = 0; i < K * DIM; i++)
        ck_assert_float_eq(rows[i], (float)acked); /* every acknowledged push */
    printf("sync writes: %d pushes of %d rows acknowledged before SIGKILL, all %d found\n", acked,
           K, acked);
    stop_restarted(pid, c);
}
END_TEST

/* Starts a PS with tests/sync_recorder.c preloaded and var=value in its
 * environment (the recorder's setting); the test's own environment is
 * left as it was. ASan must then not insist on coming first. */
static pid_t start_ps_preloaded(const char *var, const char *value, char *const extra[],
                                const char *log, char *target) {
    char asan[512];
    const char *old = getenv("ASAN_OPTIONS");
    char *saved = old ? strdup(old) : NULL;
    snprintf(asan, sizeof asan, "%s%sverify_asan_link_order=0", saved ? saved : "",
             saved ? ":" : "");
    setenv("LD_PRELOAD", SS_SYNC_RECORDER, 1);
    setenv(var, value, 1);
    setenv("ASAN_OPTIONS", asan, 1);
    pid_t pid = proc_start_ps(log, target, 64, "127.0.0.1:0", extra);
    unsetenv("LD_PRELOAD");
    unsetenv(var);
    if (saved)
        setenv("ASAN_OPTIONS", saved, 1);
    else
        unsetenv("ASAN_OPTIONS");
    free(saved);
    return pid;
}

/* Under --sync-writes an update is acknowledged only after a synced
 * write: every acknowledged push has a WAL fsync/fdatasync that began
 * after it was sent and ended before its reply (tests/sync_recorder.c
 * records them in the PS). A fast background flusher (--flush-lag-ms 2)
 * races every push for its dirty rows. Fails when the store writes
 * without sync, or when the flusher writes unsynced and marks the rows
 * clean before the pusher's synced flush. */
START_TEST(test_sync_writes_are_synced_before_the_ack) {
    char db[128], log[128], target[64], synclog[160];
    make_paths(db, log);
    snprintf(synclog, sizeof synclog, "%s/syncs.txt", g_dir);
    char *extra[] = {"--emb-db", db, "--sync-writes", "--flush-lag-ms", "2", NULL};
    pid_t pid = start_ps_preloaded("SS_SYNC_LOG", synclog, extra, log, target);
    ss__emb_client *c;
    ck_assert_int_eq(ss__emb_client_create(target, NULL, 5000, &c, NULL, 0), SS_OK);
    ss__emb_spec spec = table_spec();
    ck_assert_int_eq(ss__emb_client_open_table(c, &spec, NULL, NULL, 0), SS_OK);
    enum { PUSHES = 300 };
    static uint64_t sent[PUSHES], acked[PUSHES];
    uint64_t ids[K];
    float g[K * DIM];
    test_ids(ids);
    for (int i = 0; i < K * DIM; i++)
        g[i] = -1.0f;
    for (int i = 0; i < PUSHES; i++) {
        sent[i] = ss__now_ns();
        ck_assert_int_eq(ss__emb_client_push(c, &spec, ids, K, g), SS_OK);
        acked[i] = ss__now_ns();
    }
    ss__emb_client_destroy(c);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    FILE *f = fopen(synclog, "r");
    ck_assert_msg(f, "no WAL sync was recorded at all");
    static uint64_t s0[100000], s1[100000];
    size_t ns = 0;
    unsigned long long a, b;
    while (ns < 100000 && fscanf(f, "%llu %llu", &a, &b) == 2) {
        s0[ns] = a;
        s1[ns++] = b;
    }
    fclose(f);
    int unsynced = 0;
    for (int i = 0; i < PUSHES; i++) {
        bool ok = false;
        for (size_t k = 0; k < ns && !ok; k++)
            ok = s0[k] >= sent[i] && s1[k] <= acked[i];
        unsynced += !ok;
    }
    printf("sync writes: %d pushes, %zu WAL syncs, %d acknowledged without a sync in between\n",
           PUSHES, ns, unsynced);
    ck_assert_int_eq(unsynced, 0);
    remove_dir();
}
END_TEST

/* GET path over a raw socket; the HTTP status code, or -1. */
static int http_get(const char *hostport, const char *path) {
    char host[64];
    snprintf(host, sizeof host, "%s", hostport);
    char *colon = strrchr(host, ':');
    if (!colon)
        return -1;
    *colon = '\0';
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    inet_pton(AF_INET, host, &a.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char req[256], resp[64] = "";
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\n\r\n", path);
    int code = -1;
    if (write(fd, req, (size_t)n) == n && read(fd, resp, sizeof resp - 1) > 12)
        code = atoi(resp + 9); /* "HTTP/1.x NNN" */
    close(fd);
    return code;
}

typedef struct post_arg {
    char hostport[64];
    _Atomic bool done;
    int code;
} post_arg;

static void *post_checkpoint(void *p) {
    post_arg *a = p;
    char host[64];
    snprintf(host, sizeof host, "%s", a->hostport);
    char *colon = strrchr(host, ':');
    *colon = '\0';
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    inet_pton(AF_INET, host, &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    a->code = -1;
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
        const char req[] = "POST /checkpoint HTTP/1.0\r\nContent-Length: 0\r\n\r\n";
        char resp[64] = "";
        if (write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1) &&
            read(fd, resp, sizeof resp - 1) > 12)
            a->code = atoi(resp + 9);
    }
    if (fd >= 0)
        close(fd);
    atomic_store(&a->done, true);
    return NULL;
}

/* On a slow disk (every fsync takes 2 s) a POST /checkpoint of the PS
 * takes that long; meanwhile /healthz and the dense RPCs still answer,
 * before the checkpoint ends. */
START_TEST(test_checkpoint_does_not_freeze_the_ps) {
    char db[128], log[128], target[64], ckdir[160];
    make_paths(db, log);
    snprintf(ckdir, sizeof ckdir, "%s/slowck", g_dir);
    char *extra[] = {"--checkpoint-dir", ckdir, "--http", "127.0.0.1:0", NULL};
    pid_t pid = start_ps_preloaded("SS_SYNC_DELAY_MS", "2000", extra, log, target);
    post_arg a = {.code = 0};
    proc_address_after(log, "http on", a.hostport, sizeof a.hostport);
    ss__transport *t;
    ss__grpc_transport_config gc = {.targets = target, .timeout_ms = 10000};
    ck_assert_int_eq(ss__grpc_transport_create(&gc, &t, NULL, 0), SS_OK);
    uint64_t m;
    ck_assert_int_eq(ss__transport_join(t, "held", 4, &m), SS_OK);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, post_checkpoint, &a), 0);
    ss__sleep_ns(300000000ull); /* the checkpoint is in its fsync */
    ck_assert_int_eq(http_get(a.hostport, "/healthz"), 200);
    uint64_t m2;
    ck_assert_int_eq(ss__transport_join(t, "held", 4, &m2), SS_OK);
    ck_assert_msg(!atomic_load(&a.done), "the checkpoint ended before the other calls were tried");
    pthread_join(th, NULL);
    ck_assert_int_eq(a.code, 200);
    ss__transport_destroy(t);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    remove_dir();
}
END_TEST

START_TEST(test_write_behind_loses_at_most_the_lag) {
    static uint64_t ack[1000000];
    uint64_t kill_ns;
    int acked;
    float rows[K * DIM];
    ss__emb_client *c;
    pid_t pid =
        push_kill_restart("--sync-writes=false", 1.5, ack, 1000000, &acked, &kill_ns, rows, &c);
    /* Pushes acknowledged at least the lag (200 ms) before the kill. */
    int bound = 0;
    while (bound < acked && ack[bound] + 200000000ull <= kill_ns)
        bound++;
    ck_assert_int_gt(bound, 0);
    float lo = rows[0];
    for (int i = 0; i < K * DIM; i++) {
        ck_assert_float_ge(rows[i], (float)bound);
        ck_assert_float_le(rows[i], (float)acked);
        lo = rows[i] < lo ? rows[i] : lo;
    }
    printf("write-behind (lag 200 ms): %d pushes acknowledged, %d of them >= 200 ms before "
           "SIGKILL; after restart rows hold >= %.0f\n",
           acked, bound, lo);
    stop_restarted(pid, c);
}
END_TEST

/* Write-behind on a disk slower than the pushes (every WAL write() takes
 * as long as 4 MB/s would, tests/sync_recorder.c): one client pushes new
 * rows, 2048 a call, at up to 500k rows a second for 2.5 s, then the PS
 * is SIGKILLed. Every push acknowledged at least BOUND_MS before the kill
 * must be in the database after a restart. Without back-pressure the
 * flusher falls further behind with every second of pushing, so the
 * pushes of the last second or more are lost; with it, pushes wait for
 * the backlog once it is older than the lag (50 ms), and what is lost
 * stays about the lag plus two flushes of one lag's worth of rows. */
START_TEST(test_write_behind_lag_holds_on_a_slow_disk) {
    enum { B = 2048, MAX_PUSHES = 1000, BOUND_MS = 1200 };
    char db[128], log[128], target[64];
    make_paths(db, log);
    char *extra[] = {"--emb-db", db, "--flush-lag-ms", "50", NULL};
    pid_t pid = start_ps_preloaded("SS_WAL_WRITE_BYTES_PER_S", "4000000", extra, log, target);
    ss__emb_client *c;
    ck_assert_int_eq(ss__emb_client_create(target, NULL, 30000, &c, NULL, 0), SS_OK);
    ss__emb_spec spec = table_spec();
    ck_assert_int_eq(ss__emb_client_open_table(c, &spec, NULL, NULL, 0), SS_OK);
    static uint64_t ids[B], ack[MAX_PUSHES];
    static float g[B * DIM], rows[B * DIM];
    for (int i = 0; i < B * DIM; i++)
        g[i] = -1.0f;
    const uint64_t start = ss__now_ns(), until = start + 2500000000ull;
    const uint64_t ns_per_push = 1000000000ull * B / 500000; /* 500k rows/s at most */
    int acked = 0;
    while (acked < MAX_PUSHES && ss__now_ns() < until) {
        for (int i = 0; i < B; i++)
            ids[i] = (uint64_t)acked * B + (uint64_t)i + 1; /* push k: rows k*B+1.. */
        ck_assert_int_eq(ss__emb_client_push(c, &spec, ids, B, g), SS_OK);
        ack[acked++] = ss__now_ns();
        const uint64_t due = start + (uint64_t)acked * ns_per_push;
        if (ss__now_ns() < due)
            ss__sleep_ns(due - ss__now_ns());
    }
    const uint64_t kill_ns = ss__now_ns();
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    ss__emb_client_destroy(c);
    int bound = 0;
    while (bound < acked && ack[bound] + (uint64_t)BOUND_MS * 1000000ull <= kill_ns)
        bound++;
    ck_assert_int_gt(bound, 0);

    extra[2] = NULL; /* the same database, a normal disk */
    pid = proc_start_ps(log, target, 64, "127.0.0.1:0", extra);
    ck_assert_int_eq(ss__emb_client_create(target, NULL, 30000, &c, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_client_open_table(c, &spec, NULL, NULL, 0), SS_OK);
    int found = 0; /* pushes whose rows are all in the database */
    for (int k = 0; k < acked; k++) {
        for (int i = 0; i < B; i++)
            ids[i] = (uint64_t)k * B + (uint64_t)i + 1;
        ck_assert_int_eq(ss__emb_client_lookup(c, &spec, ids, B, rows), SS_OK);
        int present = 0;
        for (int i = 0; i < B * DIM; i++)
            present += rows[i] == 1.0f;
        found += present == B * DIM;
        ck_assert_msg(k >= bound || present == B * DIM,
                      "push %d of %d, acknowledged %.0f ms before SIGKILL, is not in the database",
                      k, acked, (double)(kill_ns - ack[k]) / 1e6);
    }
    printf("write-behind on a 4 MB/s disk (lag 50 ms): %d pushes of %d new rows in %.1f s, %d "
           ">= %d ms before SIGKILL, %d found after restart; newest lost push %.0f ms before\n",
           acked, B, (double)(kill_ns - start) / 1e9, bound, BOUND_MS, found,
           found < acked ? (double)(kill_ns - ack[found]) / 1e6 : 0.0);
    ss__emb_client_destroy(c);
    kill(pid, SIGTERM);
    ck_assert_int_eq(WEXITSTATUS(proc_wait(pid, 30)), 0);
    remove_dir();
}
END_TEST

START_TEST(test_checkpoint_rpc_and_sigterm_flush) {
    char db[128], log[128], target[64], ckpt[128];
    make_paths(db, log);
    snprintf(ckpt, sizeof ckpt, "%s/ckdir/emb/at-push", g_dir);
    ss__emb_client *c;
    pid_t pid = start_ps(db, "--sync-writes=false", log, target, &c);
    uint64_t ids[K];
    float g[K * DIM], at_ckpt[K * DIM], later[K * DIM], rows[K * DIM];
    test_ids(ids);
    for (int i = 0; i < K * DIM; i++)
        g[i] = -(float)(i % 13) * 0.25f;
    ss__emb_spec spec = table_spec();
    ck_assert_int_eq(ss__emb_client_push(c, &spec, ids, K, g), SS_OK);
    read_rows(c, at_ckpt);

    ss__rpc_channel *ch;
    ck_assert_int_eq(ss__rpc_channel_create(target, 0, NULL, &ch, NULL, 0), SS_OK);
    Shadowsync__V1__EmbCheckpointRequest m = SHADOWSYNC__V1__EMB_CHECKPOINT_REQUEST__INIT;
    m.name = "at-push";
    uint8_t buf[256], *resp = NULL;
    size_t len = shadowsync__v1__emb_checkpoint_request__pack(&m, buf), rl;
    char msg[200];
    ck_assert_int_eq(ss__rpc_call(ch, "/shadowsync.v1.Embedding/Checkpoint", buf, len, 10000, false,
                                  &resp, &rl, msg, sizeof msg),
                     SS_OK);
    Shadowsync__V1__EmbCheckpointReply *rep =
        shadowsync__v1__emb_checkpoint_reply__unpack(NULL, rl, resp);
    ck_assert_ptr_nonnull(rep);
    ck_assert_str_eq(rep->path, ckpt); /* under --checkpoint-dir, by name */
    shadowsync__v1__emb_checkpoint_reply__free_unpacked(rep, NULL);
    free(resp);
    /* A path, absolute or relative, or a name taken is refused; nothing
     * is written outside the server's directory. */
    char outside[160];
    snprintf(outside, sizeof outside, "%s/outside", g_dir);
    const char *bad[] = {"relative/dir", outside, "../../outside", "at-push"};
    const ss_status want[] = {SS_ERR_INVALID_ARGUMENT, SS_ERR_INVALID_ARGUMENT,
                              SS_ERR_INVALID_ARGUMENT, SS_ERR_EXISTS};
    for (int i = 0; i < 4; i++) {
        m.name = (char *)bad[i];
        len = shadowsync__v1__emb_checkpoint_request__pack(&m, buf);
        ck_assert_int_eq(ss__rpc_call(ch, "/shadowsync.v1.Embedding/Checkpoint", buf, len, 10000,
                                      false, &resp, &rl, msg, sizeof msg),
                         want[i]);
    }
    struct stat sb;
    ck_assert_int_ne(stat(outside, &sb), 0);
    ss__rpc_channel_destroy(ch);

    ck_assert_int_eq(ss__emb_client_push(c, &spec, ids, K, g), SS_OK); /* after the checkpoint */
    read_rows(c, later);
    ss__emb_client_destroy(c);
    kill(pid, SIGTERM); /* graceful: flushes the dirty rows */
    ck_assert_int_eq(WEXITSTATUS(proc_wait(pid, 30)), 0);

    pid = start_ps(db, "--sync-writes=false", log, target, &c);
    read_rows(c, rows);
    ck_assert_mem_eq(rows, later, sizeof rows);
    ss__emb_client_destroy(c);
    kill(pid, SIGTERM);
    proc_wait(pid, 30);

    pid = start_ps(ckpt, "--sync-writes=false", log, target, &c); /* the checkpoint as a db */
    read_rows(c, rows);
    ck_assert_mem_eq(rows, at_ckpt, sizeof rows);
    ss__emb_client_destroy(c);
    kill(pid, SIGTERM);
    proc_wait(pid, 30);
    remove_dir();
}
END_TEST

/* Check forks a process per test: gRPC starts in each, not before. */
SS_CHECK_MAIN("emb_durability", 180, ss__rpc_init, ss__rpc_shutdown,
              test_sync_writes_survive_sigkill, test_sync_writes_are_synced_before_the_ack,
              test_checkpoint_does_not_freeze_the_ps, test_write_behind_loses_at_most_the_lag,
              test_write_behind_lag_holds_on_a_slow_disk, test_checkpoint_rpc_and_sigterm_flush)
