/* Settings of the public API by name (ss_*_config_set, SHADOWSYNC_* from
 * the environment), the messages of ss_last_error() that say which
 * setting is wrong and why, the versioned config structs, and the
 * trainer's metrics text. A user's view: no internal header is used. */
#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "common/clock.h"
#include "procs.h"
#include "shadowsync/shadowsync.h"

static char tmpdir[] = "/tmp/ss-config-XXXXXX";

/* The last error holds every fragment of want. */
static void said(const char *a, const char *b) {
    const char *e = ss_last_error();
    ck_assert_msg(strstr(e, a) != NULL, "ss_last_error() = \"%s\", wanted \"%s\" in it", e, a);
    if (b)
        ck_assert_msg(strstr(e, b) != NULL, "ss_last_error() = \"%s\", wanted \"%s\" in it", e, b);
}

START_TEST(test_set_by_key_uses_the_command_line_names) {
    ss_trainer_config *c;
    ck_assert_int_eq(ss_trainer_config_create(&c), SS_OK);
    ck_assert_uint_eq(c->struct_size, sizeof *c);
    ck_assert_int_eq(ss_trainer_config_set(c, "ps", "127.0.0.1:7"), SS_OK);
    ck_assert_int_eq(ss_trainer_config_set(c, "sync", "foreground"), SS_OK);
    ck_assert_int_eq(ss_trainer_config_set(c, "rpc-timeout-ms", "2500"), SS_OK);
    ck_assert_int_eq(ss_trainer_config_set(c, "SHADOWSYNC_ALPHA", "0.25"), SS_OK);
    ck_assert_int_eq(ss_trainer_config_set(c, "bmuf_nesterov", "no"), SS_OK);
    ck_assert_int_eq(ss_trainer_config_set(c, "trainer_name", "t7"), SS_OK);
    ck_assert_str_eq(c->ps, "127.0.0.1:7");
    ck_assert_int_eq(c->mode, SS_SYNC_FOREGROUND);
    ck_assert_uint_eq(c->timeout_ms, 2500);
    ck_assert_float_eq(c->alpha, 0.25f);
    ck_assert_int_eq(c->bmuf_nesterov, 0);
    ck_assert_str_eq(c->name, "t7");
    ck_assert_int_eq(ss_trainer_config_set(c, "sync", "shadow"), SS_OK);
    ck_assert_int_eq(c->mode, SS_SYNC_BACKGROUND);

    /* Refusals name the key and leave the config as it was. */
    ss_trainer_config before = *c;
    static const struct {
        const char *key, *value, *said, *why;
        ss_status st;
    } refused[] = {
        {"alpah", "0.3", "unknown trainer setting", "alpah", SS_ERR_NOT_FOUND},
        {"alpha", "a half", "alpha=\"a half\"", "not a finite number", SS_ERR_INVALID_ARGUMENT},
        {"sync", "sometimes", "sync=\"sometimes\"", "none|shadow|foreground",
         SS_ERR_INVALID_ARGUMENT},
        {"shadow_threads", "0", "shadow_threads=0", "[1, 256]", SS_ERR_INVALID_ARGUMENT},
        {"sync_every", "-3", "sync_every=\"-3\"", "not a whole number", SS_ERR_INVALID_ARGUMENT},
        {"chunk_floats", "67108865", "chunk_floats=67108865", "[0, 67108864]",
         SS_ERR_INVALID_ARGUMENT},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        ck_assert_int_eq(ss_trainer_config_set(c, refused[i].key, refused[i].value), refused[i].st);
        said(refused[i].said, refused[i].why);
    }
    ck_assert_mem_eq(c, &before, sizeof before);
    ck_assert_uint_eq(c->chunk_floats, 0); /* the library's default */
    ck_assert_int_eq(ss_trainer_config_set(c, "chunk-floats", "262144"), SS_OK);
    ck_assert_uint_eq(c->chunk_floats, 262144);
    ss_trainer_config_destroy(c);

    ss_table_config *tc;
    ck_assert_int_eq(ss_table_config_create("ads", 16, &tc), SS_OK);
    ck_assert_int_eq(ss_table_config_set(tc, "emb", "cached"), SS_OK);
    ck_assert_int_eq(ss_table_config_set(tc, "emb-optimizer", "adagrad"), SS_OK);
    ck_assert_int_eq(ss_table_config_set(tc, "emb_sync_ms", "50"), SS_OK);
    ck_assert_int_eq(tc->mode, SS_TABLE_CACHED);
    ck_assert_int_eq(tc->optimizer, SS_TABLE_ADAGRAD);
    ck_assert_uint_eq(tc->sync_interval_ms, 50);
    ck_assert_int_eq(ss_table_config_set(tc, "emb", "far"), SS_ERR_INVALID_ARGUMENT);
    said("emb=\"far\"", "local|remote|cached");
    ck_assert_int_eq(ss_table_config_set(tc, "emb_dim", "5000"), SS_ERR_INVALID_ARGUMENT);
    said("emb_dim=5000", "[1, 4096]");
    ss_table_config_destroy(tc);
}
END_TEST

START_TEST(test_environment_names_the_variable) {
    ss_trainer_config c;
    ss_trainer_config_init(&c);
    setenv("SHADOWSYNC_PS", "127.0.0.1:9", 1);
    setenv("SHADOWSYNC_SYNC", "foreground", 1);
    setenv("SHADOWSYNC_TRAINER_NAME", "envy", 1);
    setenv("SHADOWSYNC_RPC_TIMEOUT_MS", "1234", 1);
    setenv("SHADOWSYNC_ROUND_INTERVAL_US", "50", 1);
    setenv("SHADOWSYNC_CHUNK_FLOATS", "65536", 1);
    ck_assert_int_eq(ss_trainer_config_from_env(&c), SS_OK);
    ck_assert_uint_eq(c.chunk_floats, 65536);
    ck_assert_int_eq(c.mode, SS_SYNC_FOREGROUND);
    ck_assert_str_eq(c.name, "envy");
    ck_assert_uint_eq(c.timeout_ms, 1234);
    ck_assert_uint_eq(c.round_interval_us, 50);

    ss_trainer_config before = c;
    setenv("SHADOWSYNC_ALPHA", "lots", 1);
    ck_assert_int_eq(ss_trainer_config_from_env(&c), SS_ERR_INVALID_ARGUMENT);
    said("SHADOWSYNC_ALPHA=\"lots\"", "not a finite number");
    ck_assert_mem_eq(&c, &before, sizeof c);
    unsetenv("SHADOWSYNC_ALPHA");

    /* 0.1.0's names still work when the new one is not set; the new wins. */
    unsetenv("SHADOWSYNC_SYNC");
    unsetenv("SHADOWSYNC_TRAINER_NAME");
    setenv("SHADOWSYNC_MODE", "none", 1);
    setenv("SHADOWSYNC_TRAINER", "old", 1);
    setenv("SHADOWSYNC_TIMEOUT_MS", "999", 1);
    ck_assert_int_eq(ss_trainer_config_from_env(&c), SS_OK);
    ck_assert_int_eq(c.mode, SS_SYNC_NONE);
    ck_assert_str_eq(c.name, "old");
    ck_assert_uint_eq(c.timeout_ms, 1234); /* SHADOWSYNC_RPC_TIMEOUT_MS is set */
    setenv("SHADOWSYNC_MODE", "sometimes", 1);
    ck_assert_int_eq(ss_trainer_config_from_env(&c), SS_ERR_INVALID_ARGUMENT);
    said("SHADOWSYNC_MODE=\"sometimes\"", NULL);

    ss_table_config tc;
    ss_table_config_init(&tc, "ads", 8);
    setenv("SHADOWSYNC_EMB", "remote", 1);
    setenv("SHADOWSYNC_EMB_LR", "0.2", 1);
    ck_assert_int_eq(ss_table_config_from_env(&tc), SS_OK);
    ck_assert_int_eq(tc.mode, SS_TABLE_REMOTE);
    ck_assert_float_eq(tc.lr, 0.2f);
    setenv("SHADOWSYNC_EMB_CACHE_ROWS", "many", 1);
    ck_assert_int_eq(ss_table_config_from_env(&tc), SS_ERR_INVALID_ARGUMENT);
    said("SHADOWSYNC_EMB_CACHE_ROWS=\"many\"", NULL);
    const char *vars[] = {"SHADOWSYNC_PS",
                          "SHADOWSYNC_RPC_TIMEOUT_MS",
                          "SHADOWSYNC_ROUND_INTERVAL_US",
                          "SHADOWSYNC_CHUNK_FLOATS",
                          "SHADOWSYNC_MODE",
                          "SHADOWSYNC_TRAINER",
                          "SHADOWSYNC_TIMEOUT_MS",
                          "SHADOWSYNC_EMB",
                          "SHADOWSYNC_EMB_LR",
                          "SHADOWSYNC_EMB_CACHE_ROWS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        unsetenv(vars[i]);
}
END_TEST

/* What a misconfigured trainer is told: the setting and the reason. */
START_TEST(test_open_says_which_setting_is_wrong) {
    ss_trainer_config c;
    ss_trainer *t = NULL;
    ss_trainer_config_init(&c);
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    said("ps: no parameter servers", "SHADOWSYNC_PS");
    c.ps = "127.0.0.1:1";
    c.alpha = 1.5f;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    said("alpha must be in (0, 1]", "1.5");
    c.alpha = 0.5f;
    c.algo = "sgd";
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    said("algo=\"sgd\"", "easgd|ma|bmuf");
    c.algo = "easgd";
    c.mode = (ss_sync_mode)7;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    said("sync: unknown mode 7", NULL);
    c.mode = SS_SYNC_FOREGROUND;
    c.agent = "/tmp/agent.sock";
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    said("agent=/tmp/agent.sock", "background only");
    c.agent = NULL;
    c.tls_cert = "cert.pem";
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    said("tls_cert and tls_key", NULL);
    c.tls_cert = NULL;
    c.encoding = "int4";
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    said("encoding=\"int4\"", "f32|fp16|bf16|int8");
    c.encoding = "int8";
    c.mode = SS_SYNC_BACKGROUND;
    c.agent = "/tmp/agent.sock";
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    said("encoding=int8", "--encoding int8");
    c.encoding = NULL;
    c.chunk_floats = 65536; /* the agent cuts the chunks */
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    said("chunk_floats=65536", "--chunk-floats");
    c.agent = NULL;
    c.chunk_floats = 1u << 27;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    said("chunk_floats=134217728", "at most 67108864");
    c.chunk_floats = 0;
    /* Decentralized averaging: instead of a PS, S-MA only, a rank in the
     * list. */
    c.peers = "127.0.0.1:1,127.0.0.1:2";
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    said("peers and ps: pick one", NULL);
    c.ps = NULL;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    said("peers: decentralized averaging runs S-MA", "algo=ma");
    c.algo = "ma";
    c.peer_schedule = "star";
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    said("peer_schedule=\"star\"", "ring|random");
    /* Trees: S-MA or S-BMUF (a partition's root keeps its block state),
     * not S-EASGD; a topology file that is not there is named. */
    c.peer_schedule = "tree";
    c.algo = "easgd";
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    said("peer_schedule=tree", "ma or bmuf");
    c.algo = "bmuf";
    c.topology = "/nonexistent/topology.txt";
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_IO);
    said("/nonexistent/topology.txt", "peer_schedule=tree");
    c.topology = NULL;
    c.algo = "ma";
    c.peer_schedule = "random";
    c.peer_rank = 5;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    said("peer_rank=5", "peer_rank one of them");
    c.peers = NULL;
    c.peer_rank = 0;
    c.ps = "127.0.0.1:1";
    c.algo = "easgd";
    c.mode = SS_SYNC_FOREGROUND;

    /* A struct nobody initialized, and one from a newer header. */
    ss_trainer_config raw;
    memset(&raw, 0, sizeof raw);
    raw.mode = SS_SYNC_NONE;
    ck_assert_int_eq(ss_trainer_open(&raw, &t), SS_ERR_INVALID_ARGUMENT);
    said("struct_size is 0", "ss_trainer_config_init");
    ss_trainer_config_init(&raw);
    raw.struct_size = sizeof raw + 8;
    ck_assert_int_eq(ss_trainer_open(&raw, &t), SS_ERR_INVALID_ARGUMENT);
    said("newer ShadowSync", NULL);

    /* A success after a failure: the next failure's message is its own. */
    ss_trainer_config_init(&c);
    c.mode = SS_SYNC_NONE;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_OK);
    ss_dense *g;
    ck_assert_int_eq(ss_trainer_add_dense(t, "w", 4, NULL, &g), SS_OK);
    ck_assert_int_eq(ss_trainer_add_dense(t, "w", 4, NULL, &g), SS_ERR_EXISTS);
    said("group w", "by that name");
    ck_assert_int_eq(ss_trainer_add_dense(t, "a b", 4, NULL, &g), SS_ERR_INVALID_ARGUMENT);
    said("group name \"a b\"", NULL);

    ss_table_config tc;
    ss_table *tb;
    ss_table_config_init(&tc, "ads", 4);
    tc.mode = SS_TABLE_REMOTE;
    ck_assert_int_eq(ss_table_open(t, &tc, &tb), SS_ERR_INVALID_ARGUMENT);
    said("emb=remote needs shards", "SHADOWSYNC_EMB_PS");
    tc.mode = SS_TABLE_LOCAL;
    tc.lr = -1.0f;
    ck_assert_int_eq(ss_table_open(t, &tc, &tb), SS_ERR_INVALID_ARGUMENT);
    said("table ads", "lr");
    tc.lr = 0.1f;
    ck_assert_int_eq(ss_table_open(t, &tc, &tb), SS_OK);
    const uint64_t ids[2] = {1, 2};
    const float grads[8] = {0, 0, 0, 0, 0, NAN, 0, 0};
    ck_assert_int_eq(ss_table_push(tb, ids, 2, grads), SS_ERR_NON_FINITE);
    said("id 2", "NaN or Inf");
    ck_assert_int_eq(ss_table_close(tb), SS_ERR_STATE);
    said("belongs to a trainer", NULL);
    ck_assert_int_eq(ss_trainer_close(t), SS_OK);
}
END_TEST

/* shadowsync-ps on 127.0.0.1 without HTTP, its log tmpdir/name, more
 * flags (NULL-terminated, at most 4) after; its address into ps. */
static pid_t start_ps(const char *name, char ps[64], char *const *more) {
    char log[300];
    snprintf(log, sizeof log, "%s/%s", tmpdir, name);
    char *extra[8] = {"--http", ""};
    for (int i = 0; more && more[i]; i++) {
        ck_assert_int_lt(i, 4);
        extra[2 + i] = more[i];
    }
    return proc_start_ps(log, ps, 64, "127.0.0.1:0", extra);
}

static void stop_ps(pid_t pid) {
    kill(pid, SIGTERM);
    proc_wait(pid, 30);
}

/* A trainer of ps (NULL: none) that syncs in the foreground every step,
 * with no final rounds and 3 s calls. */
static void foreground_config(ss_trainer_config *c, const char *ps) {
    ss_trainer_config_init(c);
    c->ps = ps;
    c->mode = SS_SYNC_FOREGROUND;
    c->sync_every = 1;
    c->final_rounds = 0;
    c->timeout_ms = 3000;
}

/* The metrics text of an in-process trainer: steps, rounds of its group
 * against a real PS, its table, the build. */
START_TEST(test_trainer_metrics_text) {
    char ps[64];
    pid_t pid = start_ps("ps.log", ps, NULL);
    ss_trainer_config c;
    foreground_config(&c, ps);
    c.name = "m0";
    ss_trainer *t;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_OK);
    ss_dense *g;
    ck_assert_int_eq(ss_trainer_add_dense(t, "w", 16, NULL, &g), SS_OK);
    ss_table_config tc;
    ss_table *tb;
    ss_table_config_init(&tc, "ads", 4);
    ck_assert_int_eq(ss_table_open(t, &tc, &tb), SS_OK);
    const uint64_t ids[3] = {5, 6, 5};
    float rows[12];
    ck_assert_int_eq(ss_table_lookup(tb, ids, 3, rows), SS_OK);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(ss_trainer_step(t), SS_OK);

    size_t need = 0;
    char small[16];
    ck_assert_int_eq(ss_trainer_metrics(t, small, sizeof small, &need), SS_ERR_TOO_LARGE);
    said("buf: 16 bytes", NULL);
    ck_assert_uint_gt(need, sizeof small);
    char *text = malloc(need + 1);
    ck_assert_int_eq(ss_trainer_metrics(t, text, need + 1, NULL), SS_OK);
    ck_assert_uint_eq(strlen(text), need);
    const char *want[] = {
        "shadowsync_build_info{version=\"" SS_PROJECT_VERSION "\"} 1",
        "shadowsync_trainer_steps_total{trainer=\"m0\"} 3",
        "shadowsync_sync_rounds_total{trainer=\"m0\",group=\"w\",algo=\"easgd\"} 3",
        "shadowsync_table_lookups_total{trainer=\"m0\",table=\"ads\"} 3",
        "shadowsync_table_resident_rows{trainer=\"m0\",table=\"ads\"} 2"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(text, want[i])) {
            fprintf(stderr, "%s", text);
            ck_abort_msg("no \"%s\" in the metrics (above)", want[i]);
        }
    free(text);
    ck_assert_int_eq(ss_trainer_close(t), SS_OK);
    stop_ps(pid);
}
END_TEST

/* A PS that refuses: the trainer is told which PS and what it said; a PS
 * that is not there: its address and that nothing answered. */
START_TEST(test_ps_refusal_is_said) {
    char ps[64], tok[300];
    snprintf(tok, sizeof tok, "%s/token", tmpdir);
    FILE *f = fopen(tok, "w");
    ck_assert_ptr_nonnull(f);
    fputs("0123456789abcdef0123456789abcdef\n", f);
    fclose(f);
    pid_t pid = start_ps("ps-tok.log", ps, (char *[]){"--auth-token-file", tok, NULL});
    unsetenv("SHADOWSYNC_AUTH_TOKEN_FILE");
    ss_trainer_config c;
    foreground_config(&c, ps);
    ss_trainer *t;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_OK); /* connects lazily */
    ss_dense *g;
    ck_assert_int_eq(ss_trainer_add_dense(t, "w", 4, NULL, &g), SS_ERR_PERMISSION);
    said("group w: joining the PS", ps); /* the call to <the PS's address>: what it said */
    said("SHADOWSYNC_AUTH_TOKEN_FILE", NULL);
    ck_assert_int_eq(ss_trainer_close(t), SS_OK);
    stop_ps(pid);
    /* Nothing listens: the address, and that the connection was refused
     * (within the probe's time, not after a call's deadline). */
    c.ps = "127.0.0.1:1";
    c.timeout_ms = 500;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_OK);
    ck_assert_int_ne(ss_trainer_add_dense(t, "w", 4, NULL, &g), SS_OK);
    ck_assert_str_eq(ss_last_error(),
                     "group w: joining the PS: cannot reach the PS at 127.0.0.1:1 (connection "
                     "refused)");
    ck_assert_int_eq(ss_trainer_close(t), SS_OK);
}
END_TEST

/* chunk_floats reaches the PS: trainer A cuts group w (300 floats) into
 * chunks of 100, trainer B, with the default, into one chunk; the PS
 * refuses B's and B is told which setting to line up. With A's setting,
 * B joins. */
START_TEST(test_chunk_floats_must_match) {
    char ps[64];
    pid_t pid = start_ps("ps-chunks.log", ps, NULL);
    ss_trainer_config c;
    foreground_config(&c, ps);
    c.chunk_floats = 100;
    ss_trainer *a, *b;
    ss_dense *ga, *gb;
    ck_assert_int_eq(ss_trainer_open(&c, &a), SS_OK);
    ck_assert_int_eq(ss_trainer_add_dense(a, "w", 300, NULL, &ga), SS_OK);
    c.chunk_floats = 0;
    ck_assert_int_eq(ss_trainer_open(&c, &b), SS_OK);
    ck_assert_int_eq(ss_trainer_add_dense(b, "w", 300, NULL, &gb), SS_ERR_INVALID_ARGUMENT);
    said("chunk w[0:300) overlaps chunk w[", "chunk_floats");
    ck_assert_int_eq(ss_trainer_close(b), SS_OK);
    c.chunk_floats = 100;
    ck_assert_int_eq(ss_trainer_open(&c, &b), SS_OK);
    ck_assert_int_eq(ss_trainer_add_dense(b, "w", 300, NULL, &gb), SS_OK);
    ck_assert_int_eq(ss_trainer_close(b), SS_OK);
    ck_assert_int_eq(ss_trainer_close(a), SS_OK);
    stop_ps(pid);
}
END_TEST

static void write_map(const char *path, unsigned epoch, const char *ps) {
    char tmp[400];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "# the fleet\nepoch %u\nps %s\n", epoch, ps);
    fclose(f);
    ck_assert_int_eq(rename(tmp, path), 0); /* the PS reads a whole file or the old one */
}

/* Routing by shard map epoch: a PS serving epoch 2 refuses a trainer
 * routed by epoch 1, saying both; a trainer of epoch 2 syncs; when the PS
 * reads epoch 3, that trainer's next round is refused the same way. A bad
 * map names its line; ps and shard_map together are refused. */
START_TEST(test_stale_shard_map_epoch_is_refused) {
    char ps[64], psmap[300], tmap[300];
    snprintf(psmap, sizeof psmap, "%s/ps.map", tmpdir);
    snprintf(tmap, sizeof tmap, "%s/trainer.map", tmpdir);
    write_map(psmap, 2, "127.0.0.1:1"); /* the PS reads only the epoch */
    pid_t pid = start_ps("ps-map.log", ps, (char *[]){"--shard-map", psmap, NULL});
    ss_trainer_config c;
    foreground_config(&c, NULL);
    c.shard_map = tmap;
    write_map(tmap, 1, ps);
    ss_trainer *t;
    ss_dense *g;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_OK);
    ck_assert_int_eq(ss_trainer_add_dense(t, "w", 4, NULL, &g), SS_ERR_STATE);
    said("was routed by shard map epoch 1; this server serves epoch 2: reload the shard map", NULL);
    ck_assert_int_eq(ss_trainer_close(t), SS_OK);
    write_map(tmap, 2, ps);
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_OK);
    ck_assert_int_eq(ss_trainer_add_dense(t, "w", 4, NULL, &g), SS_OK);
    ck_assert_int_eq(ss_trainer_step(t), SS_OK);
    write_map(psmap, 3, "127.0.0.1:1");
    ss_status st = SS_OK;
    for (int i = 0; i < 100 && st == SS_OK; i++) { /* the PS reads its map every second */
        ss__sleep_ns(50000000);
        st = ss_trainer_step(t);
    }
    ck_assert_int_eq(st, SS_ERR_STATE);
    said("routed by shard map epoch 2; this server serves epoch 3", NULL);
    ck_assert_int_eq(ss_trainer_close(t), SS_OK);
    /* A map that is not one, and a map beside ps. */
    FILE *f = fopen(tmap, "w");
    fprintf(f, "epoch 4\npss 127.0.0.1:1\n");
    fclose(f);
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    said("line 2: \"pss\" is not a key (epoch, ps, from)", tmap);
    write_map(tmap, 4, ps);
    c.ps = ps;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    said("and shard_map=", "pick one");
    stop_ps(pid);
}
END_TEST

/* A local table that lives for months: admission on the 2nd push, expiry
 * after 1 s (the table's sweep runs once a second), and the bounds refused
 * for a cached table, saying where they go. */
START_TEST(test_bounded_local_table) {
    ss_table_config tc;
    ss_table *tb;
    ss_table_config_init(&tc, "bounded", 2);
    tc.lr = 1.0f;
    ck_assert_int_eq(ss_table_config_set(&tc, "emb_admit_count", "2"), SS_OK);
    ck_assert_int_eq(ss_table_config_set(&tc, "emb_ttl_s", "1"), SS_OK);
    ck_assert_int_eq(ss_table_config_set(&tc, "emb_admit_count", "70000"), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss_table_open(NULL, &tc, &tb), SS_OK);
    const uint64_t id = 7;
    const float g[2] = {1, 1};
    float before[2], row[2];
    ck_assert_int_eq(ss_table_lookup(tb, &id, 1, before), SS_OK);
    ck_assert_int_eq(ss_table_push(tb, &id, 1, g), SS_OK); /* counted, not stored */
    ck_assert_int_eq(ss_table_lookup(tb, &id, 1, row), SS_OK);
    ck_assert_float_eq(row[0], before[0]);
    ck_assert_int_eq(ss_table_push(tb, &id, 1, g), SS_OK); /* the 2nd: stored and applied */
    ck_assert_int_eq(ss_table_lookup(tb, &id, 1, row), SS_OK);
    ck_assert_float_eq(row[0], before[0] - 1.0f);
    ss_table_stats st;
    ck_assert_int_eq(ss_table_get_stats(tb, &st), SS_OK);
    ck_assert_uint_eq(st.resident_rows, 1);
    for (int i = 0; i < 40 && st.resident_rows; i++) { /* expires within ~2 s */
        usleep(100000);
        ck_assert_int_eq(ss_table_get_stats(tb, &st), SS_OK);
    }
    ck_assert_uint_eq(st.resident_rows, 0);
    ck_assert_int_eq(ss_table_close(tb), SS_OK);
    tc.mode = SS_TABLE_CACHED;
    tc.ps = "127.0.0.1:1";
    ck_assert_int_eq(ss_table_open(NULL, &tc, &tb), SS_ERR_INVALID_ARGUMENT);
    said("bound local tables", "--emb-ttl-s");
}
END_TEST

int main(void) {
    if (proc_main_start(tmpdir))
        return EXIT_FAILURE;
    int rc = ss__check_tests("config", 60, NULL, NULL, test_set_by_key_uses_the_command_line_names,
                             test_bounded_local_table, test_environment_names_the_variable,
                             test_open_says_which_setting_is_wrong, test_trainer_metrics_text,
                             test_ps_refusal_is_said, test_chunk_floats_must_match,
                             test_stale_shard_map_epoch_is_refused);
    proc_remove_tree(tmpdir);
    return rc;
}
