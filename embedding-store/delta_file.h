/* The embedding part of a delta or base file, as the PS writes it every
 * --delta-every-s and a follower (or the Python reader) applies it.
 *
 * Layout (little-endian; a delta moves between machines of one kind):
 *   "SSEMBD01", u64 seq, u8 base, u64 written (unix ms),
 *   then records, each one byte of kind and its body:
 *     'S' a table:   u32 name length, name, u32 dim, u32 optimizer,
 *                    f32 lr, f32 eps, f32 init_scale
 *     'D' deletions: u32 n, n x u64 id            (of the last 'S' table)
 *     'R' rows:      u32 n, n x u64 id, n x row_floats x f32 (data + state)
 *     'Z' the end,
 *   then a u32 CRC-32 (zlib's, Python's zlib.crc32) of every byte before it.
 * A base holds every row; a delta the rows updated since the delta before
 * it and the ids deleted since. Applying a table's records in order gives
 * its state at the delta: deletions come before rows (a row deleted and
 * made again is both). A file is checked whole (checksum, every record,
 * every spec, every value finite) before anything is applied. */
#ifndef SS_EMB_DELTA_FILE_H
#define SS_EMB_DELTA_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "embedding-store/emb_table.h"

typedef struct ss__emb_delta_writer ss__emb_delta_writer;

/* A new file at path (O_EXCL | O_NOFOLLOW, 0600: never through a planted
 * link; the caller publishes it). SS_ERR_IO with errno when it cannot be
 * made. */
ss_status ss__emb_delta_begin(const char *path, uint64_t seq, bool base, uint64_t written_ms,
                              ss__emb_delta_writer **out);
void ss__emb_delta_table(ss__emb_delta_writer *w, const ss__emb_spec *spec);
/* rows NULL: deletions. A sink for ss__emb_table_take_changes (ctx: w). */
ss_status ss__emb_delta_put(void *w, const uint64_t *ids, const float *rows, size_t n);
/* Seals (end record, checksum), fsyncs and closes: SS_ERR_IO when a write
 * failed (the file is then removed). Frees w either way. */
ss_status ss__emb_delta_commit(ss__emb_delta_writer *w);
/* Gives up: closes and removes the file. */
void ss__emb_delta_abort(ss__emb_delta_writer *w);

typedef struct ss__emb_delta_file ss__emb_delta_file;

typedef struct ss__emb_delta_info {
    uint64_t seq, written_ms;
    bool base;
    uint64_t tables, rows, deletions;
} ss__emb_delta_info;

/* What a writer has put so far (seq, base, tables, rows, deletions). */
void ss__emb_delta_written(const ss__emb_delta_writer *w, ss__emb_delta_info *out);

/* Reads and checks the whole file. SS_ERR_NOT_FOUND: no such file;
 * SS_ERR_PARSE: torn, truncated or corrupted, with why. */
ss_status ss__emb_delta_read(const char *path, ss__emb_delta_file **out, char *why, size_t whylen);
/* The same from a malloc'd buffer, which it takes (freed on failure);
 * check_hash false skips the checksum (the fuzz target's way past it). */
ss_status ss__emb_delta_parse(unsigned char *buf, size_t len, bool check_hash,
                              ss__emb_delta_file **out, char *why, size_t whylen);
void ss__emb_delta_info_of(const ss__emb_delta_file *f, ss__emb_delta_info *out);

/* Walks the records in order: table(ctx, spec) for each 'S', then rows(ctx,
 * ids, rows, n) for its 'D' (rows NULL) and 'R' records, copied out
 * aligned. A non-OK status stops it. */
typedef struct ss__emb_delta_visitor {
    ss_status (*table)(void *ctx, const ss__emb_spec *spec);
    ss_status (*rows)(void *ctx, const uint64_t *ids, const float *rows, size_t n);
    void *ctx;
} ss__emb_delta_visitor;
ss_status ss__emb_delta_walk(const ss__emb_delta_file *f, const ss__emb_delta_visitor *v);
void ss__emb_delta_close(ss__emb_delta_file *f);

#endif
