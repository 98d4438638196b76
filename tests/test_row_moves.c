/* Embedding rows moving between real shadowsync-ps processes on
 * 127.0.0.1 while a client keeps pushing: a shard map with a "from" line
 * grows the fleet from 2 to 3 shards and shrinks it back. Every row's
 * value is counted by hand (SGD with lr 1 from zero rows: minus the sum of
 * its gradients), so a row lost, pushed twice, or served by a shard that
 * did not hold it yet shows as a wrong value; each shard's resident rows
 * say where the rows went. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_run.h"
#include "common/clock.h"
#include "embedding-store/emb_store.h"
#include "procs.h"
#include "ps/row_moves.h"
#include "rpc/emb/emb_client.h"
#include "rpc/emb/emb_wire.h"
#include "rpc/emb/embedding.pb-c.h"
#include "rpc/rpc_pb.h"
#include "rpc_checks.h"
#include "shadowsync/shadowsync.h"

enum { K = 600, DIM = 4, SHARDS = 3 };

static char g_dir[64], g_map[128];

static void write_map_at(const char *path, uint64_t epoch, const char *ps, const char *from) {
    ss__check_write_map(path, epoch, ps, from);
}

static void write_map(uint64_t epoch, const char *ps, const char *from) {
    write_map_at(g_map, epoch, ps, from);
}

/* The map file PS i reads: the fleet's, or with own_maps one of its own. */
static void map_of(int i, bool own_maps, char *path, size_t len) {
    if (own_maps)
        snprintf(path, len, "%s/ps%d.map", g_dir, i);
    else
        snprintf(path, len, "%s", g_map);
}

static ss__emb_spec table_spec(void) {
    ss__emb_spec s;
    ck_assert_int_eq(ss__emb_spec_init(&s, "moving", DIM), SS_OK);
    s.lr = 1.0f;
    s.init_scale = 0.0f;
    return s;
}

/* Three PS (the third idle until the map names it), each with its own
 * database and the one map file. */
/* PS i on listen (its database, log and map by i). */
static pid_t start_ps(int i, const char *listen, char *addr, const char *batch, const char *pause,
                      bool own_maps) {
    char db[128], log[128], map[128];
    map_of(i, own_maps, map, sizeof map);
    snprintf(db, sizeof db, "%s/db%d", g_dir, i);
    snprintf(log, sizeof log, "%s/ps%d.log", g_dir, i);
    unlink(log); /* a restart's "listening on" is the one waited for */
    /* Every acknowledged push synced (what "nothing acknowledged lost"
     * asks of a PS); rows that come in a move are written only by the
     * move's own write, the flusher's being 2.5 s away. */
    char *extra[] = {"--http",
                     "",
                     "--emb-db",
                     db,
                     "--shard-map",
                     map,
                     "--move-batch-rows",
                     (char *)batch,
                     "--move-pause-ms",
                     (char *)pause,
                     "--flush-lag-ms",
                     "5000",
                     "--sync-writes",
                     NULL};
    return proc_start_ps(log, addr, 64, listen, extra);
}

static void start_fleet(pid_t *pid, char addr[SHARDS][64], const char *batch, const char *pause,
                        bool own_maps) {
    ss__check_tmpdir(g_dir, "ss-moves");
    snprintf(g_map, sizeof g_map, "%s/fleet.map", g_dir);
    for (int i = 0; i < SHARDS; i++) {
        char map[128];
        map_of(i, own_maps, map, sizeof map);
        write_map_at(map, 1, "127.0.0.1:1", NULL); /* a placeholder: ports are not known yet */
        pid[i] = start_ps(i, "127.0.0.1:0", addr[i], batch, pause, own_maps);
    }
}

static void stop_fleet(pid_t *pid) {
    for (int i = 0; i < SHARDS; i++) {
        kill(pid[i], SIGTERM);
        ck_assert_int_eq(proc_wait(pid[i], 30), 0);
    }
    ss__check_rmdir(g_dir);
}

/* The table's rows resident on one PS (Embedding/Stats). */
static uint64_t resident(const char *addr) {
    ss__rpc_channel *ch;
    ck_assert_int_eq(ss__rpc_channel_create(addr, 0, NULL, &ch, NULL, 0), SS_OK);
    Shadowsync__V1__TableStatsRequest req = SHADOWSYNC__V1__TABLE_STATS_REQUEST__INIT;
    req.table = "moving";
    ProtobufCMessage *r;
    char why[256];
    ss_status st =
        ss__rpc_call_message(ch, "/shadowsync.v1.Embedding/Stats", &req.base, 5000, true,
                             &shadowsync__v1__table_stats_reply__descriptor, &r, why, sizeof why);
    uint64_t n = 0;
    if (st == SS_OK) {
        n = ((Shadowsync__V1__TableStatsReply *)r)->resident_rows;
        protobuf_c_message_free_unpacked(r, NULL);
    }
    ss__rpc_channel_destroy(ch);
    return n; /* a table not opened there (NOT_FOUND): no rows */
}

/* A client of the map's epoch 2 (the first two PS); OpenTable tried until
 * both serve that epoch (they read the map every 200 ms). */
static ss__emb_client *open_client(char addr[SHARDS][64], const ss__emb_spec *spec, bool own_maps) {
    char list[160], map[128];
    snprintf(list, sizeof list, "%s,%s", addr[0], addr[1]);
    write_map(2, list, NULL);
    for (int i = 0; own_maps && i < SHARDS; i++) {
        map_of(i, own_maps, map, sizeof map);
        write_map_at(map, 2, list, NULL);
    }
    ss__emb_client *c;
    ck_assert_int_eq(ss__emb_client_create(list, NULL, 10000, &c, NULL, 0), SS_OK);
    ss__emb_client_set_epoch(c, 2);
    ck_assert_int_eq(ss__emb_client_follow_map(c, g_map), SS_OK);
    ss_status st = SS_ERR_STATE;
    for (int i = 0; i < 50 && st != SS_OK; i++) {
        st = ss__emb_client_open_table(c, spec, NULL, NULL, 0);
        if (st != SS_OK)
            ss__sleep_ns(100000000ull);
    }
    ck_assert_int_eq(st, SS_OK);
    return c;
}

static uint64_t ids[K];
static float grads[K * DIM];

/* One push of every row: row i gets i + 1 in each value. */
static void push_all(ss__emb_client *c, const ss__emb_spec *spec) {
    for (int i = 0; i < K; i++) {
        ids[i] = (uint64_t)i * 7919 + 3;
        for (int d = 0; d < DIM; d++)
            grads[i * DIM + d] = (float)(i + 1);
    }
    ck_assert_int_eq(ss__emb_client_push(c, spec, ids, K, grads), SS_OK);
}

/* Every row read through the client: minus pushes times (i + 1). */
static void check_rows(ss__emb_client *c, const ss__emb_spec *spec, int pushes) {
    static float rows[K * DIM];
    ck_assert_int_eq(ss__emb_client_lookup(c, spec, ids, K, rows), SS_OK);
    for (int i = 0; i < K; i++)
        for (int d = 0; d < DIM; d++)
            ck_assert_msg(rows[i * DIM + d] == -(float)pushes * (float)(i + 1),
                          "row %d (id %llu): %g, want %g", i, (unsigned long long)ids[i],
                          (double)rows[i * DIM + d], -(double)pushes * (i + 1));
}

/* How many of the rows the third shard owns in a map of three. */
static uint64_t owned_by_third(void) {
    const uint32_t tid = ss__emb_table_id("moving");
    uint64_t n = 0;
    for (int i = 0; i < K; i++)
        n += ss__emb_shard_of(tid, ids[i], 3) == 2;
    return n;
}

static uint64_t wait_resident(const char *addr, uint64_t want) {
    uint64_t n = resident(addr);
    for (int i = 0; i < 100 && n != want; i++) {
        ss__sleep_ns(100000000ull);
        n = resident(addr);
    }
    return n;
}

/* A test's fleet: its PS, a client of epoch 2 (the first two), the
 * lists of two and three shards once grown. */
typedef struct fleet {
    pid_t pid[SHARDS];
    char addr[SHARDS][64];
    ss__emb_spec spec;
    ss__emb_client *c;
    char two[256], three[400];
} fleet;

/* The fleet started (batch, pause: its --move-batch-rows and
 * --move-pause-ms), its client open, every row pushed once. */
static void fleet_up(fleet *f, const char *batch, const char *pause, bool own_maps) {
    start_fleet(f->pid, f->addr, batch, pause, own_maps);
    f->spec = table_spec();
    f->c = open_client(f->addr, &f->spec, own_maps);
    push_all(f->c, &f->spec);
}

/* The lists of two and three shards, and the map of epoch 3 that grows
 * the fleet from the first to the second. */
static void grow(fleet *f) {
    snprintf(f->two, sizeof f->two, "%.63s,%.63s", f->addr[0], f->addr[1]);
    snprintf(f->three, sizeof f->three, "%.255s,%.63s", f->two, f->addr[2]);
    write_map(3, f->three, f->two);
}

static void fleet_down(fleet *f) {
    ss__emb_client_destroy(f->c);
    stop_fleet(f->pid);
}

/* 2 -> 3 -> 2 shards with pushes going on through both changes: every
 * push applied once, the third shard holding exactly the rows the map
 * gives it, then none once it is shrunk out. */
START_TEST(test_rows_move_while_pushes_go_on) {
    fleet f;
    fleet_up(&f, "4096", "0", false);
    check_rows(f.c, &f.spec, 1);
    grow(&f);
    int pushes = 1;
    for (int r = 0; r < 8; r++, pushes++) { /* the PS read the map meanwhile */
        push_all(f.c, &f.spec);
        ss__sleep_ns(200000000ull);
    }
    check_rows(f.c, &f.spec, pushes);
    const uint64_t third = owned_by_third();
    ck_assert_uint_gt(third, K / 5);
    ck_assert_uint_eq(wait_resident(f.addr[2], third), third);
    ck_assert_uint_eq(resident(f.addr[0]) + resident(f.addr[1]), K - third);
    write_map(4, f.two, f.three); /* the third shard leaves */
    for (int r = 0; r < 8; r++, pushes++) {
        push_all(f.c, &f.spec);
        ss__sleep_ns(200000000ull);
    }
    check_rows(f.c, &f.spec, pushes);
    ck_assert_uint_eq(wait_resident(f.addr[2], 0), 0);
    ck_assert_uint_eq(resident(f.addr[0]) + resident(f.addr[1]), K);
    fleet_down(&f);
}
END_TEST

/* The background mover all but stopped (a row a second): the rows the
 * client asks the new shard for come from their old shard at once, not
 * as initial rows (which a shard that did not take them first would
 * answer: zeros here, a wrong value). */
START_TEST(test_rows_asked_for_during_a_move_come_first) {
    fleet f;
    fleet_up(&f, "1", "1000", false);
    grow(&f);
    ss__sleep_ns(1500000000ull); /* every PS serves epoch 3 */
    const uint64_t third = owned_by_third();
    ck_assert_uint_lt(resident(f.addr[2]), third / 2); /* the background has barely begun */
    check_rows(f.c, &f.spec, 1);
    ck_assert_uint_eq(resident(f.addr[2]), third); /* the lookups took them */
    push_all(f.c, &f.spec);
    check_rows(f.c, &f.spec, 2);
    fleet_down(&f);
}
END_TEST

/* One shard on the new epoch, the other still on the old one: the
 * client's push is refused by the first and applied by the second; only
 * the refused part goes again (routed by the new map), so every row gets
 * the push once. */
START_TEST(test_only_refused_parts_are_sent_again) {
    fleet f;
    char list[160], map[128];
    fleet_up(&f, "4096", "0", true);
    snprintf(list, sizeof list, "%s,%s", f.addr[0], f.addr[1]);
    write_map(3, list, NULL); /* the same shards: nothing moves */
    map_of(0, true, map, sizeof map);
    write_map_at(map, 3, list, NULL);
    ss__sleep_ns(1500000000ull); /* the first PS serves epoch 3, the second still 2 */
    push_all(f.c, &f.spec);      /* epoch 2: the first refuses, the second applies */
    map_of(1, true, map, sizeof map);
    write_map_at(map, 3, list, NULL);
    check_rows(f.c, &f.spec, 2);
    fleet_down(&f);
}
END_TEST

/* SIGKILL of the new shard and then of an old one while rows move
 * (slowly), each restarted on its database: the taker kept only what it
 * had written, the giver's database kept every row not yet said to be
 * held, so every row still has every push. */
START_TEST(test_shards_killed_mid_move_lose_nothing) {
    fleet f;
    fleet_up(&f, "8", "20", false);
    grow(&f);
    const uint64_t third = owned_by_third();
    for (int i = 0; i < 100 && resident(f.addr[2]) < third / 4; i++)
        ss__sleep_ns(50000000ull);
    ck_assert_uint_lt(resident(f.addr[2]), third); /* mid-move */
    int order[] = {2, 0};
    for (int k = 0; k < 2; k++) {
        const int i = order[k];
        kill(f.pid[i], SIGKILL);
        proc_wait(f.pid[i], 10);
        char again[64];
        f.pid[i] = start_ps(i, f.addr[i], again, "8", "20", false);
        ck_assert_str_eq(again, f.addr[i]);
        ss__sleep_ns(300000000ull);
    }
    static float rows[K * DIM]; /* a lookup (harmless twice) until the channels are back */
    for (int i = 0; i < 50 && ss__emb_client_lookup(f.c, &f.spec, ids, K, rows) != SS_OK; i++)
        ss__sleep_ns(100000000ull);
    push_all(f.c, &f.spec);
    check_rows(f.c, &f.spec, 2);
    ck_assert_uint_eq(wait_resident(f.addr[2], third), third);
    fleet_down(&f);
}
END_TEST

/* The library's remote table with emb_shard_map: it routes by the map
 * file and, when the fleet grows under it, by the new list; every push
 * through it lands once. */
START_TEST(test_a_table_follows_its_shard_map) {
    fleet f;
    fleet_up(&f, "4096", "0", false); /* the map at epoch 2, served */
    ss_table_config tc;
    ss_table_config_init(&tc, "moving", DIM);
    tc.mode = SS_TABLE_REMOTE;
    tc.lr = 1.0f;
    tc.init_scale = 0.0f;
    ck_assert_int_eq(ss_table_config_set(&tc, "emb_shard_map", g_map), SS_OK);
    ss_table *tb;
    ck_assert_int_eq(ss_table_open(NULL, &tc, &tb), SS_OK);
    grow(&f);
    for (int r = 0; r < 8; r++) {
        ck_assert_int_eq(ss_table_push(tb, ids, K, grads), SS_OK);
        ck_assert_int_eq(ss_table_flush(tb), SS_OK);
        ss__sleep_ns(200000000ull);
    }
    static float rows[K * DIM];
    ck_assert_int_eq(ss_table_lookup(tb, ids, K, rows), SS_OK);
    for (int i = 0; i < K; i++)
        ck_assert_msg(rows[i * DIM] == -9.0f * (float)(i + 1), "row %d: %g", i,
                      (double)rows[i * DIM]);
    ck_assert_uint_eq(wait_resident(f.addr[2], owned_by_third()), owned_by_third());
    ss_table_stats ts;
    ck_assert_int_eq(ss_table_get_stats(tb, &ts), SS_OK);
    ck_assert_uint_eq(ts.failed_calls, 0);
    ck_assert_int_eq(ss_table_close(tb), SS_OK);
    fleet_down(&f);
}
END_TEST

/* One Handoff to addr; its status, the message in msg. */
static ss_status handoff(const char *addr, const Shadowsync__V1__HandoffRequest *req, char *msg,
                         size_t msglen) {
    ss__rpc_channel *ch;
    ck_assert_int_eq(ss__rpc_channel_create(addr, 0, NULL, &ch, NULL, 0), SS_OK);
    ProtobufCMessage *r = NULL;
    msg[0] = '\0';
    ss_status st =
        ss__rpc_call_message(ch, "/shadowsync.v1.Embedding/Handoff", &req->base, 5000, true,
                             &shadowsync__v1__handoff_reply__descriptor, &r, msg, msglen);
    if (r)
        protobuf_c_message_free_unpacked(r, NULL);
    ss__rpc_channel_destroy(ch);
    return st;
}

/* Handoff's bad input, each refused saying why, nothing taken: another
 * epoch, a map of another size, the giver itself as the taker, ids that
 * do not move to the taker (asked for or said to be held), a batch of no
 * rows, an unknown table, and bytes that are no message. */
START_TEST(test_handoff_bad_input_is_refused) {
    fleet f;
    fleet_up(&f, "4096", "0", false); /* epoch 2: shards 0 and 1 */
    const uint32_t tid = ss__emb_table_id("moving");
    uint64_t stays = 0; /* an id shard 0 keeps in a map of 2 */
    while (ss__emb_shard_of(tid, stays, 2) != 0)
        stays++;
    struct {
        uint64_t epoch;
        uint32_t to, shards, max;
        const char *table;
        bool id, done;
        ss_status want;
        const char *says;
    } cases[] = {
        {1, 1, 2, 16, "moving", false, false, SS_ERR_STATE, "shard map epoch 1"},
        {2, 1, 3, 16, "moving", false, false, SS_ERR_INVALID_ARGUMENT, "map has 2 shards"},
        {2, 0, 2, 16, "moving", false, false, SS_ERR_INVALID_ARGUMENT, "it is shard 0"},
        {2, 1, 2, 0, "moving", true, false, SS_ERR_INVALID_ARGUMENT, "does not move to shard 1"},
        {2, 1, 2, 16, "moving", false, true, SS_ERR_INVALID_ARGUMENT, "does not move to shard 1"},
        {2, 1, 2, 0, "moving", false, false, SS_ERR_INVALID_ARGUMENT, "max_rows 0"},
        {2, 1, 2, 16, "nosuch", false, false, SS_ERR_NOT_FOUND, "unknown table nosuch"},
    };
    char msg[400];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        Shadowsync__V1__HandoffRequest req = SHADOWSYNC__V1__HANDOFF_REQUEST__INIT;
        req.epoch = cases[i].epoch;
        req.to_shard = cases[i].to;
        req.shards = cases[i].shards;
        req.max_rows = cases[i].max;
        req.table = (char *)cases[i].table;
        const ProtobufCBinaryData one = {sizeof stays, (uint8_t *)&stays};
        if (cases[i].id)
            req.ids = one;
        if (cases[i].done)
            req.done_ids = one;
        ck_assert_int_eq(handoff(f.addr[0], &req, msg, sizeof msg), cases[i].want);
        ck_assert_msg(strstr(msg, cases[i].says), "case %zu: %s", i, msg);
    }
    ss__rpc_channel *ch;
    ck_assert_int_eq(ss__rpc_channel_create(f.addr[0], 0, NULL, &ch, NULL, 0), SS_OK);
    assert_garbage_refused(ch, "/shadowsync.v1.Embedding/Handoff", true, SS_OK, NULL);
    ss__rpc_channel_destroy(ch);
    check_rows(f.c, &f.spec, 1); /* nothing was taken */
    ck_assert_uint_eq(resident(f.addr[0]) + resident(f.addr[1]), K);
    fleet_down(&f);
}
END_TEST

/* A token file of g_dir (0600). */
static void token_file(const char *name, const char *token, char *path, size_t len) {
    snprintf(path, len, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(token, f);
    fclose(f);
    ck_assert_int_eq(chmod(path, 0600), 0);
}

/* A Handoff from a caller that is not the taker: one with the trainers'
 * token only is refused at the door; one that holds the PS's peer token
 * (a rogue PS, or a stolen peer token) gets rows, but its word that it
 * holds them makes the giver forget none: the giver asks the shard the
 * map names, on its own channel, and that shard is down. When the real
 * shard starts it takes every row it owns, and no row is lost. */
START_TEST(test_a_stolen_handoff_loses_nothing) {
    ss__check_tmpdir(g_dir, "ss-steal");
    char tok[128], peer[128];
    token_file("token", "trainers-token-0123456789", tok, sizeof tok);
    token_file("peer", "the-ps-fleet-own-token-0123456789", peer, sizeof peer);
    setenv("SHADOWSYNC_AUTH_TOKEN_FILE", tok, 1);
    setenv("SHADOWSYNC_PEER_TOKEN_FILE", peer, 1);
    unsetenv("SHADOWSYNC_INSECURE_LOOPBACK"); /* a PS refuses it beside a token */
    char keep[64];
    snprintf(keep, sizeof keep, "%s", g_dir);
    fleet f;
    fleet_up(&f, "4096", "0", false); /* (a new g_dir: the tokens' stays readable) */
    kill(f.pid[2], SIGTERM);          /* the third shard is not up yet */
    ck_assert_int_eq(proc_wait(f.pid[2], 30), 0);
    grow(&f);
    ss__sleep_ns(500000000ull); /* both serve epoch 3 */
    Shadowsync__V1__HandoffRequest req = SHADOWSYNC__V1__HANDOFF_REQUEST__INIT;
    req.table = "moving";
    req.epoch = 3;
    req.to_shard = 2;
    req.shards = 3;
    req.max_rows = 4096;
    char msg[400];
    ck_assert_int_eq(handoff(f.addr[0], &req, msg, sizeof msg), SS_ERR_PERMISSION);
    ck_assert_msg(strstr(msg, "peer token"), "%s", msg);
    /* The rogue: the peer token, not the shard the map names. */
    ss__rpc_channel *ch;
    ck_assert_int_eq(ss__rpc_channel_create(f.addr[0], 0, NULL, &ch, NULL, 0), SS_OK);
    ss__rpc_channel_set_peer_auth(ch, "Bearer the-ps-fleet-own-token-0123456789");
    ProtobufCMessage *r = NULL;
    ck_assert_int_eq(ss__rpc_call_message(ch, SS_EMB_M_HANDOFF, &req.base, 5000, true,
                                          &shadowsync__v1__handoff_reply__descriptor, &r, msg,
                                          sizeof msg),
                     SS_OK);
    const Shadowsync__V1__HandoffReply *x = (const Shadowsync__V1__HandoffReply *)r;
    ck_assert_uint_gt(x->ids.len, 0); /* it took rows */
    req.done_ids = x->ids;            /* and says it holds them */
    req.max_rows = 1;
    ProtobufCMessage *r2 = NULL;
    ck_assert_int_eq(ss__rpc_call_message(ch, SS_EMB_M_HANDOFF, &req.base, 15000, true,
                                          &shadowsync__v1__handoff_reply__descriptor, &r2, msg,
                                          sizeof msg),
                     SS_OK);
    protobuf_c_message_free_unpacked(r2, NULL);
    protobuf_c_message_free_unpacked(r, NULL);
    ss__rpc_channel_destroy(ch);
    /* The real third shard starts on its address: every row comes, the
     * rows given to the rogue too (given again, 8 a call: more than one
     * call's worth). */
    char listen[64];
    snprintf(listen, sizeof listen, "%s", f.addr[2]);
    f.pid[2] = start_ps(2, listen, f.addr[2], "8", "0", false);
    check_rows(f.c, &f.spec, 1);
    ck_assert_uint_eq(wait_resident(f.addr[2], owned_by_third()), owned_by_third());
    fleet_down(&f);
    snprintf(g_dir, sizeof g_dir, "%s", keep);
    ss__check_rmdir(g_dir);
}
END_TEST

static bool is_even(void *ctx, uint64_t id) {
    (void)ctx;
    return id % 2 == 0;
}

static ss__emb_store *open_store(const char *db) {
    ss__emb_store_config cfg = {.db_path = db, .max_batch = 64};
    ss__emb_store *st;
    ck_assert_int_eq(ss__emb_store_create(&cfg, &st, NULL, 0), SS_OK);
    const ss__emb_spec spec = table_spec();
    ck_assert_int_eq(ss__emb_store_open_table(st, &spec, NULL, NULL, 0), SS_OK);
    return st;
}

/* The same in a new scratch directory (g_dir, named from prefix); db gets
 * the database's path, to open it again. */
static ss__emb_store *open_fresh_store(const char *prefix, char db[128]) {
    ss__check_tmpdir(g_dir, prefix);
    snprintf(db, 128, "%s/db", g_dir);
    return open_store(db);
}

/* The giver's side by hand: a taken row leaves memory and the table's
 * rows in the database (a lookup gives its initial row, the store does
 * not hold it) but stays in the database's given space, so a giver that
 * restarts before the taker says it holds them gives the same rows again
 * to a taker that starts over; once forgotten they are gone, and a row
 * made here again since is the table's own. */
START_TEST(test_taken_rows_stay_stored_until_forgotten) {
    char db[128];
    ss__emb_store *st = open_fresh_store("ss-take", db);
    uint64_t mine[10], out[64];
    float g[10 * DIM], rows[64 * DIM + 64 * 1];
    for (int i = 0; i < 10; i++) {
        mine[i] = (uint64_t)i + 1;
        for (int d = 0; d < DIM; d++)
            g[i * DIM + d] = (float)(i + 1);
    }
    ck_assert_int_eq(ss__emb_store_push(st, "moving", mine, 10, g, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_store_flush(st), SS_OK); /* spilled copies too */
    size_t n = 0;
    ck_assert_int_eq(
        ss__emb_store_take(st, "moving", 1, NULL, 0, false, is_even, NULL, 64, out, rows, &n),
        SS_OK);
    ck_assert_uint_eq(n, 5);
    for (size_t k = 0; k < n; k++) /* whole rows: lr 1 from zero, minus the gradient */
        ck_assert_float_eq(rows[k * DIM], -(float)out[k]);
    bool held[10];
    ck_assert_int_eq(ss__emb_store_holds(st, "moving", mine, 10, held), SS_OK);
    for (int i = 0; i < 10; i++) /* ids 2, 4, ... (even) are given */
        ck_assert_int_eq(held[i], i % 2 == 0);
    ss__emb_store_destroy(st); /* the giver restarts before the taker says it holds them */
    st = open_store(db);
    ck_assert_int_eq(ss__emb_store_holds(st, "moving", mine, 10, held), SS_OK);
    ck_assert(!held[1]);
    ck_assert_int_eq(
        ss__emb_store_take(st, "moving", 1, NULL, 0, false, is_even, NULL, 64, out, rows, &n),
        SS_OK);
    ck_assert_uint_eq(n, 0); /* a taker going on asks for new rows only */
    ck_assert_int_eq(
        ss__emb_store_take(st, "moving", 1, NULL, 0, true, is_even, NULL, 64, out, rows, &n),
        SS_OK);
    ck_assert_uint_eq(n, 5); /* one starting over gets them again */
    uint64_t again = 2;      /* id 2 made here again after it was taken */
    ck_assert_int_eq(ss__emb_store_push(st, "moving", &again, 1, g, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_store_forget(st, "moving", 1, out, n), SS_OK);
    ck_assert_int_eq(
        ss__emb_store_take(st, "moving", 1, NULL, 0, true, is_even, NULL, 64, out, rows, &n),
        SS_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(out[0], 2);
    ck_assert_float_eq(rows[0], -1.0f); /* the new row, not the given one (-2) */
    ss__emb_store_destroy(st);
    ss__check_rmdir(g_dir);
}
END_TEST

static bool any_id(void *ctx, uint64_t id) {
    (void)ctx, (void)id;
    return true;
}

/* The giver's walk of the rows only in the database (a restarted store
 * holds none in memory) goes on where the last take stopped, as its walk
 * of memory does: after the first five even ids (2 .. 10) a take of any
 * three rows gives 11, 12, 13, not the odd rows the first walk passed
 * (1, 3, 5: a walk from the start). */
START_TEST(test_a_database_walk_goes_on_where_it_stopped) {
    char db[128];
    ss__emb_store *st = open_fresh_store("ss-dbwalk", db);
    uint64_t ids[40], out[8];
    float g[40 * DIM] = {0}, rows[8 * (DIM + 1)];
    for (int i = 0; i < 40; i++)
        ids[i] = (uint64_t)i + 1;
    ck_assert_int_eq(ss__emb_store_push(st, "moving", ids, 40, g, NULL, 0), SS_OK);
    ss__emb_store_destroy(st); /* flushed: the rows are in the database only */
    st = open_store(db);
    size_t n = 0;
    ck_assert_int_eq(
        ss__emb_store_take(st, "moving", 1, NULL, 0, false, is_even, NULL, 5, out, rows, &n),
        SS_OK);
    ck_assert_uint_eq(n, 5);
    ck_assert_uint_eq(out[0], 2);
    ck_assert_uint_eq(out[4], 10);
    ck_assert_int_eq(
        ss__emb_store_take(st, "moving", 1, NULL, 0, false, any_id, NULL, 3, out, rows, &n), SS_OK);
    ck_assert_uint_eq(n, 3);
    for (size_t k = 0; k < 3; k++)
        ck_assert_msg(out[k] == 11 + k, "row %zu of the second walk: id %llu, want %zu", k,
                      (unsigned long long)out[k], 11 + k);
    ss__emb_store_destroy(st);
    ss__check_rmdir(g_dir);
}
END_TEST

/* A plan the mover cannot make at first (its client certificate is being
 * rotated: the CA file is missing when the map changes) is made again at
 * the next call, not left half made: a request that needs a moving row
 * fails saying which file, and once the file is back it is planned and
 * asks the old shard (here nobody listens: it says that instead). */
START_TEST(test_a_plan_that_cannot_be_made_is_made_again) {
    ss__check_tmpdir(g_dir, "ss-plan");
    char db[128], map[128], ca[128];
    snprintf(db, sizeof db, "%s/db", g_dir);
    snprintf(map, sizeof map, "%s/fleet.map", g_dir);
    snprintf(ca, sizeof ca, "%s/ca.pem", g_dir);
    ss__emb_store *st = open_store(db);
    /* 127.0.0.1:9 (discard, nobody there) gave; this PS is the second shard */
    write_map_at(map, 2, "127.0.0.1:9,127.0.0.1:10", "127.0.0.1:9");
    ss__metrics *m;
    ck_assert_int_eq(ss__metrics_create(&m, NULL, 0), SS_OK);
    char why[512] = "";
    ss__ps_map_watch *w;
    ck_assert_int_eq(ss__ps_map_watch_start(map, m, &w, why, sizeof why), SS_OK);
    const ss__rpc_tls tls = {.ca_file = ca};
    const ss__ps_row_moves_config cfg = {
        .store = st, .map = w, .tls = &tls, .batch_rows = 64, .timeout_ms = 500, .metrics = m};
    ss__ps_row_moves *mv;
    ck_assert_int_eq(ss__ps_row_moves_create(&cfg, &mv, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__ps_row_moves_run(mv, "127.0.0.1:10"), SS_OK); /* runs, plans later */
    const uint32_t tid = ss__emb_table_id("moving");
    uint64_t id = 1; /* a row the second shard owns now and the first held */
    while (ss__emb_shard_of(tid, id, 2) != 1)
        id++;
    why[0] = '\0';
    ck_assert_int_ne(ss__ps_row_moves_ensure(mv, "moving", &id, 1, why, sizeof why), SS_OK);
    ck_assert_msg(strstr(why, "ca.pem") && strstr(why, "127.0.0.1:9"), "why: %s", why);
    FILE *f = fopen(ca, "w"); /* the rotated file is in place */
    ck_assert_ptr_nonnull(f);
    fputs("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", f);
    fclose(f);
    why[0] = '\0';
    ck_assert_int_ne(ss__ps_row_moves_ensure(mv, "moving", &id, 1, why, sizeof why), SS_OK);
    ck_assert_msg(!strstr(why, "ca.pem") && strstr(why, "127.0.0.1:9"), "why: %s", why);
    ss__ps_row_moves_destroy(mv);
    ss__ps_map_watch_stop(w);
    ss__metrics_destroy(m);
    ss__emb_store_destroy(st);
    ss__check_rmdir(g_dir);
}
END_TEST

SS_CHECK_MAIN("row_moves", 120, NULL, NULL, test_taken_rows_stay_stored_until_forgotten,
              test_a_plan_that_cannot_be_made_is_made_again, test_rows_move_while_pushes_go_on,
              test_rows_asked_for_during_a_move_come_first, test_only_refused_parts_are_sent_again,
              test_shards_killed_mid_move_lose_nothing, test_a_table_follows_its_shard_map,
              test_handoff_bad_input_is_refused, test_a_database_walk_goes_on_where_it_stopped,
              test_a_stolen_handoff_loses_nothing)
