/* Settings by name: one table of keys per config struct, shared by
 * ss_*_config_set (bindings and programs), ss_*_config_from_env
 * (SHADOWSYNC_<KEY>) and docs/configuration.md. The keys are the command
 * lines' flag names (ctr-train --sync, --rpc-timeout-ms, --emb-lr ...), so
 * one name means one thing everywhere. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>

#include "common/log.h"
#include "common/names.h"
#include "rpc/dense/grpc_transport.h"
#include "shadowsync/shadowsync.h"
#include "trainer-hooks/defaults.h"
#include "trainer-hooks/errors_internal.h"
#include "trainer-hooks/settings_flags.h"
#include "trainer-hooks/settings_internal.h"

/* ---- keys ---- */

typedef enum kind {
    K_STR,       /* const char * (not copied) */
    K_U32,       /* uint32_t, in [min, max] */
    K_U64,       /* uint64_t, in [min, max] */
    K_SIZE,      /* size_t, in [min, max] */
    K_FLOAT,     /* float, finite */
    K_BOOL,      /* int: true/false/1/0/yes/no */
    K_SYNC,      /* ss_sync_mode: none|shadow|foreground */
    K_TABLE,     /* ss_table_mode: local|remote|cached */
    K_OPTIMIZER, /* ss_table_optimizer: sgd|adagrad */
} kind;

typedef struct key {
    const char *name;
    kind kind;
    size_t off;
    uint64_t min, max;
    const char *help; /* for docs/configuration.md (tools/config-table.py reads it here) */
} key;

#define TK(n, k, f, lo, hi, h)                                                                     \
    { n, k, offsetof(ss_trainer_config, f), lo, hi, h }
static const key trainer_keys[] = {
    TK("ps", K_STR, ps, 0, 0, "parameter servers host:port,... (same order on every trainer)"),
    TK("trainer_name", K_STR, name, 0, 0, "this trainer's label in logs and metrics"),
    TK("sync", K_SYNC, mode, 0, 0,
       "none | shadow (background rounds) | foreground (every sync_every steps)"),
    TK("algo", K_STR, algo, 0, 0, "easgd | ma | bmuf"),
    TK("alpha", K_FLOAT, alpha, 0, 0, "S-EASGD elastic rate, (0, 1]"),
    TK("bmuf_eta", K_FLOAT, bmuf_eta, 0, 0, "S-BMUF block momentum, [0, 1)"),
    TK("bmuf_zeta", K_FLOAT, bmuf_zeta, 0, 0,
       "S-BMUF block learning rate, (0, 1 / (1 - bmuf_eta)]"),
    TK("bmuf_nesterov", K_BOOL, bmuf_nesterov, 0, 0, "S-BMUF Nesterov momentum"),
    TK("shadow_threads", K_U32, shadow_threads, 1, 256, "threads of the shadow pool (background)"),
    TK("sync_every", K_U32, sync_every, 1, UINT32_MAX, "K: a round every K steps (foreground)"),
    TK("min_round_gap", K_U64, min_round_gap, 0, UINT32_MAX,
       "steps before a group's next round (background)"),
    TK("round_interval_us", K_U64, round_interval_us, 0, 60000000,
       "pause between two rounds of a shadow thread"),
    TK("rpc_timeout_ms", K_U32, timeout_ms, 1, 3600000, "deadline of every RPC"),
    TK("round_wait_ms", K_U32, round_wait_ms, 0, 3600000,
       "extra wait for an MA/BMUF round to close"),
    TK("heartbeat_ms", K_U32, heartbeat_ms, 1, 3600000,
       "idle groups say they are alive this often"),
    TK("final_rounds", K_U32, final_rounds, 0, 1000000, "rounds per group after training (finish)"),
    TK("final_sync_ms", K_U32, final_sync_ms, 0, 3600000,
       "and keep syncing at least this long after training"),
    TK("tls_ca", K_STR, tls_ca, 0, 0, "CA (PEM) to check the PS with; unset: plain TCP"),
    TK("tls_cert", K_STR, tls_cert, 0, 0, "client certificate (PEM), with tls_key"),
    TK("tls_key", K_STR, tls_key, 0, 0, "its key (PEM)"),
    TK("agent", K_STR, agent, 0, 0, "unix socket of the host's shadowsync-agent (background only)"),
    TK("peers", K_STR, peers, 0, 0,
       "decentralized averaging instead of a PS: every trainer's host:port, same order (algo=ma)"),
    TK("peer_rank", K_U32, peer_rank, 0, 1023, "this trainer's index in peers"),
    TK("peer_schedule", K_STR, peer_schedule, 0, 0,
       "decentralized rounds: pull one peer, ring | random; or sum all up aggregation trees, tree"),
    TK("insecure_loopback", K_BOOL, insecure_loopback, 0, 0,
       "listen on loopback without a token (peers; the agent's POST /checkpoint): any local "
       "user may call (demos, tests)"),
    TK("topology", K_STR, topology, 0, 0,
       "peer_schedule=tree: file of the links' Gbit/s the trees are packed over (unset: alike)"),
    TK("encoding", K_STR, encoding, 0, 0,
       "compressed sync with the PS: f32 | fp16 | bf16 | int8 (error feedback through mirrors)"),
    TK("chunk_floats", K_U32, chunk_floats, 0, SS_GRPC_MAX_CHUNK_FLOATS,
       "floats per call (and PS group) of a dense shard, same on every member; 0: 131072"),
    TK("bulk", K_BOOL, bulk, 0, 0,
       "dense chunks (S-EASGD, MA/BMUF) and remote/cached tables' rows (lookups, pushes) on the "
       "PS's bulk streams when it has a bulk port (a PS's default), else gRPC (with a shard map, "
       "a stream per epoch; with TLS, the channel's certificates); false: gRPC only"),
    TK("shard_map", K_STR, shard_map, 0, 0,
       "shard map file (epoch and ps list) instead of ps: calls routed by a stale map are refused"),
    TK("http_listen", K_STR, http_listen, 0, 0,
       "host:port on which this trainer serves /metrics, /status and /healthz (a trainer without "
       "an agent); unset: none"),
};
#undef TK

#define BK(n, k, f, lo, hi, h)                                                                     \
    { n, k, offsetof(ss_table_config, f), lo, hi, h }
static const key table_keys[] = {
    BK("emb", K_TABLE, mode, 0, 0, "table mode: local | remote | cached"),
    BK("emb_dim", K_U32, dim, 1, 4096, "floats per row"),
    BK("emb_optimizer", K_OPTIMIZER, optimizer, 0, 0, "sgd | adagrad (row-wise)"),
    BK("emb_lr", K_FLOAT, lr, 0, 0, "learning rate of the rows"),
    BK("emb_eps", K_FLOAT, eps, 0, 0, "Adagrad epsilon"),
    BK("emb_init_scale", K_FLOAT, init_scale, 0, 0, "rows start uniform in +-init_scale"),
    BK("emb_push_queue", K_U32, push_queue, 1, 65536, "remote: batches queued before push() waits"),
    BK("emb_cache_rows", K_SIZE, cache_rows, 1, (uint64_t)1 << 40, "cached: rows kept in memory"),
    BK("emb_alpha", K_FLOAT, alpha, 0, 0, "cached: elastic rate of the row sync, (0, 1]"),
    BK("emb_sync_ms", K_U32, sync_interval_ms, 1, 3600000, "cached: pause between row-sync passes"),
    BK("emb_ps", K_STR, ps, 0, 0, "remote/cached: the table's shards (default: ps)"),
    BK("emb_shard_map", K_STR, shard_map, 0, 0,
       "remote/cached: the table's shards from a shard map file instead of emb_ps, routed again "
       "when the PS fleet moves to a new epoch"),
    BK("emb_encoding", K_STR, encoding, 0, 0,
       "cached: row sync encoding: f32 | fp16 | bf16 | int8 (deltas applied as decoded)"),
    BK("emb_admit_count", K_U32, admit_count, 0, 65535,
       "local: a new id gets a row on its K-th push (0, 1: at once)"),
    BK("emb_ttl_s", K_U64, ttl_s, 0, 10000000000ull,
       "local: rows not pushed for this many seconds are deleted (0: never)"),
    BK("emb_max_live_rows", K_U64, max_live_rows, 0, 1000000000000ull,
       "local: past this many rows the least recently pushed are deleted (0: no limit)"),
};
#undef BK

#define NKEYS(a) (sizeof(a) / sizeof(a)[0])

/* "SHADOWSYNC_RPC_TIMEOUT_MS", "rpc-timeout-ms" and "rpc_timeout_ms" are
 * one key. */
static bool normalize(const char *in, char *out, size_t outlen) {
    if (!strncasecmp(in, "SHADOWSYNC_", 11))
        in += 11;
    size_t n = strlen(in);
    if (n == 0 || n >= outlen)
        return false;
    for (size_t i = 0; i <= n; i++)
        out[i] = in[i] == '-' ? '_' : (char)tolower((unsigned char)in[i]);
    return true;
}

static const key *find_key(const key *keys, size_t n, const char *name) {
    char norm[64];
    if (!name || !normalize(name, norm, sizeof norm))
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(keys[i].name, norm))
            return &keys[i];
    return NULL;
}

static void env_name(const key *k, char *out, size_t outlen) {
    size_t j = snprintf(out, outlen, "SHADOWSYNC_");
    for (const char *p = k->name; *p && j + 1 < outlen; p++)
        out[j++] = (char)toupper((unsigned char)*p);
    out[j] = '\0';
}

/* Writes value into the field of k in base; `who` names the setting in
 * the message ("alpha" or "SHADOWSYNC_ALPHA"). */
static ss_status set_key(void *base, const key *k, const char *v, const char *who) {
    char *field = (char *)base + k->off;
    if (!v)
        return ss__err_set(SS_ERR_INVALID_ARGUMENT, "%s: no value given", who);
    if (k->kind == K_STR) {
        *(const char **)field = v;
        return SS_OK;
    }
    char *end;
    errno = 0;
    switch (k->kind) {
    case K_U32:
    case K_U64:
    case K_SIZE: {
        unsigned long long x = strtoull(v, &end, 10);
        if (!*v || *end || errno || v[0] == '-' || isspace((unsigned char)v[0]))
            return ss__err_set(SS_ERR_INVALID_ARGUMENT, "%s=\"%s\": not a whole number", who, v);
        if (x < k->min || x > k->max)
            return ss__err_set(SS_ERR_INVALID_ARGUMENT, "%s=%s: must be in [%llu, %llu]", who, v,
                               (unsigned long long)k->min, (unsigned long long)k->max);
        if (k->kind == K_U32)
            *(uint32_t *)field = (uint32_t)x;
        else if (k->kind == K_U64)
            *(uint64_t *)field = x;
        else
            *(size_t *)field = (size_t)x;
        return SS_OK;
    }
    case K_FLOAT: {
        float x = strtof(v, &end);
        if (!*v || *end || errno || !isfinite(x))
            return ss__err_set(SS_ERR_INVALID_ARGUMENT, "%s=\"%s\": not a finite number", who, v);
        *(float *)field = x;
        return SS_OK;
    }
    case K_BOOL: {
        static const char *const names[] = {"false", "true", "0", "1", "no", "yes"};
        int i = ss__name_index(v, names, 6);
        if (i < 0)
            return ss__err_set(SS_ERR_INVALID_ARGUMENT,
                               "%s=\"%s\": not a boolean (true|false|1|0|yes|no)", who, v);
        *(int *)field = i % 2;
        return SS_OK;
    }
    case K_SYNC: {
        /* "background" is the old name of shadow (SHADOWSYNC_MODE's) */
        static const char *const names[] = {"none", "shadow", "foreground", "background"};
        int i = ss__name_index(v, names, 4);
        if (i < 0)
            return ss__err_set(SS_ERR_INVALID_ARGUMENT,
                               "%s=\"%s\": unknown sync mode (none|shadow|foreground)", who, v);
        *(ss_sync_mode *)field = i == 3 ? SS_SYNC_BACKGROUND : (ss_sync_mode)i;
        return SS_OK;
    }
    case K_TABLE: {
        static const char *const names[] = {"local", "remote", "cached"};
        int i = ss__name_index(v, names, 3);
        if (i < 0)
            return ss__err_set(SS_ERR_INVALID_ARGUMENT,
                               "%s=\"%s\": unknown table mode (local|remote|cached)", who, v);
        *(ss_table_mode *)field = (ss_table_mode)i;
        return SS_OK;
    }
    case K_OPTIMIZER: {
        static const char *const names[] = {"sgd", "adagrad"};
        int i = ss__name_index(v, names, 2);
        if (i < 0)
            return ss__err_set(SS_ERR_INVALID_ARGUMENT,
                               "%s=\"%s\": unknown optimizer (sgd|adagrad)", who, v);
        *(ss_table_optimizer *)field = (ss_table_optimizer)i;
        return SS_OK;
    }
    case K_STR:
        break;
    }
    return SS_ERR_INTERNAL;
}

static ss_status set_by_name(void *base, const key *keys, size_t n, const char *what,
                             const char *name, const char *value) {
    const key *k = find_key(keys, n, name);
    if (!k)
        return ss__err_set(SS_ERR_NOT_FOUND, "%s: unknown %s setting \"%s\"",
                           name ? name : "(null)", what, name ? name : "(null)");
    return set_key(base, k, value, k->name);
}

/* Every key set in the environment, onto a copy: a bad value leaves cfg
 * unchanged and names the variable. */
static ss_status from_env(void *copy, const key *keys, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char env[64];
        env_name(&keys[i], env, sizeof env);
        const char *v = getenv(env);
        if (!v)
            continue;
        ss_status st = set_key(copy, &keys[i], v, env);
        if (st != SS_OK)
            return st;
    }
    return SS_OK;
}

/* ---- the trainer's config ---- */

void ss_trainer_config_init(ss_trainer_config *cfg) {
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->struct_size = sizeof *cfg;
    cfg->name = "trainer";
    cfg->mode = SS_SYNC_BACKGROUND;
    cfg->algo = "easgd";
    cfg->alpha = 0.5f;
    cfg->bmuf_eta = 0.3f;
    cfg->bmuf_zeta = 1.0f;
    cfg->bmuf_nesterov = 1;
    cfg->shadow_threads = 1;
    cfg->sync_every = SS_DEFAULT_SYNC_EVERY;
    cfg->min_round_gap = SS_DEFAULT_MIN_ROUND_GAP;
    cfg->timeout_ms = 10000;
    cfg->round_wait_ms = 5000;
    cfg->heartbeat_ms = 1000;
    cfg->final_rounds = 10;
    cfg->encoding = "f32";
    cfg->peer_schedule = "ring";
    cfg->bulk = 1;
}

/* A struct's struct_size against what this library knows: at least the
 * fields of the first versioned layout (min), at most this one's. */
static ss_status check_size(const char *what, const void *cfg, size_t given, size_t min,
                            size_t have) {
    if (!cfg)
        return ss__err_set(SS_ERR_INVALID_ARGUMENT, "%s config: NULL", what);
    if (given < min)
        return ss__err_set(SS_ERR_INVALID_ARGUMENT,
                           "%s config: struct_size is %zu: call ss_%s_config_init() (or "
                           "ss_%s_config_create()) before setting fields",
                           what, given, what, what);
    if (given > have)
        return ss__err_set(SS_ERR_INVALID_ARGUMENT,
                           "%s config: struct_size %zu is larger than this library's %zu: the "
                           "program was built against a newer ShadowSync than %s",
                           what, given, have, ss_version());
    return SS_OK;
}

ss_status ss__trainer_config_read(const ss_trainer_config *cfg, ss_trainer_config *out) {
    ss_status st = check_size("trainer", cfg, cfg ? cfg->struct_size : 0,
                              offsetof(ss_trainer_config, agent) + sizeof cfg->agent, sizeof *cfg);
    if (st != SS_OK)
        return st;
    ss_trainer_config_init(out);
    memcpy(out, cfg, cfg->struct_size); /* older callers: the rest stays default */
    return SS_OK;
}

/* The names SHADOWSYNC_MODE, _TRAINER and _TIMEOUT_MS of 0.1.0 are still
 * read when their new names are not set, with a warning. */
static ss_status legacy_env(ss_trainer_config *c) {
    static const char *const old[][2] = {{"SHADOWSYNC_MODE", "sync"},
                                         {"SHADOWSYNC_TRAINER", "trainer_name"},
                                         {"SHADOWSYNC_TIMEOUT_MS", "rpc_timeout_ms"}};
    for (size_t i = 0; i < 3; i++) {
        const char *v = getenv(old[i][0]);
        const key *k = find_key(trainer_keys, NKEYS(trainer_keys), old[i][1]);
        char now[64];
        env_name(k, now, sizeof now);
        if (!v || getenv(now))
            continue;
        SS_LOG_WARNF("hooks", "msg=\"%s is deprecated: set %s\"", old[i][0], now);
        ss_status st = set_key(c, k, v, old[i][0]);
        if (st != SS_OK)
            return st;
    }
    return SS_OK;
}

ss_status ss_trainer_config_from_env(ss_trainer_config *cfg) {
    ss__err_begin();
    ss_trainer_config c;
    ss_status st = ss__trainer_config_read(cfg, &c);
    if (st == SS_OK)
        st = legacy_env(&c);
    if (st == SS_OK)
        st = from_env(&c, trainer_keys, NKEYS(trainer_keys));
    if (st == SS_OK) {
        if (c.agent && !*c.agent)
            c.agent = NULL; /* SHADOWSYNC_AGENT= turns agent mode off */
        memcpy(cfg, &c, cfg->struct_size);
    }
    return ss__err_end(st);
}

ss_status ss_trainer_config_set(ss_trainer_config *cfg, const char *key, const char *value) {
    ss__err_begin();
    ss_trainer_config c;
    ss_status st = ss__trainer_config_read(cfg, &c);
    if (st == SS_OK)
        st = set_by_name(&c, trainer_keys, NKEYS(trainer_keys), "trainer", key, value);
    if (st == SS_OK)
        memcpy(cfg, &c, cfg->struct_size);
    return ss__err_end(st);
}

ss_status ss_trainer_config_create(ss_trainer_config **out) {
    ss__err_begin();
    if (!out)
        return ss__err_end(ss__err_set(SS_ERR_INVALID_ARGUMENT, "out: NULL"));
    if (!(*out = malloc(sizeof **out)))
        return ss__err_end(SS_ERR_NO_MEMORY);
    ss_trainer_config_init(*out);
    return SS_OK;
}

void ss_trainer_config_destroy(ss_trainer_config *cfg) {
    free(cfg);
}

/* ---- the table's config ---- */

void ss_table_config_init(ss_table_config *cfg, const char *name, uint32_t dim) {
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->struct_size = sizeof *cfg;
    cfg->name = name;
    cfg->dim = dim;
    cfg->mode = SS_TABLE_LOCAL;
    cfg->optimizer = SS_TABLE_SGD;
    cfg->lr = 0.05f;
    cfg->eps = 1e-8f;
    cfg->init_scale = 0.01f;
    cfg->push_queue = 16;
    cfg->cache_rows = (size_t)1 << 20;
    cfg->alpha = 0.5f;
    cfg->sync_interval_ms = 10;
    cfg->encoding = "f32";
}

ss_status ss__table_config_read(const ss_table_config *cfg, ss_table_config *out) {
    ss_status st = check_size("table", cfg, cfg ? cfg->struct_size : 0,
                              offsetof(ss_table_config, ps) + sizeof cfg->ps, sizeof *cfg);
    if (st != SS_OK)
        return st;
    ss_table_config_init(out, cfg->name, cfg->dim);
    memcpy(out, cfg, cfg->struct_size);
    return SS_OK;
}

ss_status ss_table_config_from_env(ss_table_config *cfg) {
    ss__err_begin();
    ss_table_config c;
    ss_status st = ss__table_config_read(cfg, &c);
    if (st == SS_OK)
        st = from_env(&c, table_keys, NKEYS(table_keys));
    if (st == SS_OK)
        memcpy(cfg, &c, cfg->struct_size);
    return ss__err_end(st);
}

ss_status ss_table_config_set(ss_table_config *cfg, const char *key, const char *value) {
    ss__err_begin();
    ss_table_config c;
    ss_status st = ss__table_config_read(cfg, &c);
    if (st == SS_OK)
        st = set_by_name(&c, table_keys, NKEYS(table_keys), "table", key, value);
    if (st == SS_OK)
        memcpy(cfg, &c, cfg->struct_size);
    return ss__err_end(st);
}

ss_status ss_table_config_create(const char *name, uint32_t dim, ss_table_config **out) {
    ss__err_begin();
    if (!out)
        return ss__err_end(ss__err_set(SS_ERR_INVALID_ARGUMENT, "out: NULL"));
    if (!(*out = malloc(sizeof **out)))
        return ss__err_end(SS_ERR_NO_MEMORY);
    ss_table_config_init(*out, name, dim);
    return SS_OK;
}

void ss_table_config_destroy(ss_table_config *cfg) {
    free(cfg);
}

/* ---- the keys as a program's flags (settings_flags.h) ---- */

/* A key's value in base as text, as ss_*_config_set reads it back. */
static void render_key(const void *base, const key *k, char *out, size_t len) {
    const char *field = (const char *)base + k->off;
    static const char *const sync[] = {"none", "shadow", "foreground"};
    static const char *const table[] = {"local", "remote", "cached"};
    static const char *const opt[] = {"sgd", "adagrad"};
    switch (k->kind) {
    case K_STR: {
        const char *v = *(const char *const *)field;
        snprintf(out, len, "%s", v ? v : "");
        return;
    }
    case K_U32:
        snprintf(out, len, "%u", *(const uint32_t *)field);
        return;
    case K_U64:
        snprintf(out, len, "%llu", (unsigned long long)*(const uint64_t *)field);
        return;
    case K_SIZE:
        snprintf(out, len, "%zu", *(const size_t *)field);
        return;
    case K_FLOAT: { /* the shortest text that reads back as the same float */
        const float x = *(const float *)field;
        char text[32];
        int digits = 6;
        do
            snprintf(text, sizeof text, "%.*g", digits, (double)x);
        while (strtof(text, NULL) != x && ++digits <= 9);
        snprintf(out, len, "%s", text);
        return;
    }
    case K_BOOL:
        snprintf(out, len, "%s", *(const int *)field ? "true" : "false");
        return;
    case K_SYNC:
        snprintf(out, len, "%s", sync[*(const ss_sync_mode *)field % 3]);
        return;
    case K_TABLE:
        snprintf(out, len, "%s", table[*(const ss_table_mode *)field % 3]);
        return;
    case K_OPTIMIZER:
        snprintf(out, len, "%s", opt[*(const ss_table_optimizer *)field % 2]);
        return;
    }
}

#define NSETTINGS (NKEYS(trainer_keys) + NKEYS(table_keys))

struct ss__setting_flags {
    const key *keys[NSETTINGS];
    const char *value[NSETTINGS]; /* the flags' destinations */
    bool on[NSETTINGS];           /* a boolean key's ("--name" alone sets it) */
    char name[NSETTINGS][40];     /* "rpc-timeout-ms" */
    char def[NSETTINGS][64];      /* the default, rendered */
    char help[NSETTINGS][320];
    char choices[NSETTINGS][96];
    size_t n;
};

/* The values a key takes, where they are a list ("" where any). */
static const char *key_choices(const key *k) {
    static const struct {
        const char *name, *choices;
    } lists[] = {{"algo", "easgd|ma|bmuf"},
                 {"encoding", "f32|fp16|bf16|int8"},
                 {"emb_encoding", "f32|fp16|bf16|int8"},
                 {"peer_schedule", "ring|random|tree"}};
    if (k->kind == K_SYNC)
        return "none|shadow|foreground";
    if (k->kind == K_TABLE)
        return "local|remote|cached";
    if (k->kind == K_OPTIMIZER)
        return "sgd|adagrad";
    for (size_t i = 0; i < sizeof lists / sizeof *lists; i++)
        if (!strcmp(lists[i].name, k->name))
            return lists[i].choices;
    return "";
}

/* A key's choices for its flag: with a program's own default ("auto")
 * first when the list lacks it. NULL: any value. */
static const char *flag_choices(const key *k, const char *def, char *out, size_t len) {
    const char *c = key_choices(k);
    if (!*c)
        return NULL;
    char list[128], item[80];
    snprintf(list, sizeof list, "|%s|", c);
    int w = snprintf(item, sizeof item, "|%s|", def);
    if (!*def || (w > 0 && (size_t)w < sizeof item && strstr(list, item)))
        return c;
    w = snprintf(out, len, "%s|%s", def, c);
    return w > 0 && (size_t)w < len ? out : NULL; /* a default that long: the library checks */
}

static const key *setting_key(size_t i) {
    return i < NKEYS(trainer_keys) ? &trainer_keys[i] : &table_keys[i - NKEYS(trainer_keys)];
}

static bool listed(const char *const *names, const char *name) {
    for (size_t i = 0; names && names[i]; i++)
        if (!strcmp(names[i], name))
            return true;
    return false;
}

static const ss__setting_default *program_default(const ss__setting_default *d, const char *k) {
    for (; d && d->key; d++)
        if (!strcmp(d->key, k))
            return d;
    return NULL;
}

ss_status ss__setting_flags_add(const char *const *only, const char *const *skip,
                                const ss__setting_default *defaults, ss__flag *flags, size_t *n,
                                size_t max, ss__setting_flags **out) {
    ss__setting_flags *s = calloc(1, sizeof *s);
    if (!s)
        return SS_ERR_NO_MEMORY;
    ss_trainer_config tc;
    ss_table_config bc;
    ss_trainer_config_init(&tc);
    ss_table_config_init(&bc, "table", 8);
    for (size_t i = 0; i < NSETTINGS; i++) {
        const key *k = setting_key(i);
        if (listed(skip, k->name) || (only && !listed(only, k->name)))
            continue;
        if (*n >= max) {
            free(s);
            return SS_ERR_TOO_LARGE;
        }
        size_t j = s->n++;
        s->keys[j] = k;
        snprintf(s->name[j], sizeof s->name[j], "%s", k->name);
        for (char *p = s->name[j]; *p; p++)
            *p = *p == '_' ? '-' : *p;
        const ss__setting_default *d = program_default(defaults, k->name);
        if (d)
            snprintf(s->def[j], sizeof s->def[j], "%s", d->value);
        else
            render_key(i < NKEYS(trainer_keys) ? (const void *)&tc : (const void *)&bc, k,
                       s->def[j], sizeof s->def[j]);
        s->value[j] = *s->def[j] ? s->def[j] : NULL;
        snprintf(s->help[j], sizeof s->help[j], "%s%s%s " SS_SETTING_FLAG_MARK, k->help,
                 d && d->note ? "; " : "", d && d->note ? d->note : "");
        if (k->kind == K_BOOL) {
            s->on[j] = !strcmp(s->def[j], "true");
            flags[(*n)++] = (ss__flag){s->name[j], SS_FLAG_BOOL, &s->on[j], s->help[j], NULL, 0, 0};
        } else {
            flags[(*n)++] =
                (ss__flag){s->name[j],
                           SS_FLAG_STRING,
                           &s->value[j],
                           s->help[j],
                           flag_choices(k, s->def[j], s->choices[j], sizeof *s->choices),
                           0,
                           0};
        }
    }
    *out = s;
    return SS_OK;
}

void ss__setting_flags_destroy(ss__setting_flags *s) {
    free(s);
}

static ssize_t setting_index(const ss__setting_flags *s, const char *key) {
    for (size_t j = 0; s && j < s->n; j++)
        if (!strcmp(s->keys[j]->name, key))
            return (ssize_t)j;
    return -1;
}

/* A key's value as text: a boolean's from its flag. */
static const char *value_of(const ss__setting_flags *s, size_t j) {
    if (s->keys[j]->kind == K_BOOL)
        return s->on[j] ? "true" : "false";
    return s->value[j];
}

const char *ss__setting_flag(const ss__setting_flags *s, const char *key) {
    ssize_t j = setting_index(s, key);
    return j < 0 ? NULL : value_of(s, (size_t)j);
}

void ss__setting_flag_set(ss__setting_flags *s, const char *key, const char *value) {
    ssize_t j = setting_index(s, key);
    if (j >= 0)
        s->value[j] = value;
}

ss_status ss__setting_flags_apply(const ss__setting_flags *s, ss_trainer_config *trainer,
                                  ss_table_config *table) {
    for (size_t j = 0; j < s->n; j++) {
        const char *v = value_of(s, j);
        if (!v)
            continue;
        const key *k = s->keys[j];
        bool is_trainer = k >= trainer_keys && k < trainer_keys + NKEYS(trainer_keys);
        char who[48];
        snprintf(who, sizeof who, "--%s", s->name[j]); /* the refusal names the flag */
        ss__err_begin();
        ss_status st =
            ss__err_end(set_key(is_trainer ? (void *)trainer : (void *)table, k, v, who));
        if (st != SS_OK)
            return st;
    }
    return SS_OK;
}
