/* One embedding table in memory: id (uint64) -> row of `dim` floats plus
 * the optimizer's state, in an open-addressing hash cut into stripes that
 * each have their own lock. Row memory comes from a jemalloc arena that
 * belongs to the table, so its bytes are accounted as one and freed as one
 * (the arena is destroyed with the table).
 *
 * The same table serves three owners: the parameter server's store (rows
 * loaded from RocksDB), a trainer's local table (--emb local) and a
 * trainer's row cache (--emb cached, rows loaded from the shards). Rows
 * not resident are asked of a loader; the operation is then applied to the
 * loaded row under the same lock that inserts it, so no row is ever
 * evicted between loading and use.
 *
 * Every update marks its row dirty and bumps its version; the owner
 * collects dirty rows (ss__emb_table_collect_dirty), writes or syncs them,
 * and marks them clean only when the version did not move meanwhile.
 * Clean rows can be evicted (CLOCK); dirty rows never are. */
#ifndef SHADOWSYNC_EMB_TABLE_H
#define SHADOWSYNC_EMB_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/names.h"
#include "shadowsync/status.h"

typedef enum ss__emb_optimizer {
    SS_EMB_SGD = 0,     /* w -= lr g */
    SS_EMB_ADAGRAD = 1, /* row-wise: a += mean(g^2); w -= lr g / (sqrt(a) + eps) */
} ss__emb_optimizer;

#define SS_EMB_NAME_MAX SS_NAME_MAX
#define SS_EMB_MAX_DIM  4096

typedef struct ss__emb_spec {
    char name[SS_EMB_NAME_MAX]; /* [A-Za-z0-9_.-]+ */
    uint32_t dim;
    ss__emb_optimizer optimizer;
    float lr;
    float eps;        /* Adagrad */
    float init_scale; /* rows start uniform in [-init_scale, init_scale] */
} ss__emb_spec;

/* Fills defaults (SGD, lr 0.05, eps 1e-8, init_scale 0.01) for name/dim. */
ss_status ss__emb_spec_init(ss__emb_spec *spec, const char *name, uint32_t dim);
/* SS_ERR_INVALID_ARGUMENT with a reason in why when the spec is unusable. */
ss_status ss__emb_spec_check(const ss__emb_spec *spec, char *why, size_t whylen);
/* Same dim, optimizer, lr, eps and init_scale (the name aside). */
bool ss__emb_spec_same(const ss__emb_spec *a, const ss__emb_spec *b);
/* Floats of optimizer state per row (0 for SGD, 1 for row-wise Adagrad). */
size_t ss__emb_state_floats(ss__emb_optimizer opt);
/* dim + state: the floats a stored row carries. */
size_t ss__emb_row_floats(const ss__emb_spec *spec);
/* Stable table id: FNV-1a of the name (same on every shard and restart).
 * 0xFFFFFFFF is reserved for the store's own keys. */
uint32_t ss__emb_table_id(const char *name);

/* --- the math, as pure functions (unit-tested against hand values) --- */

/* The deterministic initial row of (table id, row id): data uniform in
 * [-scale, scale], state zero. Identical on every shard and restart. */
void ss__emb_row_init(uint32_t table_id, uint64_t id, float scale, float *row, size_t dim,
                      size_t state_floats);
/* Applies one gradient to a row (data + state) with the spec's optimizer.
 * false, with the row as it was, when the result would not be finite
 * (finite gradients can still overflow a row or Adagrad's sum). */
bool ss__emb_apply_gradient(const ss__emb_spec *spec, float *row, const float *grad);
/* Elastic step of S-EASGD for one row: d = alpha (x - c); c += d;
 * delta = d. false, with c as it was and delta zeros, when d or c would
 * not be finite. */
bool ss__emb_elastic(float *center, const float *x, float alpha, float *delta, size_t dim);
/* How an elastic reply's delta rows travel when they are compressed (the
 * PS passes shadow/codec.h's ss__codec_round_trip): fn writes row_bytes
 * of reply for delta d into out and rewrites d to what the receiver will
 * decode from them; false when it could not (d zeroed). */
typedef struct ss__emb_delta_encoder {
    bool (*fn)(void *ctx, float *d, size_t dim, uint8_t *out);
    void *ctx;
    size_t row_bytes;
} ss__emb_delta_encoder;

/* The elastic step with the delta encoded into out: the centre moves by
 * the decoded delta, the one the trainer will apply, so x + c stays
 * conserved. A delta the encoder could not hold, or one that would take
 * the centre past the float range, is sent as zeros and the centre left
 * alone: false. */
bool ss__emb_elastic_encoded(float *center, const float *x, float alpha,
                             const ss__emb_delta_encoder *enc, uint8_t *out, size_t dim);

/* Jump consistent hash (Lamping & Veach) of (table id, row id) over
 * `shards` shards: clients and servers route every row the same way, and
 * adding a shard moves only 1/S of the rows. */
uint32_t ss__emb_shard_of(uint32_t table_id, uint64_t id, uint32_t shards);

/* --- the table --- */

typedef struct ss__emb_table ss__emb_table;

/* Fills full rows (data + state) for n ids that are not resident: from
 * storage, from the shards, or their initial values. stored[] comes in
 * all true; a loader sets stored[i] = false for a row that exists nowhere
 * (its initial value, made up from the id): a lookup then returns that
 * row without keeping it, so that readers cannot grow the table; only an
 * update makes it resident. */
typedef ss_status (*ss__emb_loader)(void *ctx, const uint64_t *ids, size_t n, float *rows,
                                    bool *stored);

ss_status ss__emb_table_create(const ss__emb_spec *spec, ss__emb_loader loader, void *loader_ctx,
                               ss__emb_table **out, char *why, size_t whylen);
/* Frees every row at once (destroys the arena). */
void ss__emb_table_destroy(ss__emb_table *t);
/* For a table whose dirty rows nobody collects (ss__emb_table_collect_dirty:
 * a store without a database, a trainer's local table): updated rows are
 * still marked dirty but not queued, 8 bytes per updated row saved. Call
 * before the first update. */
void ss__emb_table_skip_dirty_queue(ss__emb_table *t);
const ss__emb_spec *ss__emb_table_spec(const ss__emb_table *t);

/* Copies the data part of each row (n * dim floats). Missing rows are
 * loaded; those the loader found stored are inserted clean, the others
 * (initial rows) are only copied out. */
ss_status ss__emb_table_lookup(ss__emb_table *t, const uint64_t *ids, size_t n, float *rows);
/* Like lookup, but only for resident rows: found[i] says which were
 * copied; nothing is loaded. */
ss_status ss__emb_table_peek(ss__emb_table *t, const uint64_t *ids, size_t n, float *rows,
                             bool *found);
/* Loads the ids that are not resident (one loader call for all of them),
 * marking every one recently used; copies nothing out. *loaded: rows the
 * table loaded meanwhile (these, and any a concurrent lookup loaded). */
ss_status ss__emb_table_load(ss__emb_table *t, const uint64_t *ids, size_t n, size_t *loaded);
/* How many of the ids are not resident (a lookup or update would load or
 * create them). */
size_t ss__emb_table_count_missing(ss__emb_table *t, const uint64_t *ids, size_t n);
/* Applies n gradients (n * dim floats) with the table's optimizer.
 * SS_ERR_NON_FINITE when some row's result would not be finite: those
 * rows are left as they were (*refused of them), the others applied. */
ss_status ss__emb_table_apply_gradients(ss__emb_table *t, const uint64_t *ids, size_t n,
                                        const float *grads, size_t *refused);
/* S-EASGD per row against rows held here as the center: deltas[i] =
 * alpha (x[i] - c[i]); c[i] += deltas[i]. SS_ERR_NON_FINITE as for
 * gradients (a refused row's delta is zeros). */
ss_status ss__emb_table_elastic(ss__emb_table *t, const uint64_t *ids, size_t n, const float *x,
                                float alpha, float *deltas, size_t *refused);
/* The same with each row's delta encoded (ss__emb_elastic_encoded) into
 * deltas (n rows of enc->row_bytes); *not_held: rows
 * whose delta the encoding could not hold (sent as zeros, left alone). */
ss_status ss__emb_table_elastic_encoded(ss__emb_table *t, const uint64_t *ids, size_t n,
                                        const float *x, float alpha,
                                        const ss__emb_delta_encoder *enc, uint8_t *deltas,
                                        size_t *not_held);
/* Full rows (data + state) as they are, for checks and checkpoints. */
ss_status ss__emb_table_read_full(ss__emb_table *t, const uint64_t *ids, size_t n, float *rows,
                                  bool *found);
/* Which ids have a resident row (found[i]), copying none. */
ss_status ss__emb_table_holds(ss__emb_table *t, const uint64_t *ids, size_t n, bool *found);

/* Dirty rows, at most max of them: ids, full-row copies and the versions
 * they were copied at. Returns how many in *n. */
typedef struct ss__emb_dirty {
    uint64_t *ids;
    float *rows; /* n * row_floats */
    uint32_t *versions;
    size_t n, cap;
} ss__emb_dirty;
ss_status ss__emb_table_collect_dirty(ss__emb_table *t, ss__emb_dirty *d, size_t max);
/* After the collected rows were written/synced: subtracts deltas (n * dim,
 * or NULL for none) from the live rows, and marks clean each row whose
 * version is still the collected one (others stay dirty). */
void ss__emb_table_settle(ss__emb_table *t, const ss__emb_dirty *d, const float *deltas);
/* The collected rows could not be written: they stay dirty and are
 * collected again next time. */
void ss__emb_table_requeue(ss__emb_table *t, const ss__emb_dirty *d);
void ss__emb_dirty_free(ss__emb_dirty *d);

/* Evicts clean rows until at most max_rows are resident; returns how many
 * were evicted. Dirty rows stay, so the table may stay above max_rows. */
size_t ss__emb_table_evict(ss__emb_table *t, size_t max_rows);

/* Resident rows (no locks taken); *bytes, when given, estimates their
 * memory: allocated row size plus hash slots. */
uint64_t ss__emb_table_resident(const ss__emb_table *t, uint64_t *bytes);

/* The bounds of a table that lives for months (online training); each is
 * off at 0.
 * - admit_count K: an id stored nowhere gets a row only on its K-th
 *   update (counted in a 2 MiB count-min sketch, admission_internal.h);
 *   before that its lookups return its initial row and its updates are
 *   counted, not applied (an elastic step answers a zero delta).
 * - ttl_s: a row not updated for this long is deleted by the next sweep.
 * - max_live_rows: past it a sweep deletes the least recently updated
 *   rows (to the resolution of the sweep's clock) until it is back at it.
 * Unlike ss__emb_table_evict (a cache's or the spill cap's: clean rows
 * leave memory and are read back), a bound deletes rows, dirty or clean:
 * the owner is told the ids so that it deletes them from its storage. */
typedef struct ss__emb_bounds {
    uint32_t admit_count;
    uint64_t ttl_s;
    uint64_t max_live_rows;
} ss__emb_bounds;

/* Sets the bounds, the clock at now_s (seconds, any origin).
 * SS_ERR_INVALID_ARGUMENT for admit_count above 65535. */
ss_status ss__emb_table_set_bounds(ss__emb_table *t, const ss__emb_bounds *b, uint64_t now_s);
/* Moves the table's clock to now_s and deletes the rows past the bounds:
 * those not updated for ttl_s, then the least recently updated beyond
 * max_live_rows; on_delete (may be NULL) gets their ids, in batches,
 * outside the table's locks. Returns how many were deleted. Call it at
 * least every ttl_s / 100 seconds (and every second with a budget): a
 * row's age is kept in 8 bits of ticks and saturates. */
typedef void (*ss__emb_on_delete)(void *ctx, const uint64_t *ids, size_t n);
size_t ss__emb_table_sweep(ss__emb_table *t, uint64_t now_s, ss__emb_on_delete on_delete,
                           void *ctx);
/* The same sweep with the budget lowered to max_live rows (>= 1), for a
 * writer that is about to create rows: the least recently updated go
 * first, counted as the budget's. 0 (nothing done) without a budget. */
size_t ss__emb_table_make_room(ss__emb_table *t, uint64_t now_s, uint64_t max_live,
                               ss__emb_on_delete on_delete, void *ctx);

/* Deltas (online export). A table tracks its changes once asked: every
 * update marks its row changed; every deletion (a bound's, or
 * ss__emb_table_delete) is kept as a tombstone until taken. */
void ss__emb_table_track_changes(ss__emb_table *t);
/* rows NULL: ids are deletions. A non-OK status stops the take. */
typedef ss_status (*ss__emb_row_sink)(void *ctx, const uint64_t *ids, const float *rows, size_t n);
/* Hands the sink the ids deleted since the last take (rows NULL), then
 * every row updated since (every resident row when all), full rows
 * (data + state), a stripe's batch at a time outside the locks, clearing
 * their marks; a row updated meanwhile is in this take or the next. On a
 * sink error what was not taken stays marked for the next take. */
ss_status ss__emb_table_take_changes(ss__emb_table *t, bool all, ss__emb_row_sink sink, void *ctx);
/* A follower applying a delta: full rows replace (or create) theirs, and
 * delete removes rows (returns how many were resident). Both count as
 * updates of the row for the owner (dirty, changed). */
ss_status ss__emb_table_put_full(ss__emb_table *t, const uint64_t *ids, size_t n,
                                 const float *rows);
size_t ss__emb_table_delete(ss__emb_table *t, const uint64_t *ids, size_t n);
/* Up to max ids of resident rows for which keep(ctx, id) (rows moving to
 * another shard), into ids; returns how many. keep runs under a stripe's
 * lock: it must not call into the table. With pos, the walk starts where
 * the last one that filled ids stopped and wraps around (so a batch does
 * not walk again the rows that stay); fewer than max means no row of the
 * whole table was left unmatched. pos NULL: from the start. */
typedef bool (*ss__emb_id_filter)(void *ctx, uint64_t id);
typedef struct ss__emb_scan_pos {
    unsigned stripe;
    size_t slot;
} ss__emb_scan_pos;
size_t ss__emb_table_find_ids(ss__emb_table *t, ss__emb_id_filter keep, void *ctx, size_t max,
                              uint64_t *ids, ss__emb_scan_pos *pos);

typedef struct ss__emb_table_stats {
    uint64_t resident_rows, dirty_rows;
    uint64_t row_bytes;   /* bytes of resident rows in their slabs (row stride included) */
    uint64_t arena_bytes; /* jemalloc's count for the table's arena (0 if unknown) */
    uint64_t index_bytes; /* hash slots and the dirty rows' queue */
    uint64_t loads, evictions;
    /* bounds: new ids admitted / updates of ids not admitted (yet);
     * rows deleted by expiry / by the row budget */
    uint64_t admitted, not_admitted, expired, dropped;
} ss__emb_table_stats;
void ss__emb_table_get_stats(ss__emb_table *t, ss__emb_table_stats *out);

#endif
