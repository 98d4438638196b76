/* RocksDB under the store (private to embedding-store/). Row keys are
 * table id + row id, big-endian; spec keys are 0xFFFFFFFF + "spec:" +
 * table name. Values are little-endian float32 rows. */
#ifndef SS_EMB_DB_H
#define SS_EMB_DB_H

#include <stdbool.h>

#include "embedding-store/emb_table.h"

typedef struct ss__emb_db ss__emb_db;

ss_status ss__emb_db_open(const char *path, ss__emb_db **out, char *why, size_t whylen);
void ss__emb_db_close(ss__emb_db *db);

/* found[i] false (row untouched) when id is not stored. A stored value of
 * the wrong length is SS_ERR_PARSE. */
ss_status ss__emb_db_get_rows(ss__emb_db *db, uint32_t table_id, const uint64_t *ids, size_t n,
                              size_t row_floats, float *rows, bool *found);
ss_status ss__emb_db_put_rows(ss__emb_db *db, uint32_t table_id, const uint64_t *ids, size_t n,
                              size_t row_floats, const float *rows, bool sync);
/* Deletes the rows (ids not stored: nothing to do). */
ss_status ss__emb_db_delete_rows(ss__emb_db *db, uint32_t table_id, const uint64_t *ids, size_t n,
                                 bool sync);
/* Every stored row of a table, in id order, to fn in batches of at most
 * batch rows (ids, rows of row_floats). SS_ERR_PARSE for a row of the
 * wrong length; fn's non-OK status stops the walk and is returned. */
ss_status ss__emb_db_each_row(ss__emb_db *db, uint32_t table_id, size_t row_floats, size_t batch,
                              ss_status (*fn)(void *ctx, const uint64_t *ids, const float *rows,
                                              size_t n),
                              void *ctx);
/* The same, from id `from` to the table's end, then from its start up to
 * `from` (every row once, a walk that goes on where an earlier one
 * stopped). */
ss_status ss__emb_db_each_row_from(
    ss__emb_db *db, uint32_t table_id, size_t row_floats, size_t batch, uint64_t from,
    ss_status (*fn)(void *ctx, const uint64_t *ids, const float *rows, size_t n), void *ctx);
/* Rows given to another shard in the move of a map's epoch (>= 1): in
 * one write, each row is stored under a key of its own (never read as a
 * row of the table, nor walked by ss__emb_db_each_row) and its row key
 * deleted; kept until forgotten (the taker holds them). */
ss_status ss__emb_db_give_rows(ss__emb_db *db, uint32_t table_id, uint64_t epoch,
                               const uint64_t *ids, size_t n, size_t row_floats, const float *rows);
ss_status ss__emb_db_get_given(ss__emb_db *db, uint32_t table_id, uint64_t epoch,
                               const uint64_t *ids, size_t n, size_t row_floats, float *rows,
                               bool *found);
ss_status ss__emb_db_forget_given(ss__emb_db *db, uint32_t table_id, uint64_t epoch,
                                  const uint64_t *ids, size_t n);
/* Every given row of a table, any epoch, one at a time; fn's non-OK
 * status stops the walk and is returned. */
ss_status ss__emb_db_each_given(ss__emb_db *db, uint32_t table_id, size_t row_floats,
                                ss_status (*fn)(void *ctx, uint64_t id, uint64_t epoch,
                                                const float *row),
                                void *ctx);
ss_status ss__emb_db_put_spec(ss__emb_db *db, const ss__emb_spec *spec);
ss_status ss__emb_db_each_spec(ss__emb_db *db, ss_status (*fn)(void *ctx, const ss__emb_spec *spec),
                               void *ctx);
ss_status ss__emb_db_checkpoint(ss__emb_db *db, const char *dir, char *why, size_t whylen);

#endif
