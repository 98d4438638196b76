/* The parameter server's embedding store: named tables (emb_table.h) on
 * top of RocksDB, with the request checks every caller gets.
 *
 * Persistence. Key = table id (4 bytes) + row id (8 bytes), both
 * big-endian so a scan walks a table in id order; value = the full row
 * (data + optimizer state) as little-endian float32. Two modes:
 *  - write-behind (default): an update is acknowledged once applied in
 *    memory; a flusher thread writes dirty rows to RocksDB (WAL on, no
 *    fsync) every flush_lag_ms / 2. When the flusher falls behind (the
 *    oldest update that may be unwritten is older than flush_lag_ms: a
 *    slow disk, a burst of new rows), an update waits until the backlog,
 *    its own rows included, is written before it is acknowledged
 *    (shadowsync_emb_write_waits_total counts these). So an acknowledged
 *    update reaches the database within flush_lag_ms plus the time to
 *    write about one lag's worth of updates, under any load. A killed
 *    process (SIGKILL) loses at most those; a machine crash can also lose
 *    what the OS had not written (no fsync).
 *  - sync_writes: an update is acknowledged only after its rows were
 *    written with fsync, so every acknowledged update survives a kill or a
 *    crash.
 * Start-up restores from the database: tables are re-created from their
 * stored specs, rows are read back on first use.
 *
 * Memory cap: when resident rows pass mem_cap_bytes, clean rows (already
 * in RocksDB, or never updated) are evicted and read back on the next
 * lookup; a table larger than memory still works. Without a database
 * only never-updated rows can be evicted (they re-initialize identically).
 *
 * Checkpoints: every dirty row is written, then RocksDB's checkpoint API
 * makes a consistent copy of the database in a new directory (hard links
 * where it can); a checkpoint directory opens as a database. */
#ifndef SHADOWSYNC_EMB_STORE_H
#define SHADOWSYNC_EMB_STORE_H

#include "common/metrics.h"
#include "embedding-store/emb_table.h"

typedef struct ss__emb_store ss__emb_store;

#define SS_EMB_DEFAULT_MAX_BATCH       65536
#define SS_EMB_DEFAULT_MAX_REPLY_BYTES (64u << 20)
/* One limit on tables: the default and the largest --max-tables are the
 * same as the store's own array, so a table the limit admits is always
 * one a restart can load (the spec is persisted only after the check). */
#define SS_EMB_MAX_TABLES         1024
#define SS_EMB_DEFAULT_MAX_TABLES SS_EMB_MAX_TABLES

typedef struct ss__emb_store_config {
    const char *db_path;         /* RocksDB directory; NULL or "" = memory only */
    bool sync_writes;            /* acknowledge only after an fsync'd write */
    uint32_t flush_lag_ms;       /* write-behind bound (>= 2); 0 = 200 */
    uint64_t mem_cap_bytes;      /* resident rows + index; 0 = no cap */
    size_t max_batch;            /* ids per request; 0 = SS_EMB_DEFAULT_MAX_BATCH */
    ss__metrics *metrics;        /* optional: shadowsync_emb_* series */
    size_t max_reply_bytes;      /* rows of one request (n * dim * 4); 0 = 64 MiB */
    size_t max_tables;           /* 1..SS_EMB_MAX_TABLES; 0 = SS_EMB_DEFAULT_MAX_TABLES */
    const char *checkpoint_root; /* checkpoints go here, by name; NULL or "" = none */
    uint32_t checkpoint_keep;    /* newest checkpoints kept under the root; 0 = all */
    /* Rows in memory, all tables: past it clean rows are evicted, and a
     * request that could create rows is refused (too_many_rows) when none
     * can go. 0 = no limit. */
    uint64_t max_rows;
    /* Every table's bounds (emb_table.h: admission, expiry, row budget),
     * swept by the flusher once a second; rows they delete are deleted
     * from RocksDB too. At start-up every stored row is read into memory:
     * a bounded table is held whole, so mem_cap_bytes (which spills clean
     * rows to RocksDB instead of forgetting them) is refused with bounds,
     * and max_rows only refuses requests that would pass it. */
    ss__emb_bounds bounds;
} ss__emb_store_config;

/* Opens (creating) the database and the tables stored in it. */
ss_status ss__emb_store_create(const ss__emb_store_config *cfg, ss__emb_store **out, char *why,
                               size_t whylen);
/* Stops the flusher after a last flush, closes the database. */
void ss__emb_store_destroy(ss__emb_store *st);

/* Every call below writes a one-line reason into why (may be NULL) when it
 * refuses, counts the refusal in shadowsync_emb_rejected_total{reason},
 * and changes no stored row. */

/* Creates a table or, when it exists, checks that spec matches it
 * (SS_ERR_SIZE_MISMATCH for another dim, SS_ERR_EXISTS for another
 * optimizer/lr/eps/init). *stored gets the table's spec. */
ss_status ss__emb_store_open_table(ss__emb_store *st, const ss__emb_spec *spec,
                                   ss__emb_spec *stored, char *why, size_t whylen);
ss_status ss__emb_store_table_spec(ss__emb_store *st, const char *table, ss__emb_spec *out);

/* ids: n distinct row ids, 1 <= n <= max_batch. rows: n * dim floats. */
ss_status ss__emb_store_lookup(ss__emb_store *st, const char *table, const uint64_t *ids, size_t n,
                               float *rows, char *why, size_t whylen);
/* A push of pn rows (push_ids, grads as ss__emb_store_push) and then a
 * lookup of n rows (ids, rows as ss__emb_store_lookup), both checked
 * before anything is applied. Either part may be empty (pn or n 0), not
 * both. */
ss_status ss__emb_store_push_lookup(ss__emb_store *st, const char *table, const uint64_t *push_ids,
                                    size_t pn, const float *grads, const uint64_t *ids, size_t n,
                                    float *rows, char *why, size_t whylen);
/* grads: n * dim finite floats; the table's optimizer is applied. */
ss_status ss__emb_store_push(ss__emb_store *st, const char *table, const uint64_t *ids, size_t n,
                             const float *grads, char *why, size_t whylen);
/* x: n * dim finite floats; 0 < alpha <= 1; deltas: n * dim out. */
ss_status ss__emb_store_elastic(ss__emb_store *st, const char *table, const uint64_t *ids, size_t n,
                                const float *x, float alpha, float *deltas, char *why,
                                size_t whylen);
/* The same with the deltas encoded row by row (ss__emb_delta_encoder):
 * deltas: n * enc->row_bytes out; each centre row moves by its decoded
 * delta. */
ss_status ss__emb_store_elastic_encoded(ss__emb_store *st, const char *table, const uint64_t *ids,
                                        size_t n, const float *x, float alpha,
                                        const ss__emb_delta_encoder *enc, uint8_t *deltas,
                                        char *why, size_t whylen);
/* Rows as stored (data + state), without loading or counting; found[i]
 * false when the row is neither resident nor in the database. */
ss_status ss__emb_store_read_full(ss__emb_store *st, const char *table, const uint64_t *ids,
                                  size_t n, float *rows, bool *found);

/* Counts a request refused before it reached the store (e.g. a payload
 * of the wrong length, found by the service) and returns status. */
ss_status ss__emb_store_refuse(ss__emb_store *st, ss_status status, const char *reason);
size_t ss__emb_store_max_batch(const ss__emb_store *st);

/* Writes every dirty row now (fsync'd). */
ss_status ss__emb_store_flush(ss__emb_store *st);
/* Flushes, then writes a RocksDB checkpoint into checkpoint_root/name
 * (name follows the name rule and is new; "" = one made of the time), its
 * path into path, then removes the oldest beyond checkpoint_keep.
 * SS_ERR_STATE without a database or a checkpoint root. */
ss_status ss__emb_store_checkpoint(ss__emb_store *st, const char *name, char *path, size_t pathlen,
                                   char *why, size_t whylen);

/* A table spec as stored in RocksDB, from its key's name part and its
 * value (emb_db.c; public to the fuzz target): SS_ERR_PARSE unless it is a
 * whole, valid spec. */
ss_status ss__emb_db_decode_spec(const char *name, size_t nlen, const char *value, size_t vlen,
                                 ss__emb_spec *out);

/* ---- deltas (store_deltas.c, delta_file.h) ---- */
typedef struct ss__emb_delta_info ss__emb_delta_info;
typedef struct ss__emb_delta_file ss__emb_delta_file;
/* From now on every table (and every table made later) tracks its
 * updated rows and deletions for deltas. */
void ss__emb_store_track_changes(ss__emb_store *st);
/* Writes a delta (every row updated and every id deleted since the last
 * one) or a base (every row, spilled ones too) of every table to a new
 * file at path; *out (may be NULL) says what it holds. SS_ERR_STATE
 * unless tracking; SS_ERR_IO when the file cannot be made or written (it
 * is removed; what was taken is lost to deltas: write a base next). */
ss_status ss__emb_store_write_delta(ss__emb_store *st, const char *path, uint64_t seq, bool base,
                                    ss__emb_delta_info *out);
/* Applies a checked delta file: tables made as needed; a base first
 * empties each table it holds. SS_ERR_SIZE_MISMATCH: a table of that name
 * with another dim or optimizer. */
ss_status ss__emb_store_apply_delta(ss__emb_store *st, const ss__emb_delta_file *f);
/* Whether ss__emb_store_apply_delta would take f (every table of it fits
 * the one of that name held here), changing nothing. */
ss_status ss__emb_store_check_delta(ss__emb_store *st, const ss__emb_delta_file *f);
/* A follower: requests create no table (OpenTable of a missing table is
 * SS_ERR_STATE, saying why). */
void ss__emb_store_set_read_only(ss__emb_store *st);

/* ---- rows moving between shards (store_moves.c; ps/row_moves.h) ---- */
/* Takes rows out of a table for the move of map epoch `epoch` (>= 1):
 * the ids given (n <= max; those stored), or, ids NULL, up to max rows
 * for which leaves(ctx, id), resident or only in the database. Each taken
 * row is copied whole (data + optimizer state) to out_ids / out_rows
 * (room for max rows) and removed from memory (a tombstone for deltas);
 * in the database it leaves the table for a "given" space in the same
 * write, where it stays until ss__emb_store_forget: never read as a row
 * here again (the row may come back here later, from its newer owner),
 * but given again, in this epoch, to a taker that died before it held it:
 * asked for by id, or with again (a walk: the taker starts over). Given
 * rows of older epochs met on that walk are deleted. *taken: how many. */
ss_status ss__emb_store_take(ss__emb_store *st, const char *table, uint64_t epoch,
                             const uint64_t *ids, size_t n, bool again, ss__emb_id_filter leaves,
                             void *ctx, size_t max, uint64_t *out_ids, float *out_rows,
                             size_t *taken);
/* The taker holds these rows (given in epoch) now: out of the database. */
ss_status ss__emb_store_forget(ss__emb_store *st, const char *table, uint64_t epoch,
                               const uint64_t *ids, size_t n);
/* found[i]: whether the row is stored here (memory or database). */
ss_status ss__emb_store_holds(ss__emb_store *st, const char *table, const uint64_t *ids, size_t n,
                              bool *found);
/* found[i]: whether a copy of the row is written: in the database (a
 * newer one may be in memory), or, without one, in memory. What a taker
 * says when its giver asks whether it may forget a row. */
ss_status ss__emb_store_holds_written(ss__emb_store *st, const char *table, const uint64_t *ids,
                                      size_t n, bool *found);
/* Rows taken from another shard (full rows): each put unless this store
 * holds its id already (sync: written to the database, synced, before
 * this returns; else by the flusher, see ss__emb_store_durable_before);
 * *put: how many were. SS_ERR_NON_FINITE (nothing put) when a value is
 * not finite. */
ss_status ss__emb_store_put_absent(ss__emb_store *st, const char *table, const uint64_t *ids,
                                   size_t n, const float *rows, bool sync, size_t *put);
/* Every update applied before this time (ss__now_ns's clock) is in the
 * database, as durable as the store's writes are (UINT64_MAX without a
 * database: nothing more will be). */
uint64_t ss__emb_store_durable_before(ss__emb_store *st);
/* The specs of the tables, up to max; returns how many. */
size_t ss__emb_store_tables(ss__emb_store *st, ss__emb_spec *out, size_t max);

typedef struct ss__emb_store_stats {
    ss__emb_table_stats table;
    uint64_t lookups, pushes, elastic; /* rows served */
    uint64_t flushed_rows, flushes;
} ss__emb_store_stats;
ss_status ss__emb_store_stats_of(ss__emb_store *st, const char *table, ss__emb_store_stats *out);

#endif
