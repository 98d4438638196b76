/* Offline resharding (shadowsync-ctl reshard): the stores of N stopped
 * PS shards into M.
 *
 * Embedding rows (with their optimizer state) go to the shard trainers
 * route them to: jump hash of (table, id) over M (ss__emb_shard_of).
 * Dense groups, which a trainer cuts into one contiguous range per shard
 * and each range into chunks of chunk_floats ("name[lo:hi)"), are put
 * back together from every input's dense.ckpt (centre, last round's
 * result, S-BMUF state) and cut again for M shards. Every row and float is
 * copied as it is, so N -> M -> N gives the same stores bit for bit.
 *
 * Checked before anything is written: every input store opens (one in
 * use by a running PS is refused: RocksDB's lock), a table has the same
 * spec on every input, every dense group's chunks cover it once, the
 * outputs do not exist yet. Checked after: every output's rows are on
 * their shard, and the row count and an order-free checksum of every
 * table are the inputs'. */
#ifndef SS_TOOLS_RESHARD_H
#define SS_TOOLS_RESHARD_H

#include <stddef.h>
#include <stdint.h>

#include "shadowsync/status.h"

#define SS_RESHARD_MAX_SHARDS 256

typedef struct ss__reshard_config {
    /* Embedding stores (--emb-db directories): n_in inputs, n_out outputs;
     * 0 and 0: no embeddings. */
    const char *const *in_db, *const *out_db;
    /* Dense checkpoints (--checkpoint-dir directories, dense.ckpt inside);
     * 0 and 0: no dense groups. */
    const char *const *in_ckpt, *const *out_ckpt;
    size_t n_in_db, n_out_db, n_in_ckpt, n_out_ckpt;
    size_t chunk_floats; /* the trainers' chunk_floats (0: 131072) */
} ss__reshard_config;

typedef struct ss__reshard_report {
    size_t tables, groups;
    uint64_t rows, floats;
    uint64_t checksum; /* of every row, order-free */
} ss__reshard_report;

/* On a refusal or failure, why says which input or output and what. */
ss_status ss__reshard(const ss__reshard_config *cfg, ss__reshard_report *out, char *why,
                      size_t whylen);

#endif
