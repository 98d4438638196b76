/* ShadowSync trainer hooks: the API a CTR training binary links against
 * (libshadowsync, pkg-config "shadowsync", CMake "shadowsync::shadowsync").
 *
 * A trainer process opens one ss_trainer, creates named dense groups whose
 * memory the library owns, lets its Hogwild workers write them freely and
 * calls ss_trainer_step() once per minibatch. In background mode a shadow
 * thread pool inside the process syncs every group with the parameter
 * servers (S-EASGD, S-MA or S-BMUF) and step() never waits; in foreground
 * mode every K-th step runs the round in the calling thread. close() runs
 * the final rounds and leaves.
 *
 *     ss_trainer_config cfg;
 *     ss_trainer_config_init(&cfg);
 *     ss_trainer_config_from_env(&cfg);      // SHADOWSYNC_PS=host:port,...
 *     ss_trainer *t;
 *     ss_dense *w;
 *     if (ss_trainer_open(&cfg, &t) != SS_OK ||
 *         ss_trainer_add_dense(t, "mlp", n, init, &w) != SS_OK) ...
 *     float *x = ss_dense_data(w);           // train on x, then:
 *     ss_trainer_step(t);
 *     ss_trainer_finish(t);                  // final rounds; x still valid
 *     ss_trainer_close(t);
 *
 * Every fallible call returns an ss_status; ss_strerror() explains the
 * code and ss_last_error() the failure itself: which setting or argument
 * is wrong and why ("alpha=1.5: the elastic rate must be in (0, 1]").
 *
 * Configs are versioned: their first field, struct_size, is set by the
 * _init() call and tells the library which fields the caller knows. A
 * binding that cannot mirror the layout uses ss_trainer_config_create()
 * and ss_trainer_config_set(cfg, "alpha", "0.3") instead. Every setting
 * has one name: the key of _set(), SHADOWSYNC_<KEY> in the environment,
 * --<key> on the command lines (docs/configuration.md has the table). */
#ifndef SHADOWSYNC_SHADOWSYNC_H
#define SHADOWSYNC_SHADOWSYNC_H

#include <stddef.h>
#include <stdint.h>

#include "shadowsync/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ss_trainer ss_trainer;
typedef struct ss_dense ss_dense;

typedef enum ss_sync_mode {
    SS_SYNC_NONE = 0,   /* no sync at all (the baseline) */
    SS_SYNC_BACKGROUND, /* shadow threads; step() never waits */
    SS_SYNC_FOREGROUND  /* every sync_every-th step() runs the round */
} ss_sync_mode;

typedef struct ss_trainer_config {
    size_t struct_size; /* sizeof(ss_trainer_config) as the caller was built: set by _init() */
    /* Key of ss_trainer_config_set() and SHADOWSYNC_<KEY>, then meaning: */
    const char *ps;    /* ps: "host:port[,host:port...]": PS shards, same order everywhere */
    const char *name;  /* trainer_name: label in logs and metrics: [A-Za-z0-9_.-], < 64 */
    ss_sync_mode mode; /* sync: none | shadow (SS_SYNC_BACKGROUND) | foreground */
    const char *algo;  /* algo: "easgd", "ma" or "bmuf" */
    float alpha;       /* alpha: S-EASGD elastic rate, (0, 1] */
    float bmuf_eta, bmuf_zeta;  /* bmuf_eta, bmuf_zeta: block learning rate, momentum */
    int bmuf_nesterov;          /* bmuf_nesterov: true|false */
    uint32_t shadow_threads;    /* shadow_threads: background mode */
    uint32_t sync_every;        /* sync_every: K, foreground mode */
    uint64_t min_round_gap;     /* min_round_gap: steps before a group's next round */
    uint64_t round_interval_us; /* round_interval_us: pause between rounds */
    uint32_t timeout_ms;        /* rpc_timeout_ms: per RPC */
    uint32_t round_wait_ms;     /* round_wait_ms: extra wait for an MA/BMUF round */
    uint32_t heartbeat_ms;      /* heartbeat_ms: idle groups say they are alive */
    uint32_t final_rounds;      /* final_rounds: per group after training */
    uint32_t final_sync_ms;     /* final_sync_ms: and keep syncing this long */
    const char *tls_ca, *tls_cert, *tls_key; /* tls_ca, tls_cert, tls_key: PEM; NULL = TCP */
    /* Agent mode (background only): the unix socket of the host's
     * shadowsync-agent. Dense groups then live in shared memory (memfd)
     * handed to the agent, whose shadow pool syncs them with its PS; this
     * process only trains. If the agent goes away, training goes on and
     * the hooks register again once it is back. NULL = in-process pool.
     * Key: agent. */
    const char *agent;
    /* encoding: compressed sync with the PS: "f32" (plain floats), "fp16",
     * "bf16" or "int8" (min-max by 256-float blocks). The PS and this
     * trainer each keep a mirror of the replica, so what an encoding
     * loses goes out with the next round (error feedback). With an agent,
     * the agent's --encoding decides. (Added in 0.2: callers built against
     * an older header get "f32".) */
    const char *encoding;
    /* peers: decentralized averaging, no PS on the dense path:
     * "host:port,..." every trainer's address in the same order; this one
     * serves its latest snapshots on peers[peer_rank] and each round pulls
     * one peer's (a ring schedule) and moves to the mean. algo must be ma;
     * not with ps or agent. peer_rank: this trainer's index in peers.
     * (Added in 0.2.) */
    const char *peers;
    uint32_t peer_rank;
    /* peer_schedule: which peer a round pulls: "ring" (rank+1, rank+2, ...
     * one step further each round) or "random"; or "tree": every round
     * sums all peers' snapshots up a forest of aggregation trees, one per
     * partition of the group, and brings the mean back down (a dead peer
     * fails the round at its deadline); with trees algo may be ma or bmuf.
     * (Added in 0.2.) */
    const char *peer_schedule;
    /* topology: peer_schedule=tree packs its trees over these links, a
     * file of "link HOST HOST GBIT", "nic HOST GBIT", "default GBIT" and
     * "local GBIT" lines (docs/configuration.md); unset: every link alike.
     * (Added in 0.2.) */
    const char *topology;
    /* chunk_floats: the PS path cuts each group's shard into chunks of at
     * most this many floats, one call (and one PS group, named by its
     * range) each. Every member of a group must use the same value: a PS
     * refuses a chunk cut otherwise, naming both cuts. 0: the library's
     * default, 131072 (512 KiB; 262144 before 0.2). With an agent, the
     * agent's --chunk-floats decides. (Added in 0.2.) */
    uint32_t chunk_floats;
    /* insecure_loopback: peers (gossip or trees) listen on a loopback
     * address without a token (SHADOWSYNC_AUTH_TOKEN_FILE): any local user
     * may pull or push the model. For demos and tests; without it (the
     * default) a peer needs the token. (Added in 0.2.) */
    int insecure_loopback;
    /* shard_map: a shard map file (its "ps" line and epoch) instead of ps:
     * every call carries the map's epoch, and a PS serving another epoch
     * refuses it (SS_ERR_STATE, saying both), so a trainer routed by an
     * old map is told so and never served by the wrong shard. (Added in
     * 0.2.) */
    const char *shard_map;
    /* bulk (default 1): dense chunks (S-EASGD, MA/BMUF) and remote or
     * cached tables' rows go to each PS that serves a bulk port (a PS's
     * default) on TCP streams of their own, opened by a ticket asked for
     * over gRPC (the same token or certificate), without gRPC's per-call
     * costs; to a PS without one, over gRPC. With a shard map, a stream
     * serves the epoch of its ticket (a new one after the map moves on).
     * With TLS settings the stream is TLS with the same certificates. 0:
     * gRPC only. With an agent, the agent's --bulk decides. (Added in
     * 0.2.) */
    int bulk;
    /* http_listen: "host:port" (port 0 picks one: ss_trainer_http_address says
     * which) on which this trainer serves GET /metrics (its series, named
     * as an agent's trainers' are), /status (JSON: steps, each group's
     * rounds, sync gap and divergence; names only to a request with the
     * token) and /healthz, for a trainer that syncs in its own process
     * (no agent) to be scraped and alerted on. Unset: none (the default).
     * (Added in 0.3.) */
    const char *http_listen;
} ss_trainer_config;

typedef struct ss_dense_stats {
    uint64_t iterations;    /* steps counted on this group */
    uint64_t rounds;        /* completed sync rounds */
    uint64_t failed_rounds; /* abandoned (PS unreachable, deadline) */
    uint64_t rejoins;       /* joined again after a PS forgot this trainer */
    double gap_mean;        /* steps between two completed rounds (of training: the
                               final rounds of finish() are not counted in the gap) */
    uint64_t gap_p50, gap_p99, gap_max;
    double divergence; /* |x - c| / |c| at a recent round */
} ss_dense_stats;

/* The library's version, "MAJOR.MINOR.PATCH". */
const char *ss_version(void);

/* Why the last call of this thread that failed did: names the setting,
 * argument or limit ("" before any failure). Valid until this thread's
 * next call into the library. */
const char *ss_last_error(void);

/* Defaults: background S-EASGD, alpha 0.5, 1 shadow thread, K = 10,
 * min_round_gap 4, timeout 10 s, round wait 5 s, heartbeat 1 s, 10 final
 * rounds, no PS (must be set unless mode is NONE). */
void ss_trainer_config_init(ss_trainer_config *cfg);

/* Overrides every field whose SHADOWSYNC_<KEY> is set (SHADOWSYNC_PS,
 * _SYNC, _ALPHA, _RPC_TIMEOUT_MS ...; the keys are in the struct above).
 * Strings point into the environment. A malformed value:
 * SS_ERR_INVALID_ARGUMENT, cfg unchanged, and ss_last_error() names the
 * variable. (0.1.0's SHADOWSYNC_MODE, _TRAINER and _TIMEOUT_MS are still
 * read, with a warning, when the new name is not set.) */
ss_status ss_trainer_config_from_env(ss_trainer_config *cfg);

/* One setting by key ("alpha", "rpc_timeout_ms"; "rpc-timeout-ms" and
 * "SHADOWSYNC_RPC_TIMEOUT_MS" are the same key) from its text, as on a
 * command line. String values are not copied: keep them until
 * ss_trainer_open() returns. Unknown key: SS_ERR_NOT_FOUND; bad value:
 * SS_ERR_INVALID_ARGUMENT; cfg unchanged either way. */
ss_status ss_trainer_config_set(ss_trainer_config *cfg, const char *key, const char *value);

/* A config on the heap, initialized: for bindings that do not mirror the
 * struct. */
ss_status ss_trainer_config_create(ss_trainer_config **out);
void ss_trainer_config_destroy(ss_trainer_config *cfg);

/* Validates cfg and connects (lazily: a PS that is not up yet is retried
 * by the rounds). In background mode the shadow pool starts here; in agent
 * mode the connection to the agent (retried in the background). */
ss_status ss_trainer_open(const ss_trainer_config *cfg, ss_trainer **out);

/* A dense group of n floats owned by the library (64-byte aligned), named
 * by 1-63 characters of [A-Za-z0-9_.-], not starting with ".",
 * initialized from init (NULL: zeros). Every trainer must use the same
 * name, n and algorithm for a group. Joins the PS shards. */
ss_status ss_trainer_add_dense(ss_trainer *t, const char *name, size_t n, const float *init,
                               ss_dense **out);
/* The group's floats in host memory; NULL for a device group. */
float *ss_dense_data(ss_dense *g);
size_t ss_dense_size(const ss_dense *g);
ss_status ss_dense_get_stats(ss_dense *g, ss_dense_stats *out);
/* Copies the group's n floats to dst (host memory), from either kind of
 * group: to evaluate or save the model. (Added in 0.2.) */
ss_status ss_dense_read(ss_dense *g, float *dst);
/* Copies the group's central model as the parameter servers hold it (the
 * S-EASGD centre, or the last S-MA / S-BMUF round's result) to dst (n
 * floats, host memory): the averaged model, to evaluate or save. Asks
 * the PS shards (ps); SS_ERR_STATE, saying why, for a trainer that has no
 * PS of its own (agent mode, decentralized peers, sync none). (Added in
 * 0.2.) */
ss_status ss_dense_read_central(ss_dense *g, float *dst);

/* ---- Device groups (CUDA; added in 0.2) ----
 *
 * A device group lives in the memory of a CUDA GPU. The trainer's kernels
 * update ss_dense_device_data(g) (a device pointer) on their own streams,
 * Hogwild as on the host; the shadow pool syncs it without touching those
 * streams: each round copies a snapshot to pinned host memory and applies
 * its delta with a kernel, both on a stream of its own created
 * non-blocking at the device's lowest priority. A training step never
 * waits for a round. With an agent, the group is handed over by CUDA IPC
 * and the agent's pool does the same. docs/gpu.md.
 *
 *     if (ss_device_count() > 0 &&
 *         ss_trainer_add_dense_device(t, "mlp", n, 0, init, &w) == SS_OK) {
 *         float *dw = (float *)ss_dense_device_data(w);  // cudaMalloc'd
 *         ...  // kernels update dw; ss_trainer_step(t) per minibatch
 *     }
 */

/* CUDA devices the library can use: 0 when it was built without CUDA,
 * there is no driver or no GPU (ss_last_error() says which). */
int ss_device_count(void);
/* Like ss_trainer_add_dense, the n floats on device `device` (an ordinal
 * below ss_device_count()); init: n floats in host memory, or NULL for
 * zeros. No device or no CUDA: SS_ERR_UNSUPPORTED, and ss_last_error()
 * says why. */
ss_status ss_trainer_add_dense_device(ss_trainer *t, const char *name, size_t n, int device,
                                      const float *init, ss_dense **out);
/* The device pointer of a device group; NULL for a host group. */
void *ss_dense_device_data(ss_dense *g);
/* The device ordinal of a device group; -1 for a host group. */
int ss_dense_device(const ss_dense *g);

/* The trainer's metrics in the Prometheus text format, for the program to
 * serve or log (the library serves no HTTP itself): the shadow pool's
 * rounds, bytes, sync gap and divergence per group, steps, the tables'
 * counters, shadowsync_build_info. In agent mode the agent's /metrics has
 * the rounds.
 * Writes at most cap bytes with a NUL; *len (optional) gets the length
 * without it. SS_ERR_TOO_LARGE when cap is too small (*len says what is
 * needed). */
ss_status ss_trainer_metrics(ss_trainer *t, char *buf, size_t cap, size_t *len);
/* The address the trainer's http_listen setting serves ("host:port", the port
 * picked when it asked for 0); SS_ERR_STATE when it serves none. */
ss_status ss_trainer_http_address(ss_trainer *t, char *buf, size_t cap);

/* One training step done (thread-safe; call once per minibatch from any
 * worker). Background: counts and returns at once. Foreground: every
 * sync_every-th step runs one round of every group in this thread and
 * returns its status (SS_OK, or the transport's error; training can go
 * on either way). */
ss_status ss_trainer_step(ss_trainer *t);

/* Training is over: stops the shadow pool, runs the final rounds (at
 * least final_rounds per group and at least final_sync_ms) in this thread
 * and leaves the PS. The groups' memory stays readable (to evaluate or
 * save the model) and their stats frozen. step() then only counts.
 * SS_OK only when the final rounds and the tables' flushes succeeded: a PS
 * that is gone or does not answer is SS_ERR_IO or SS_ERR_TIMEOUT (the
 * replicas then hold what training and the last good round left); a
 * replica that holds NaN or Inf is SS_ERR_NON_FINITE (its rounds stopped
 * when it diverged, it left the PS, and the log and the
 * shadowsync_sync_diverged metric said so). */
ss_status ss_trainer_finish(ss_trainer *t);

/* finish() if not done yet, then frees everything including the groups'
 * memory. */
ss_status ss_trainer_close(ss_trainer *t);

/* ---- Embedding tables ----
 *
 * A table maps row ids (uint64) to rows of dim floats. Three modes, one
 * API, so a trainer switches by configuration:
 *  - SS_TABLE_LOCAL: the table lives in this process (no PS);
 *  - SS_TABLE_REMOTE: rows live on the PS shards (the paper's EmbPS):
 *    lookups are deduplicated, split by shard and sent to all shards at
 *    once; pushes go through a bounded queue to a pusher thread (push()
 *    blocks only when the queue is full), and the server applies the
 *    optimizer;
 *  - SS_TABLE_CACHED: a local cache of up to cache_rows rows; misses are
 *    fetched from the shards, updates are applied locally at full speed,
 *    and a shadow thread syncs every row touched since its last sync with
 *    the shards by elastic averaging (S-EASGD per row), then evicts clean
 *    rows beyond the capacity.
 * Rows start from a deterministic value of (table, id), the same in every
 * mode, process and shard. Ids may repeat within a call: lookups answer
 * each position, pushes add up the gradients of a repeated id.
 *
 *     ss_table_config tc;
 *     ss_table_config_init(&tc, "ads", 64);
 *     tc.mode = SS_TABLE_REMOTE;
 *     ss_table *emb;
 *     ss_table_open(t, &tc, &emb);
 *     ss_table_lookup(emb, ids, n, rows);     // rows: n * 64 floats
 *     ss_table_push(emb, ids, n, grads);      // asynchronous in remote mode
 *
 * Tables opened with a trainer belong to it: its finish() flushes them,
 * its close() frees them. A table opened without one (t = NULL) stands
 * alone (its shards from cfg->ps, plain TCP) and is closed by
 * ss_table_close(). Every call is thread-safe. */

typedef struct ss_table ss_table;
typedef struct ss_table_fetch ss_table_fetch;

typedef enum ss_table_mode { SS_TABLE_LOCAL = 0, SS_TABLE_REMOTE, SS_TABLE_CACHED } ss_table_mode;
typedef enum ss_table_optimizer { SS_TABLE_SGD = 0, SS_TABLE_ADAGRAD = 1 } ss_table_optimizer;

typedef struct ss_table_config {
    size_t struct_size; /* sizeof(ss_table_config) as the caller was built: set by _init() */
    const char *name;   /* [A-Za-z0-9_.-], < 64 characters; same on every trainer */
    /* Key of ss_table_config_set() and SHADOWSYNC_<KEY>, then meaning: */
    uint32_t dim;                 /* emb_dim */
    ss_table_mode mode;           /* emb: local | remote | cached */
    ss_table_optimizer optimizer; /* emb_optimizer: sgd | adagrad (row-wise); same everywhere */
    float lr, eps, init_scale;    /* emb_lr, emb_eps, emb_init_scale */
    uint32_t push_queue;          /* emb_push_queue: remote: batches queued before push() waits */
    size_t cache_rows;            /* emb_cache_rows: cached: rows kept (dirty rows stay too) */
    float alpha;                  /* emb_alpha: cached: elastic rate of the row sync, (0, 1] */
    uint32_t sync_interval_ms;    /* emb_sync_ms: cached: pause between row-sync passes */
    const char *ps;               /* emb_ps: remote/cached: "host:port,..."; NULL = the trainer's */
    /* emb_encoding: cached: how the row sync sends rows and gets deltas
     * back: "f32", "fp16", "bf16" or "int8" (min-max per row); the shard
     * moves each centre row by the decoded delta it sends, so nothing is
     * lost, only deferred to the next sync. (Added in 0.2.) */
    const char *encoding;
    /* Local tables that live for months (online training; added in 0.2;
     * 0 = off): emb_admit_count: a new id gets a row only on its K-th push
     * (its lookups give the initial row until then); emb_ttl_s: a row not
     * pushed for this many seconds is deleted; emb_max_live_rows: past it
     * the least recently pushed rows are deleted. A cached table is bounded
     * by emb_cache_rows and the PS's own bounds (its --emb-* flags). */
    uint32_t admit_count;
    uint64_t ttl_s;
    uint64_t max_live_rows;
    /* emb_shard_map: remote/cached: the table's shards from a shard map
     * file (epoch, ps list) instead of emb_ps; when the PS fleet moves to a
     * new epoch (rows moving between shards while training runs), the
     * table reads the map again and routes by the new list. (Added in
     * 0.2.) */
    const char *shard_map;
} ss_table_config;

typedef struct ss_table_stats {
    uint64_t lookups, pushes; /* ids asked / pushed (before deduplication) */
    uint64_t remote_rows;     /* rows fetched from the shards */
    uint64_t cache_hits;      /* cached: rows found locally */
    uint64_t synced_rows;     /* cached: rows synced by elastic averaging */
    uint64_t sync_passes;     /* cached: row-sync passes that synced rows */
    uint64_t failed_calls;    /* remote calls that failed (pushes are dropped) */
    uint64_t push_waits;      /* push() calls that waited for queue room */
    uint64_t resident_rows;   /* local/cached: rows in memory */
    uint64_t evictions;       /* cached: rows evicted */
} ss_table_stats;

/* Defaults: SGD, lr 0.05, eps 1e-8, init_scale 0.01, local mode, push
 * queue 16, cache 1M rows, alpha 0.5, sync every 10 ms. */
void ss_table_config_init(ss_table_config *cfg, const char *name, uint32_t dim);
/* As for the trainer's config: SHADOWSYNC_EMB, _EMB_LR ... (every table
 * of the process), one setting by key, and a config on the heap. name is
 * not copied. */
ss_status ss_table_config_from_env(ss_table_config *cfg);
ss_status ss_table_config_set(ss_table_config *cfg, const char *key, const char *value);
ss_status ss_table_config_create(const char *name, uint32_t dim, ss_table_config **out);
void ss_table_config_destroy(ss_table_config *cfg);
/* Remote and cached modes need shards (cfg->ps, else the trainer's ps);
 * the shards create the table or check that it matches
 * (SS_ERR_SIZE_MISMATCH: another dim). t may be NULL: a standalone table. */
ss_status ss_table_open(ss_trainer *t, const ss_table_config *cfg, ss_table **out);
/* Flushes and frees a standalone table (SS_ERR_STATE for a trainer's:
 * its trainer closes it). Returns the flush's status. */
ss_status ss_table_close(ss_table *tb);
/* rows: n * dim floats out, in the order of ids. */
ss_status ss_table_lookup(ss_table *tb, const uint64_t *ids, size_t n, float *rows);
/* Starts fetching rows for ids (e.g. the next batch's) in the background;
 * ss_table_fetch_wait gives them and frees the fetch. Every fetch must be
 * waited for. */
ss_status ss_table_prefetch(ss_table *tb, const uint64_t *ids, size_t n, ss_table_fetch **out);
ss_status ss_table_fetch_wait(ss_table_fetch *f, float *rows);
/* ss_table_push of push_ids (pn rows of grads) and ss_table_prefetch of
 * ids in one go: a training step's push of this batch and fetch of the
 * next. A remote table sends both in one call per shard (half the round
 * trips of a push and a prefetch), the push applied first, so a row in
 * both comes back updated; other modes apply the push at once. A push
 * that fails is reported by the next ss_table_flush, as with
 * ss_table_push; the fetch's own status comes from ss_table_fetch_wait.
 * Either part may be empty. */
ss_status ss_table_push_prefetch(ss_table *tb, const uint64_t *push_ids, size_t pn,
                                 const float *grads, const uint64_t *ids, size_t n,
                                 ss_table_fetch **out);
/* A hint that ids will be looked up soon (the batches after the next):
 * a cached table loads those of them it does not hold from the shards in
 * the background, in one call per shard, so the lookups that follow find
 * them; several batches warmed at once cost one round trip instead of one
 * each. Returns at once; a warm-up that fails or is skipped (more than a
 * few already waiting) only leaves the rows to the lookup. Local and
 * remote tables have nothing to warm (SS_OK). */
ss_status ss_table_warm(ss_table *tb, const uint64_t *ids, size_t n);
/* grads: n * dim finite floats. */
ss_status ss_table_push(ss_table *tb, const uint64_t *ids, size_t n, const float *grads);
/* Remote: waits until every queued push has been sent; SS_OK only when
 * every push since the last flush was applied, else the status of the
 * first one the shards did not take (those gradients are lost; counted in
 * failed_calls). Cached: syncs every touched row now. */
ss_status ss_table_flush(ss_table *tb);
ss_status ss_table_get_stats(ss_table *tb, ss_table_stats *out);

/* Many tables in one call: an embedding model's features of a batch
 * (added in 0.3). tables[k] takes counts[k] ids, in turn from ids (table
 * 0's first); rows and grads are laid out the same way, counts[k] * dim
 * of tables[k] floats each. The tables may differ in mode, dim and
 * trainer. Remote tables' calls go out together (each on its table's
 * fetcher), so a batch waits for the slowest table's round trip, not for
 * the sum of them; local and cached tables answer in the calling thread.
 * ss_table_push_many checks every gradient before any table takes one
 * (all or nothing: SS_ERR_NON_FINITE names the table and id). A failure
 * names the table. */
typedef struct ss_table_fetch_many ss_table_fetch_many;
ss_status ss_table_lookup_many(ss_table *const *tables, size_t ntables, const uint64_t *ids,
                               const size_t *counts, float *rows);
ss_status ss_table_push_many(ss_table *const *tables, size_t ntables, const uint64_t *ids,
                             const size_t *counts, const float *grads);
/* ss_table_push_prefetch for every table: this batch's push and the
 * next batch's fetch; ss_table_fetch_many_wait gives the rows (laid out
 * as for ss_table_lookup_many) and frees the fetch. Every fetch must be
 * waited for, before its tables close. */
ss_status ss_table_push_prefetch_many(ss_table *const *tables, size_t ntables,
                                      const uint64_t *push_ids, const size_t *push_counts,
                                      const float *grads, const uint64_t *ids, const size_t *counts,
                                      ss_table_fetch_many **out);
ss_status ss_table_fetch_many_wait(ss_table_fetch_many *f, float *rows);
/* ss_table_warm for every table. */
ss_status ss_table_warm_many(ss_table *const *tables, size_t ntables, const uint64_t *ids,
                             const size_t *counts);

#ifdef __cplusplus
}
#endif

#endif
