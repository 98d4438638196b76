/* shadowsync-ps: serves dense sync (S-EASGD central variables, S-MA/S-BMUF
 * round aggregation with membership and a round deadline) and shard s of
 * every embedding table (in memory + RocksDB) over gRPC, and checkpoints
 * what it holds. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "common/flags.h"
#include "common/json.h"
#include "common/log.h"
#include "common/malloc_tune.h"
#include "common/names.h"
#include "common/private_files.h"
#include "common/signals.h"
#include "ps/deltas.h"
#include "ps/deltas_service.h"
#include "ps/dense_service.h"
#include "ps/emb_service.h"
#include "ps/group_metrics.h"
#include "ps/map_watch.h"
#include "ps/row_moves.h"
#include "rpc/auth.h"
#include "rpc/bulk/bulk.h"
#include "rpc/dense/dense_wire.h"
#include "rpc/http/http.h"
#include "shadow/central.h"

/* What --help and --version say. */
static const ss__program program = {
    "shadowsync-ps", "ShadowSync parameter server: holds one shard of every dense group "
                     "(S-EASGD central\nvariables, S-MA/S-BMUF round aggregation) and of "
                     "every embedding table (memory +\nRocksDB), and serves them over "
                     "gRPC. Stops on SIGINT or SIGTERM (after a final\ncheckpoint when "
                     "--checkpoint-dir is set, and a flush of dirty rows)."};

#define STATUS_GROUPS 1024

/* The command line. */
typedef struct ps_options {
    const char *listen, *http, *ckpt_dir, *emb_db, *tls_cert, *tls_key, *tls_ca, *auth_file,
        *tls_writers, *delta_dir, *follow, *shard_map, *advertise, *bulk_listen, *peer_file;
    int64_t move_batch_rows, move_pause_ms;
    int64_t delta_every_s, delta_base_every, delta_keep, follow_poll_ms;
    char auth[SS_AUTH_HEADER_MAX];      /* "Bearer <token>" from auth_file; "" = none */
    char peer_auth[SS_AUTH_HEADER_MAX]; /* the same from peer_file */
    int64_t threads, deadline_ms, member_timeout_ms, max_floats;
    int64_t flush_lag_ms, mem_cap_mb, emb_max_batch, ckpt_keep;
    int64_t max_reply_mb, max_tables, max_groups, max_members, max_total_floats, max_blocked,
        max_rows, max_inflight_mb, emb_admit, emb_ttl_s, emb_max_live;
    bool sync_writes, insecure_loopback;
    char bulk_beside[300]; /* --bulk-listen auto: --listen's host, port 0 (bulk_listen points here)
                            */
} ps_options;

static const char default_http[] = "127.0.0.1:9471";

typedef struct ps_state {
    ss__central *centre; /* the dense state: central variables, rounds, S-BMUF */
    ss__metrics *metrics;
    ss__emb_store *store;
    ss__emb_service esvc;
    ss__deltas_service dsvc; /* with --delta-dir */
    ss__dense_service svc;
    ss__rpc_method methods[32]; /* the server serves from this table: it must outlive it */
    ss__rpc_server *srv;
    ss__bulk_server *bulk; /* --bulk-listen */
    ss__http_server *web;
    char listen[300]; /* the address actually served */
    char self[300];   /* this PS as the shard map names it (--advertise, else listen) */
    _Atomic bool self_known;
    uint64_t start_ns;
    ss__ps_group_metrics *group_metrics; /* the centre's counts on /metrics */
    char path[4096];                     /* checkpoint file; "" = none */
    char emb_root[4096];                 /* embedding checkpoints, by name; "" = none */
    pthread_mutex_t save_lock;           /* one writer of path.tmp at a time */
    ss__ps_deltas *deltas;               /* --delta-dir */
    ss__ps_follower *follower;           /* --follow */
    ss__ps_map_watch *map;               /* --shard-map */
    ss__ps_row_moves *moves;             /* --shard-map: rows moving between shards */
    ss__rpc_tls client_tls;              /* its calls to other shards: this PS's certificate */
    char follow_note[400];               /* what a refused write is told (fits a reply) */
} ps_state;

static ss_status save_checkpoint(void *ctx, char *path, size_t pathlen, size_t *groups) {
    ps_state *ps = ctx;
    pthread_mutex_lock(&ps->save_lock);
    ss_status st = ss__central_save(ps->centre, ps->path, groups);
    pthread_mutex_unlock(&ps->save_lock);
    if (path && pathlen)
        snprintf(path, pathlen, "%s", ps->path);
    ss__log(st == SS_OK ? SS_LOG_INFO : SS_LOG_ERROR, "ps",
            "event=checkpoint path=%s groups=%zu status=%s", ps->path, *groups, ss_status_name(st));
    return st;
}

static ss__central_group_info *describe(ps_state *ps, size_t *count) {
    ss__central_group_info *info = calloc(STATUS_GROUPS, sizeof *info);
    *count = 0;
    if (info)
        ss__central_describe(ps->centre, info, STATUS_GROUPS, count);
    return info;
}

/* /status: every group the PS holds, its members and last round (with the
 * token; without it the number of groups only). */
static ss_status status_json(void *ctx, bool detail, char **out, size_t *len) {
    ps_state *ps = ctx;
    size_t k;
    ss__central_group_info *info = describe(ps, &k);
    if (!info)
        return SS_ERR_NO_MEMORY;
    uint64_t now = ss__now_ns();
    json_object *root = json_object_new_object(), *groups = json_object_new_array();
    json_object_object_add(root, "role", json_object_new_string("ps"));
    json_object_object_add(root, "version", json_object_new_string(ss__version()));
    json_object_object_add(root, "listen", json_object_new_string(ps->listen));
    json_object_object_add(root, "uptime_seconds",
                           json_object_new_double((double)(now - ps->start_ns) / 1e9));
    json_object_object_add(root, "group_count", json_object_new_uint64(k));
    for (size_t i = 0; detail && i < k; i++) {
        const ss__central_group_info *g = &info[i];
        json_object *o = json_object_new_object();
        json_object_object_add(o, "group", json_object_new_string(g->name));
        json_object_object_add(o, "floats", json_object_new_uint64(g->n));
        json_object_object_add(o, "members", json_object_new_uint64(g->members));
        json_object_object_add(o, "exchanges", json_object_new_uint64(g->exchanges));
        json_object_object_add(o, "closed_rounds", json_object_new_uint64(g->rounds));
        /* members whose snapshot is in the open MA/BMUF round (0: none open) */
        json_object_object_add(o, "round_contributors", json_object_new_uint64(g->contributors));
        json_object_object_add(o, "rounds", json_object_new_uint64(g->exchanges + g->rounds));
        json_object_object_add(
            o, "last_round_age_seconds",
            json_object_new_double(g->last_done_ns ? (double)(now - g->last_done_ns) / 1e9 : -1.0));
        json_object_array_add(groups, o);
    }
    if (detail)
        json_object_object_add(root, "groups", groups);
    else
        json_object_put(groups);
    free(info);
    return ss__json_take(root, out, len);
}

/* Mirrors the centre's per-group counts into shadowsync_ps_* series. */
static void refresh_metrics(void *ctx) {
    ss__ps_group_metrics_refresh(((ps_state *)ctx)->group_metrics);
}

static ss_status http_checkpoint(void *ctx, char *msg, size_t msglen) {
    ps_state *ps = ctx;
    if (!ps->path[0]) {
        snprintf(msg, msglen, "the PS runs without --checkpoint-dir");
        return SS_ERR_STATE;
    }
    size_t groups = 0;
    ss_status st = save_checkpoint(ps, NULL, 0, &groups);
    snprintf(msg, msglen, "%zu dense groups written to %s", groups, ps->path);
    return st;
}

/* The directories the PS writes: --emb-db, --checkpoint-dir and its emb/,
 * created when missing (owner only); existing ones must be private to
 * this uid (common/private_files.h says why). */
static int make_private_dirs(ps_state *ps, const ps_options *o) {
    char why[600];
    if (*o->emb_db && ss__private_dir(o->emb_db, "--emb-db", why, sizeof why) != SS_OK) {
        ss__refuse("shadowsync-ps", "%s", why);
        return -1;
    }
    if (!*o->ckpt_dir)
        return 0;
    if (snprintf(ps->emb_root, sizeof ps->emb_root, "%s/emb", o->ckpt_dir) >=
        (int)sizeof ps->emb_root) {
        ss__refuse("shadowsync-ps", "--checkpoint-dir is too long");
        return -1;
    }
    const char *make[] = {o->ckpt_dir, ps->emb_root};
    for (int i = 0; i < 2; i++)
        if (ss__private_dir(make[i], "--checkpoint-dir", why, sizeof why) != SS_OK) {
            ss__refuse("shadowsync-ps", "%s", why);
            return -1;
        }
    return 0;
}

/* Loads dir/dense.ckpt when present. A corrupt file stops the start: the
 * operator decides, nothing is overwritten. */
static int restore(ps_state *ps, const char *dir) {
    if (snprintf(ps->path, sizeof ps->path, "%s/dense.ckpt", dir) >= (int)sizeof ps->path) {
        ss__refuse("shadowsync-ps", "--checkpoint-dir is too long");
        return -1;
    }
    size_t groups = 0;
    ss_status st = ss__central_load(ps->centre, ps->path, &groups);
    if (st == SS_ERR_NOT_FOUND) {
        ss__say("shadowsync-ps", "no checkpoint in %s, starting empty", dir);
        return 0;
    }
    if (st != SS_OK) {
        ss__refuse("shadowsync-ps", "cannot restore %s: %s (file left as is)", ps->path,
                   ss_strerror(st));
        return -1;
    }
    ss__say("shadowsync-ps", "restored %zu groups from %s", groups, ps->path);
    return 0;
}

static int check_options(ps_options *o);

/* Flags of the gRPC server: address, threads, rounds, dense limits, and who may call; returns how
 * many. */
static size_t server_flags(ps_options *o, ss__flag *flags) {
    const ss__flag own[] = {
        {"listen", SS_FLAG_STRING, &o->listen, "address to serve gRPC on (port 0: pick one)", NULL,
         0, 0},
        {"threads", SS_FLAG_INT, &o->threads, "completion-queue threads", NULL, 1, 64},
        {"bulk-listen", SS_FLAG_STRING, &o->bulk_listen,
         "the bulk stream's TCP port: dense chunks (S-EASGD, MA/BMUF rounds) and embedding rows "
         "(lookups, pushes) that the project's clients send on streams of their own (a ticket "
         "over gRPC through the same token or writer certificate; the same handlers and "
         "limits; with --shard-map a stream serves the epoch of its ticket; with --tls-cert "
         "TLS with the same certificate and --tls-ca's client certificates); auto: --listen's "
         "host, a port the system picks (clients learn it with their ticket; name one where a "
         "firewall admits only known ports; off on a --follow replica); \"\" = off: gRPC only",
         NULL, 0, 0},
        {"http", SS_FLAG_STRING, &o->http,
         "address of /metrics, /healthz, /status, /checkpoint (port 0: pick one; \"\" = off; "
         "the default port, when taken, only warns)",
         NULL, 0, 0},
        {"round-deadline-ms", SS_FLAG_INT, &o->deadline_ms,
         "an MA/BMUF round closes this long after its first snapshot, members or not", NULL, 1,
         3.6e6},
        {"member-timeout-ms", SS_FLAG_INT, &o->member_timeout_ms,
         "drop a member not heard from this long (0 = never; >= round deadline)", NULL, 0, 3.6e6},
        {"max-group-floats", SS_FLAG_INT, &o->max_floats, "largest dense group chunk accepted",
         NULL, 1, (double)(1u << 30)},
        {"max-groups", SS_FLAG_INT, &o->max_groups,
         "most dense groups (each chunk of a group counts)", NULL, 1, 1 << 30},
        {"max-members", SS_FLAG_INT, &o->max_members, "most members of one dense group", NULL, 1,
         1 << 30},
        {"max-total-floats", SS_FLAG_INT, &o->max_total_floats,
         "most floats the PS allocates for dense groups: 3 per float of a group (centre, round "
         "sum, result), 2 more with S-BMUF, 2 per compressed member (x4 bytes: the dense state's "
         "memory)",
         NULL, 1, 1e12},
        {"max-blocked-calls", SS_FLAG_INT, &o->max_blocked,
         "most MA/BMUF round calls waiting at once (each holds a thread)", NULL, 1, 1 << 16},
        {"max-inflight-mb", SS_FLAG_INT, &o->max_inflight_mb,
         "request bytes held at once (received, not yet served); past it calls are refused", NULL,
         1, 1 << 20},
        {"auth-token-file", SS_FLAG_STRING, &o->auth_file,
         "file with the shared token every call must carry (clients read "
         "SHADOWSYNC_AUTH_TOKEN_FILE); needed unless mutual TLS (--tls-ca) or "
         "--insecure-loopback",
         NULL, 0, 0},
        {"peer-token-file", SS_FLAG_STRING, &o->peer_file,
         "file with the PS fleet's own token (not the trainers'): rows move between shards "
         "(Embedding/Handoff) only for a caller that carries it; every PS of a fleet that "
         "changes its shard map needs it, unless --insecure-loopback",
         NULL, 0, 0},
        {"insecure-loopback", SS_FLAG_BOOL, &o->insecure_loopback,
         "serve on a loopback --listen without a token: every local user may call (demos, "
         "tests); refused beside a token",
         NULL, 0, 0},
        {"tls-cert", SS_FLAG_STRING, &o->tls_cert, "PEM server certificate (enables TLS)", NULL, 0,
         0},
        {"tls-key", SS_FLAG_STRING, &o->tls_key, "PEM private key of --tls-cert", NULL, 0, 0},
        {"tls-ca", SS_FLAG_STRING, &o->tls_ca,
         "PEM CA bundle: require client certificates signed by it (mutual TLS)", NULL, 0, 0},
        {"tls-writers", SS_FLAG_STRING, &o->tls_writers,
         "mutual TLS: client certificate identities (common name or subject alternative name, "
         "comma-separated) that may change state; other clients may only read (\"\" = every "
         "verified client may)",
         NULL, 0, 0},
        {"shard-map", SS_FLAG_STRING, &o->shard_map,
         "the fleet's shard map (\"epoch N\", \"ps host:port,...\"), read again every 200 ms: "
         "calls routed by another epoch are refused, saying both; a \"from host:port,...\" line "
         "(the list before) moves the embedding rows whose shard changed while serving (\"\" = "
         "none)",
         NULL, 0, 0},
        {"advertise", SS_FLAG_STRING, &o->advertise,
         "this PS's address as the shard map writes it (\"\" = the address served: --listen "
         "with its port)",
         NULL, 0, 0},
        {"move-batch-rows", SS_FLAG_INT, &o->move_batch_rows,
         "rows taken from an old shard per background call while rows move", NULL, 1, 65536},
        {"move-pause-ms", SS_FLAG_INT, &o->move_pause_ms,
         "pause between background calls while rows move (rows asked for meanwhile are "
         "taken at once)",
         NULL, 0, 60000},
    };
    memcpy(flags, own, sizeof own);
    return sizeof own / sizeof *own;
}

/* Flags of checkpoints and the embedding rows' storage and limits; returns how many. */
static size_t store_flags(ps_options *o, ss__flag *flags) {
    const ss__flag own[] = {
        {"checkpoint-dir", SS_FLAG_STRING, &o->ckpt_dir,
         "restore dense.ckpt from here at start; write it on Checkpoint calls, SIGUSR1 and at "
         "shutdown; embedding checkpoints (Embedding/Checkpoint, by name) go under its emb/ "
         "(\"\" = no checkpoints)",
         NULL, 0, 0},
        {"checkpoint-keep", SS_FLAG_INT, &o->ckpt_keep,
         "newest embedding checkpoints kept under --checkpoint-dir/emb (older ones are removed)",
         NULL, 1, 1e6},
        {"emb-db", SS_FLAG_STRING, &o->emb_db,
         "RocksDB directory of this shard's embedding rows (created; restored at start; \"\" = "
         "rows in memory only)",
         NULL, 0, 0},
        {"sync-writes", SS_FLAG_BOOL, &o->sync_writes,
         "acknowledge a row update only after it is fsync'd to RocksDB (else write-behind)", NULL,
         0, 0},
        {"flush-lag-ms", SS_FLAG_INT, &o->flush_lag_ms,
         "write-behind: an acknowledged update reaches RocksDB within this; updates wait when "
         "the flusher falls further behind",
         NULL, 2, 3.6e6},
        {"mem-cap-mb", SS_FLAG_INT, &o->mem_cap_mb,
         "memory for resident embedding rows; clean rows beyond it are evicted (0 = no cap)", NULL,
         0, 1 << 24},
        {"emb-max-batch", SS_FLAG_INT, &o->emb_max_batch, "most row ids in one embedding request",
         NULL, 1, 1 << 24},
        {"max-reply-mb", SS_FLAG_INT, &o->max_reply_mb,
         "most row bytes in one embedding request or reply (ids x dim x 4)", NULL, 1, 1 << 14},
        {"max-tables", SS_FLAG_INT, &o->max_tables, "most embedding tables", NULL, 1,
         SS_EMB_MAX_TABLES},
        {"max-rows", SS_FLAG_INT, &o->max_rows,
         "most embedding rows in memory, all tables (clean rows are evicted past it; requests "
         "are refused when none can be; 0 = no limit)",
         NULL, 0, 1e12},
    };
    memcpy(flags, own, sizeof own);
    return sizeof own / sizeof *own;
}

/* Flags of online training: deltas out, a follower's deltas in, bounded tables; returns how many.
 */
static size_t online_flags(ps_options *o, ss__flag *flags) {
    const ss__flag own[] = {
        {"delta-dir", SS_FLAG_STRING, &o->delta_dir,
         "online: publish a delta here every --delta-every-s (embedding rows changed and "
         "deleted since the last one, and the dense centres that changed), for checkpoints and "
         "followers "
         "(\"\" = none)",
         NULL, 0, 0},
        {"delta-every-s", SS_FLAG_INT, &o->delta_every_s, "seconds between two deltas", NULL, 1,
         86400},
        {"delta-base-every", SS_FLAG_INT, &o->delta_base_every,
         "every N-th delta is a base (every row); the first after a start always is", NULL, 1, 1e6},
        {"delta-keep-bases", SS_FLAG_INT, &o->delta_keep,
         "bases kept in --delta-dir, with the deltas after them (older ones are removed)", NULL, 1,
         1000},
        {"follow", SS_FLAG_STRING, &o->follow,
         "serving replica: start from the newest base in this --delta-dir, or in the one of the "
         "training PS at this host:port (over its Deltas service; the same token), and apply "
         "its deltas as they appear; serves Lookup, Stats and ReadCentral, refuses every write "
         "(\"\" = a training PS)",
         NULL, 0, 0},
        {"follow-poll-ms", SS_FLAG_INT, &o->follow_poll_ms,
         "--follow: a look for new deltas every this many ms", NULL, 10, 60000},
        {"emb-admit-count", SS_FLAG_INT, &o->emb_admit,
         "online tables: a new row id is stored on its K-th push (counted in a 2 MiB sketch per "
         "table; before that lookups give its initial row; 0 or 1 = at once)",
         NULL, 0, 65535},
        {"emb-ttl-s", SS_FLAG_INT, &o->emb_ttl_s,
         "online tables: a row not pushed for this many seconds is deleted from memory and "
         "RocksDB (0 = never)",
         NULL, 0, 1e10},
        {"emb-max-live-rows", SS_FLAG_INT, &o->emb_max_live,
         "online tables: past this many rows per table the least recently pushed are deleted "
         "(unlike --mem-cap-mb, which spills clean rows to RocksDB; 0 = none)",
         NULL, 0, 1e12},
    };
    memcpy(flags, own, sizeof own);
    return sizeof own / sizeof *own;
}

/* --bulk-listen auto: beside --listen, on its host (what clients reach
 * it at), at a port the system picks (clients learn it with their
 * ticket; a fixed one, --listen's + 1, took the next PS's port on hosts
 * that run several on consecutive ports); off on a --follow replica (it
 * serves no writes). A --listen that does not parse is refused by its
 * own check. */
static void resolve_bulk_auto(ps_options *o) {
    if (strcmp(o->bulk_listen, "auto") != 0)
        return;
    char host[256];
    unsigned port;
    o->bulk_listen = "";
    if (*o->follow || !ss__address_split(o->listen, host, sizeof host, &port))
        return;
    snprintf(o->bulk_beside, sizeof o->bulk_beside, "%.*s:0", (int)ss__address_host_len(o->listen),
             o->listen);
    o->bulk_listen = o->bulk_beside;
}

/* Step 1: flags, --help, --version, and the checks across flags. -1: go
 * on; otherwise the exit code. */
static int parse_options(int argc, char **argv, ps_options *o) {
    *o = (ps_options){.listen = "127.0.0.1:7070",
                      .bulk_listen = "auto",
                      .shard_map = "",
                      .advertise = "",
                      .move_batch_rows = 4096,
                      .http = default_http,
                      .ckpt_dir = "",
                      .ckpt_keep = 3,
                      .emb_db = "",
                      .tls_cert = "",
                      .auth_file = "",
                      .peer_file = "",
                      .tls_key = "",
                      .tls_ca = "",
                      .tls_writers = "",
                      .delta_dir = "",
                      .follow = "",
                      .delta_every_s = 10,
                      .delta_base_every = 10,
                      .delta_keep = 2,
                      .follow_poll_ms = 200,
                      .threads = 2,
                      .deadline_ms = 1000,
                      .member_timeout_ms = 5000,
                      .max_floats = 64 << 20,
                      .flush_lag_ms = 200,
                      .emb_max_batch = SS_EMB_DEFAULT_MAX_BATCH,
                      .max_reply_mb = SS_EMB_DEFAULT_MAX_REPLY_BYTES >> 20,
                      .max_tables = SS_EMB_DEFAULT_MAX_TABLES,
                      .max_rows = 50000000,
                      .max_groups = 65536,
                      .max_members = 4096,
                      .max_total_floats = 1ll << 31,
                      .max_blocked = SS_RPC_DEFAULT_MAX_BLOCKED,
                      .max_inflight_mb = (int64_t)(SS_RPC_DEFAULT_MAX_INFLIGHT >> 20)};
    ss__flag flags[64];
    size_t n = server_flags(o, flags);
    n += store_flags(o, flags + n);
    n += online_flags(o, flags + n);
    int exit_code = ss__flags_cli(&program, flags, n, argc, argv);
    return exit_code >= 0 ? exit_code : check_options(o);
}

/* The checks across flags, and the token read. -1: go on; otherwise the
 * exit code. */
static int check_options(ps_options *o) {
    if (*o->follow &&
        (*o->delta_dir || *o->ckpt_dir || o->emb_admit > 1 || o->emb_ttl_s || o->emb_max_live)) {
        ss__refuse("shadowsync-ps",
                   "--follow serves the training PS's state as its deltas "
                   "say: --delta-dir, --checkpoint-dir and the --emb-* bounds belong to the "
                   "training PS");
        return 2;
    }
    if ((o->emb_admit > 1 || o->emb_ttl_s || o->emb_max_live) && o->mem_cap_mb) {
        ss__refuse("shadowsync-ps",
                   "--mem-cap-mb spills rows to RocksDB; --emb-admit-count, "
                   "--emb-ttl-s and --emb-max-live-rows hold a table whole and forget rows: "
                   "use one or the other");
        return 2;
    }
    char bad[300];
    resolve_bulk_auto(o);
    if (!ss__address_valid(o->listen, "--listen", bad, sizeof bad) ||
        (*o->bulk_listen && !ss__address_valid(o->bulk_listen, "--bulk-listen", bad, sizeof bad))) {
        ss__refuse("shadowsync-ps", "%s", bad);
        return 2;
    }
    if (*o->bulk_listen && *o->follow) {
        ss__refuse("shadowsync-ps", "--bulk-listen serves writes: not on a --follow replica");
        return 2;
    }
    if (o->member_timeout_ms && o->member_timeout_ms < o->deadline_ms) {
        ss__refuse("shadowsync-ps", "--member-timeout-ms must be 0 or >= --round-deadline-ms");
        return 2;
    }
    if (!*o->tls_cert != !*o->tls_key || (*o->tls_ca && !*o->tls_cert)) {
        ss__refuse("shadowsync-ps", "--tls-cert and --tls-key go together (--tls-ca needs "
                                    "both)");
        return 2;
    }
    if (*o->tls_writers && !*o->tls_ca) {
        ss__refuse("shadowsync-ps", "--tls-writers names client certificates: it needs mutual "
                                    "TLS (--tls-ca)");
        return 2;
    }
    char why[400];
    if (*o->tls_writers && ss__auth_writers_valid(o->tls_writers, why, sizeof why) != SS_OK) {
        ss__refuse("shadowsync-ps", "%s", why);
        return 2;
    }
    if (o->sync_writes && !*o->emb_db) {
        ss__refuse("shadowsync-ps", "--sync-writes needs --emb-db");
        return 2;
    }
    if (ss__auth_daemon_setup(o->auth_file, o->http, o->auth, sizeof o->auth, why, sizeof why) !=
        SS_OK) {
        ss__refuse("shadowsync-ps", "%s", why);
        return 2;
    }
    if (*o->peer_file && (ss__auth_header_from_file(o->peer_file, o->peer_auth, sizeof o->peer_auth,
                                                    why, sizeof why) != SS_OK ||
                          !strcmp(o->peer_auth, o->auth))) {
        ss__refuse("shadowsync-ps", "--peer-token-file %s: %s", o->peer_file,
                   o->peer_auth[0]
                       ? "the same token as --auth-token-file: the PS's own must differ "
                         "(trainers hold the other)"
                       : why);
        return 2;
    }
    /* Both would leave the operator guessing which one holds: a token
     * (often from SHADOWSYNC_AUTH_TOKEN_FILE in the environment) makes
     * --insecure-loopback moot, and a demo flag should not sit beside one. */
    if (o->insecure_loopback && o->auth[0]) {
        fprintf(stderr,
                "shadowsync-ps: --insecure-loopback (SHADOWSYNC_INSECURE_LOOPBACK) and a token "
                "(--auth-token-file %s, or SHADOWSYNC_AUTH_TOKEN_FILE) are both set: every call "
                "would need the token, so drop one of them\n",
                o->auth_file);
        return 2;
    }
    /* Who may call: the token's holders (or mutual TLS); nobody's calls
     * are open by default, loopback included (a shared host's users). */
    /* The same rule on every listener: the bulk stream's port serves the
     * same rows and rounds. */
    const char *const names[] = {"--listen", "--bulk-listen"};
    const char *const listens[] = {o->listen, o->bulk_listen};
    for (int i = 0; i < 2; i++)
        if (*listens[i] &&
            ss__auth_listener_check(names[i], listens[i], o->auth[0], *o->tls_ca,
                                    o->insecure_loopback, why, sizeof why) != SS_OK) {
            ss__refuse("shadowsync-ps", "%s%s", why,
                       ss__listen_is_loopback(listens[i]) ? "" : " or mutual TLS (--tls-ca)");
            return 2;
        }
    if (!o->auth[0] && !*o->tls_ca)
        SS_LOG_WARNF("ps", "event=insecure_loopback listen=%s note=\"any local user may call\"",
                     o->listen);
    /* On stdout beside "listening on", whatever the log level: which door
     * this PS keeps is the first thing an operator checks. */
    ss__say("shadowsync-ps", "auth mode=%s peer_token=%s",
            o->auth[0] ? (*o->tls_ca ? "token+mtls" : "token")
                       : (*o->tls_ca ? "mtls" : "insecure_loopback"),
            o->peer_auth[0] ? "yes" : "no");
    return -1;
}

/* Step 2: the dense state (restored from the checkpoint) and the
 * embedding store. */
static int start_deltas(ps_state *ps, const ps_options *o);

static int open_state(ps_state *ps, const ps_options *o) {
    ss__central_config ccfg = {.round_deadline_ms = (uint32_t)o->deadline_ms,
                               .member_timeout_ms = (uint32_t)o->member_timeout_ms,
                               .max_groups = (uint32_t)o->max_groups,
                               .max_members = (uint32_t)o->max_members,
                               .max_total_floats = (uint64_t)o->max_total_floats};
    char why[300] = "out of memory";
    if (ss__metrics_create(&ps->metrics, why, sizeof why) != SS_OK ||
        ss__metrics_build_info(ps->metrics) != SS_OK ||
        ss__central_create(&ccfg, &ps->centre, why, sizeof why) != SS_OK ||
        ss__ps_group_metrics_create(ps->metrics, ps->centre, STATUS_GROUPS, &ps->group_metrics, why,
                                    sizeof why) != SS_OK) {
        ss__refuse("shadowsync-ps", "%s", why);
        return 1;
    }
    ss__emb_store_config ecfg = {.db_path = o->emb_db,
                                 .sync_writes = o->sync_writes,
                                 .flush_lag_ms = (uint32_t)o->flush_lag_ms,
                                 .mem_cap_bytes = (uint64_t)o->mem_cap_mb << 20,
                                 .max_batch = (size_t)o->emb_max_batch,
                                 .max_reply_bytes = (size_t)o->max_reply_mb << 20,
                                 .max_tables = (size_t)o->max_tables,
                                 .max_rows = (uint64_t)o->max_rows,
                                 .metrics = ps->metrics,
                                 .checkpoint_root = ps->emb_root,
                                 .checkpoint_keep = (uint32_t)o->ckpt_keep,
                                 .bounds = {.admit_count = (uint32_t)o->emb_admit,
                                            .ttl_s = (uint64_t)o->emb_ttl_s,
                                            .max_live_rows = (uint64_t)o->emb_max_live}};
    if (make_private_dirs(ps, o) != 0)
        return 1;
    ss_status st = ss__emb_store_create(&ecfg, &ps->store, why, sizeof why);
    if (st != SS_OK) {
        ss__refuse("shadowsync-ps", "cannot open the embedding store %s: %s (%s)",
                   *o->emb_db ? o->emb_db : "(memory)", ss_strerror(st), why);
        return 1;
    }
    if (*o->ckpt_dir && restore(ps, o->ckpt_dir) != 0)
        return 1;
    return start_deltas(ps, o);
}

/* Step 2, online: deltas out (--delta-dir) or in (--follow). */
static int start_deltas(ps_state *ps, const ps_options *o) {
    char why[512] = "";
    ss_status st = SS_OK;
    if (*o->delta_dir) {
        const ss__ps_deltas_config dc = {.dir = o->delta_dir,
                                         .every_s = (uint32_t)o->delta_every_s,
                                         .base_every = (uint32_t)o->delta_base_every,
                                         .keep_bases = (uint32_t)o->delta_keep,
                                         .store = ps->store,
                                         .centre = ps->centre,
                                         .metrics = ps->metrics};
        if ((st = ss__ps_deltas_start(&dc, &ps->deltas, why, sizeof why)) == SS_OK)
            ss__say("shadowsync-ps", "a delta every %llds into %s (a base every %lld)",
                    (long long)o->delta_every_s, o->delta_dir, (long long)o->delta_base_every);
    } else if (*o->follow) {
        /* host:port: a training PS over the network; anything else a directory. */
        const bool remote = ss__address_valid(o->follow, "--follow", NULL, 0);
        const ss__rpc_tls tls = {.ca_file = *o->tls_ca ? o->tls_ca : NULL,
                                 .cert_file = *o->tls_cert ? o->tls_cert : NULL,
                                 .key_file = *o->tls_key ? o->tls_key : NULL};
        if (remote && o->auth[0] && *o->auth_file)
            setenv("SHADOWSYNC_AUTH_TOKEN_FILE", o->auth_file, 0); /* what the client reads */
        const ss__ps_follower_config fc = {.dir = remote ? NULL : o->follow,
                                           .addr = remote ? o->follow : NULL,
                                           .tls = *o->tls_ca || *o->tls_cert ? &tls : NULL,
                                           .poll_ms = (uint32_t)o->follow_poll_ms,
                                           .store = ps->store,
                                           .centre = ps->centre,
                                           .metrics = ps->metrics};
        snprintf(ps->follow_note, sizeof ps->follow_note,
                 "this PS is a read-only follower of %s: it serves Lookup, Stats and "
                 "ReadCentral; send writes to the training PS",
                 o->follow);
        if ((st = ss__ps_follower_start(&fc, &ps->follower, why, sizeof why)) == SS_OK)
            ss__say("shadowsync-ps", "following %s (read-only)", o->follow);
    }
    if (st != SS_OK) {
        ss__refuse("shadowsync-ps", "%s", *why ? why : ss_strerror(st));
        return 1;
    }
    if (*o->emb_db)
        ss__say("shadowsync-ps", "embedding rows in %s (%s)", o->emb_db,
                o->sync_writes ? "sync writes" : "write-behind");
    return 0;
}

/* A follower's answer to every write. */
static void refuse_follower(void *ctx, const uint8_t *req, size_t len, ss__rpc_reply *reply) {
    (void)req, (void)len;
    reply->status = SS_ERR_STATE;
    snprintf(reply->message, sizeof reply->message, "%s", ((ps_state *)ctx)->follow_note);
}

/* Whether the shard map no longer names this PS (the dense service then
 * retires a chunk its last member leaves). */
static bool left_the_map(void *ctx) {
    ps_state *ps = ctx;
    if (!ps->map || !atomic_load(&ps->self_known))
        return false;
    ss__shard_map m;
    ss__ps_map_watch_get(ps->map, &m);
    return ss__shard_map_index(m.ps, ps->self) < 0;
}

/* The address served at: listen's host (as given, brackets and all) with
 * the port the system picked (listen's may be 0). */
static void served_address(const char *listen, int port, char *out, size_t outlen) {
    snprintf(out, outlen, "%.*s:%d", (int)ss__address_host_len(listen), listen, port);
}

/* The bulk stream's server (--bulk-listen): the table's streamed methods
 * (EasgdExchange, RoundMean, the rows' Lookup, Push, PushLookup, Batch)
 * with the gRPC server's limits and shard map epoch, its tickets given
 * out by Bulk/Ticket, added to the table. */
static int start_bulk(ps_state *ps, const ps_options *o, const ss__rpc_server_config *scfg,
                      size_t *nmethods) {
    ss__bulk_server_config bc = {.listen = o->bulk_listen,
                                 .max_message = scfg->max_message_bytes,
                                 .max_inflight_bytes = scfg->max_inflight_bytes,
                                 .map_epoch = scfg->map_epoch,
                                 .map_gate = scfg->map_gate,
                                 .metrics = ps->metrics,
                                 .tls = scfg->tls};
    char why[400] = "";
    ss_status st =
        ss__bulk_server_start(&bc, ps->methods, *nmethods, &ps->svc, &ps->bulk, why, sizeof why);
    if (st != SS_OK) {
        ss__refuse("shadowsync-ps", "%s", *why ? why : "cannot start the bulk server");
        return 1;
    }
    ps->methods[(*nmethods)++] = ss__bulk_server_ticket_method(ps->bulk);
    return 0;
}

/* A new shard map: every call of the old epoch is refused from now on, so
 * an MA round open here gets no more snapshots; closed at once, its
 * members hear of the map at their next call instead of after the
 * round's deadline. */
static void close_rounds_on_new_map(void *centre) {
    const size_t closed = ss__central_close_open_rounds(centre);
    if (closed)
        ss__log(SS_LOG_INFO, "ps", "event=rounds_closed rounds=%zu why=\"a new shard map\"",
                closed);
}

/* Step 3: both services on one gRPC server. */
static int start_rpc(ps_state *ps, const ps_options *o) {
    ss__emb_service_init(&ps->esvc, ps->store);
    ps->svc = (ss__dense_service){.centre = ps->centre,
                                  .max_floats = (size_t)o->max_floats,
                                  .checkpoint = *o->ckpt_dir ? save_checkpoint : NULL,
                                  .checkpoint_ctx = ps,
                                  .left_the_map = left_the_map,
                                  .map_ctx = ps};
    ss__metrics_counter(ps->metrics, "shadowsync_ps_rejected_requests_total",
                        "Requests refused (bad size, unknown group or member, NaN/Inf, garbage).",
                        NULL, &ps->svc.rejected);
    size_t ndense;
    const ss__rpc_method *dense_methods = ss__dense_service_methods(&ndense);
    ss__rpc_method *methods = ps->methods;
    size_t nmethods = 0;
    for (size_t i = 0; i < ndense && nmethods < 32; i++)
        methods[nmethods++] = dense_methods[i];
    for (size_t i = 0; i < SS_EMB_METHODS && nmethods < 32; i++)
        methods[nmethods++] = ps->esvc.methods[i];
    if (*o->delta_dir) { /* followers over the network read the deltas here */
        ss__deltas_service_init(&ps->dsvc, o->delta_dir);
        for (size_t i = 0; i < SS_DELTAS_METHODS && nmethods < 32; i++)
            methods[nmethods++] = ps->dsvc.methods[i];
    }
    for (size_t i = 0; ps->follower && i < nmethods; i++) /* OpenTable: the store refuses */
        if (!methods[i].read_only && strcmp(methods[i].path, SS_EMB_M_OPEN) != 0)
            methods[i] = (ss__rpc_method){.path = methods[i].path,
                                          .handler = refuse_follower,
                                          .ctx = ps,
                                          .max_request = SS_RPC_SMALL_REQUEST};
    ss__rpc_tls tls = {.cert_file = *o->tls_cert ? o->tls_cert : NULL,
                       .key_file = *o->tls_key ? o->tls_key : NULL,
                       .ca_file = *o->tls_ca ? o->tls_ca : NULL};
    if (*o->shard_map) {
        char why[512];
        ps->client_tls = tls;
        if (o->auth[0] && *o->auth_file) /* what its channels to other shards read */
            setenv("SHADOWSYNC_AUTH_TOKEN_FILE", o->auth_file, 0);
        if (ss__ps_map_watch_start(o->shard_map, ps->metrics, &ps->map, why, sizeof why) != SS_OK) {
            ss__refuse("shadowsync-ps", "--shard-map: %s", why);
            return 2;
        }
        ss__ps_map_watch_on_change(ps->map, close_rounds_on_new_map, ps->centre);
        const ss__ps_row_moves_config mc = {.store = ps->store,
                                            .map = ps->map,
                                            .tls = &ps->client_tls,
                                            .batch_rows = (uint32_t)o->move_batch_rows,
                                            .pause_ms = (uint32_t)o->move_pause_ms,
                                            .timeout_ms = 10000,
                                            .peer_auth = o->peer_auth,
                                            .metrics = ps->metrics};
        if (!ps->follower && ss__ps_row_moves_create(&mc, &ps->moves, NULL, 0) == SS_OK) {
            ps->esvc.ensure = ss__ps_row_moves_ensure;
            ps->esvc.handoff = ss__ps_row_moves_handoff;
            ps->esvc.moves = ps->moves;
        }
    }
    ss__rpc_server_config scfg = {.listen = o->listen,
                                  .map_epoch = ss__ps_map_watch_epoch(ps->map),
                                  .map_gate = ss__ps_map_watch_gate(ps->map),
                                  .threads = (uint32_t)o->threads,
                                  .max_message_bytes = (size_t)o->max_floats * 4 + 4096,
                                  .metrics = ps->metrics,
                                  .tls = &tls,
                                  .max_blocked_calls = (uint32_t)o->max_blocked,
                                  .max_inflight_bytes = (size_t)o->max_inflight_mb << 20,
                                  .auth_header = o->auth,
                                  .peer_auth_header = o->peer_auth,
                                  .tls_writers = o->tls_writers};
    if (*o->bulk_listen && start_bulk(ps, o, &scfg, &nmethods) != 0)
        return 1;
    char why[400];
    ss_status st =
        ss__rpc_server_start(&scfg, methods, nmethods, &ps->svc, &ps->srv, why, sizeof why);
    if (st != SS_OK) {
        ss__refuse("shadowsync-ps", "%s",
                   *why ? why : ss_strerror(st)); /* the address, or the PEM file, and why */
        return 1;
    }
    served_address(o->listen, ss__rpc_server_port(ps->srv), ps->listen, sizeof ps->listen);
    snprintf(ps->self, sizeof ps->self, "%s", *o->advertise ? o->advertise : ps->listen);
    atomic_store(&ps->self_known, true);
    if (ps->moves && ss__ps_row_moves_run(ps->moves, ps->self) != SS_OK) {
        ss__refuse("shadowsync-ps", "cannot start moving rows (out of memory)");
        return 1;
    }
    return 0;
}

/* Step 4: the HTTP endpoint, then the line scripts wait for. */
static int start_http(ps_state *ps, const ps_options *o) {
    ss__http_config hcfg = {.bind = o->http,
                            .metrics = ps->metrics,
                            .status_json = status_json,
                            .checkpoint = http_checkpoint,
                            .before_metrics = refresh_metrics,
                            .ctx = ps,
                            .auth_header = o->auth,
                            .insecure_posts = o->insecure_loopback,
                            .optional = o->http == default_http};
    char web_at[300];
    if (ss__http_daemon_start(program.name, &hcfg, &ps->web, web_at, sizeof web_at, NULL, 0) !=
        SS_OK)
        return 1;
    char tls[SS_AUTH_WRITERS_MAX + 40] = "";
    if (*o->tls_ca && *o->tls_writers)
        snprintf(tls, sizeof tls, " (mutual TLS; writers %s)", o->tls_writers);
    else if (*o->tls_cert)
        snprintf(tls, sizeof tls, *o->tls_ca ? " (mutual TLS)" : " (TLS)");
    ss__say("shadowsync-ps", "listening on %s%s, http on %s", ps->listen, tls, web_at);
    /* The bulk port on a line of its own after it: scripts read the first
     * address, or "listening on A, http on B", as before there was one. */
    if (ps->bulk) {
        char bulk[300];
        served_address(o->bulk_listen, ss__bulk_server_port(ps->bulk), bulk, sizeof bulk);
        ss__say("shadowsync-ps", "bulk on %s (dense chunks and rows on streams)", bulk);
    }
    return 0;
}

/* Step 5: serve until SIGINT or SIGTERM; SIGUSR1 checkpoints. */
static void serve(ps_state *ps, const ps_options *o, const sigset_t *sigs) {
    int sig;
    for (;;) {
        sigwait(sigs, &sig);
        if (sig != SIGUSR1)
            break;
        size_t groups = 0;
        if (*o->ckpt_dir)
            save_checkpoint(ps, NULL, 0, &groups);
    }
    ss__log(SS_LOG_INFO, "ps", "event=stopping signal=%d", sig);
}

/* Step 6: stop serving, write the last checkpoint, flush dirty rows. */
static int shut_down(ps_state *ps, const ps_options *o, bool served) {
    ss__http_server_stop(ps->web);
    ss__rpc_server_stop(ps->srv);
    ss__bulk_server_stop(ps->bulk);
    ss__ps_row_moves_destroy(ps->moves);
    ss__ps_map_watch_stop(ps->map);
    ss__ps_deltas_stop(ps->deltas); /* one last delta: what changed since the one before */
    ss__ps_follower_stop(ps->follower);
    int rc = 0;
    if (served && *o->ckpt_dir) {
        size_t groups = 0;
        if (save_checkpoint(ps, NULL, 0, &groups) != SS_OK)
            rc = 1;
        else
            ss__say("shadowsync-ps", "wrote %zu groups to %s", groups, ps->path);
    }
    ss__emb_store_destroy(ps->store); /* flushes dirty rows */
    ss__ps_group_metrics_destroy(ps->group_metrics);
    ss__central_destroy(ps->centre);
    ss__metrics_destroy(ps->metrics);
    return rc;
}

/* jemalloc's settings (common/malloc_tune.h) */
const char *malloc_conf = SS_JEMALLOC_CONF;

int main(int argc, char **argv) {
    ss__malloc_keep_large_buffers(); /* sync rounds reuse their megabyte buffers */
    ss__private_umask();             /* RocksDB's files and checkpoint links: 0640 at most */
    ps_options o;
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0)
        return rc;
    sigset_t sigs; /* for sigwait, not for gRPC's threads */
    ss__signals_block(&sigs, SIGUSR1);

    ps_state ps = {.save_lock = PTHREAD_MUTEX_INITIALIZER, .start_ns = ss__now_ns()};
    bool served = false;
    rc = open_state(&ps, &o);
    if (rc == 0)
        rc = start_rpc(&ps, &o);
    if (rc == 0)
        rc = start_http(&ps, &o);
    if (rc == 0) {
        serve(&ps, &o, &sigs);
        served = true;
    }
    int down = shut_down(&ps, &o, served);
    if (served)
        ss__say("shadowsync-ps", "stopped");
    return rc ? rc : down;
}
