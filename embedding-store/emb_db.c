/* RocksDB (C API) for the store: row batches, specs, checkpoints. */
#include <rocksdb/c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedding-store/emb_db_internal.h"
#include "embedding-store/emb_store.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "rows are stored as little-endian float32; add byte swapping for this target"
#endif

#define KEY_LEN 12
/* A row given to another shard while the map moves rows, kept until the
 * taker holds it: the row's key, then the epoch of the move. Never read
 * as a row of the table. */
#define GIVEN_KEY_LEN 20
#define SPEC_MAGIC    "SSPEC1"
#define RESERVED_ID   0xFFFFFFFFu
#define SPEC_PREFIX   "\xff\xff\xff\xffspec:"
#define SPEC_PREFIX_N 9

struct ss__emb_db {
    rocksdb_t *db;
    rocksdb_options_t *opts;
    rocksdb_block_based_table_options_t *table_opts;
    rocksdb_readoptions_t *ropts;
    rocksdb_writeoptions_t *wopts, *wopts_sync;
};

static void put_be32(unsigned char *p, uint32_t v) {
    for (int i = 3; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}

static void put_be64(unsigned char *p, uint64_t v) {
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}

static void row_key(unsigned char *k, uint32_t table_id, uint64_t id) {
    put_be32(k, table_id);
    put_be64(k + 4, id);
}

static void given_key(unsigned char *k, uint32_t table_id, uint64_t id, uint64_t epoch) {
    row_key(k, table_id, id);
    put_be64(k + KEY_LEN, epoch);
}

/* RocksDB's memtable (64 MiB by default): a PS restarted after a SIGKILL
 * replays the log of what is in it before it serves, and a burst of row
 * moves fills it fast (17 MB of rows: 0.9 s before a restart could serve,
 * on a quiet machine). 4 MiB bounds that to a tenth of a second; the
 * rows' own writes were no slower in the same measure (emu-emb, sync
 * writes). */
#define MEMTABLE_BYTES (4u << 20)

static void set_why(char *why, size_t whylen, const char *what, const char *err) {
    if (why && whylen)
        snprintf(why, whylen, "%s: %s", what, err ? err : "unknown RocksDB error");
}

ss_status ss__emb_db_open(const char *path, ss__emb_db **out, char *why, size_t whylen) {
    ss__emb_db *db = calloc(1, sizeof *db);
    if (!db)
        return SS_ERR_NO_MEMORY;
    db->opts = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(db->opts, 1);
    rocksdb_options_increase_parallelism(db->opts, 2);
    rocksdb_options_set_write_buffer_size(db->opts, MEMTABLE_BYTES);
    db->table_opts = rocksdb_block_based_options_create();
    /* Lookups of rows never written are common (first touch): a bloom
     * filter answers most of them without reading a block. */
    rocksdb_block_based_options_set_filter_policy(db->table_opts,
                                                  rocksdb_filterpolicy_create_bloom(10));
    rocksdb_options_set_block_based_table_factory(db->opts, db->table_opts);
    char *err = NULL;
    db->db = rocksdb_open(db->opts, path, &err);
    if (err) {
        set_why(why, whylen, path, err);
        rocksdb_free(err);
        rocksdb_options_destroy(db->opts);
        rocksdb_block_based_options_destroy(db->table_opts);
        free(db);
        return SS_ERR_IO;
    }
    db->ropts = rocksdb_readoptions_create();
    db->wopts = rocksdb_writeoptions_create();
    db->wopts_sync = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(db->wopts_sync, 1);
    *out = db;
    return SS_OK;
}

void ss__emb_db_close(ss__emb_db *db) {
    if (!db)
        return;
    rocksdb_close(db->db);
    rocksdb_readoptions_destroy(db->ropts);
    rocksdb_writeoptions_destroy(db->wopts);
    rocksdb_writeoptions_destroy(db->wopts_sync);
    rocksdb_options_destroy(db->opts);
    rocksdb_block_based_options_destroy(db->table_opts);
    free(db);
}

/* Rows by key: the table's (epoch 0) or those given away in a move. */
static ss_status get_by_key(ss__emb_db *db, uint32_t table_id, uint64_t epoch, const uint64_t *ids,
                            size_t n, size_t row_floats, float *rows, bool *found) {
    if (n == 0)
        return SS_OK;
    const size_t KL = epoch ? GIVEN_KEY_LEN : KEY_LEN;
    unsigned char *keys = malloc(n * KL);
    const char **kp = malloc(n * sizeof *kp);
    size_t *klen = malloc(n * sizeof *klen);
    char **vals = malloc(n * sizeof *vals);
    size_t *vlen = malloc(n * sizeof *vlen);
    char **errs = malloc(n * sizeof *errs);
    ss_status st = (keys && kp && klen && vals && vlen && errs) ? SS_OK : SS_ERR_NO_MEMORY;
    if (st == SS_OK) {
        for (size_t i = 0; i < n; i++) {
            if (epoch)
                given_key(keys + i * KL, table_id, ids[i], epoch);
            else
                row_key(keys + i * KL, table_id, ids[i]);
            kp[i] = (const char *)keys + i * KL;
            klen[i] = KL;
        }
        rocksdb_multi_get(db->db, db->ropts, n, kp, klen, vals, vlen, errs);
        const size_t want = row_floats * sizeof(float);
        for (size_t i = 0; i < n; i++) {
            found[i] = false;
            if (errs[i]) {
                st = SS_ERR_IO;
                rocksdb_free(errs[i]);
            } else if (vals[i]) {
                if (vlen[i] != want)
                    st = SS_ERR_PARSE;
                else {
                    memcpy(rows + i * row_floats, vals[i], want);
                    found[i] = true;
                }
            }
            if (vals[i])
                rocksdb_free(vals[i]);
        }
    }
    free(keys);
    free(kp);
    free(klen);
    free(vals);
    free(vlen);
    free(errs);
    return st;
}

ss_status ss__emb_db_get_rows(ss__emb_db *db, uint32_t table_id, const uint64_t *ids, size_t n,
                              size_t row_floats, float *rows, bool *found) {
    return get_by_key(db, table_id, 0, ids, n, row_floats, rows, found);
}

ss_status ss__emb_db_get_given(ss__emb_db *db, uint32_t table_id, uint64_t epoch,
                               const uint64_t *ids, size_t n, size_t row_floats, float *rows,
                               bool *found) {
    return get_by_key(db, table_id, epoch, ids, n, row_floats, rows, found);
}

/* Writes and destroys wb. */
static ss_status write_batch(ss__emb_db *db, rocksdb_writebatch_t *wb, bool sync) {
    char *err = NULL;
    rocksdb_write(db->db, sync ? db->wopts_sync : db->wopts, wb, &err);
    rocksdb_writebatch_destroy(wb);
    if (err) {
        rocksdb_free(err);
        return SS_ERR_IO;
    }
    return SS_OK;
}

ss_status ss__emb_db_put_rows(ss__emb_db *db, uint32_t table_id, const uint64_t *ids, size_t n,
                              size_t row_floats, const float *rows, bool sync) {
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    unsigned char key[KEY_LEN];
    for (size_t i = 0; i < n; i++) {
        row_key(key, table_id, ids[i]);
        rocksdb_writebatch_put(wb, (const char *)key, KEY_LEN,
                               (const char *)(rows + i * row_floats), row_floats * sizeof(float));
    }
    return write_batch(db, wb, sync);
}

ss_status ss__emb_db_delete_rows(ss__emb_db *db, uint32_t table_id, const uint64_t *ids, size_t n,
                                 bool sync) {
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    unsigned char key[KEY_LEN];
    for (size_t i = 0; i < n; i++) {
        row_key(key, table_id, ids[i]);
        rocksdb_writebatch_delete(wb, (const char *)key, KEY_LEN);
    }
    return write_batch(db, wb, sync);
}

ss_status ss__emb_db_give_rows(ss__emb_db *db, uint32_t table_id, uint64_t epoch,
                               const uint64_t *ids, size_t n, size_t row_floats,
                               const float *rows) {
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    unsigned char key[GIVEN_KEY_LEN];
    for (size_t i = 0; i < n; i++) {
        given_key(key, table_id, ids[i], epoch);
        rocksdb_writebatch_put(wb, (const char *)key, GIVEN_KEY_LEN,
                               (const char *)(rows + i * row_floats), row_floats * sizeof(float));
        rocksdb_writebatch_delete(wb, (const char *)key, KEY_LEN); /* the row's own key */
    }
    return write_batch(db, wb, false);
}

ss_status ss__emb_db_forget_given(ss__emb_db *db, uint32_t table_id, uint64_t epoch,
                                  const uint64_t *ids, size_t n) {
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    unsigned char key[GIVEN_KEY_LEN];
    for (size_t i = 0; i < n; i++) {
        given_key(key, table_id, ids[i], epoch);
        rocksdb_writebatch_delete(wb, (const char *)key, GIVEN_KEY_LEN);
    }
    return write_batch(db, wb, false);
}

static uint64_t get_be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

/* Every key of a table of length key_len, in key order, to fn (its row
 * id, the key, the value); fn's non-OK status stops the walk. */
typedef ss_status (*key_fn)(void *ctx, const unsigned char *key, const char *value, size_t vlen);

/* The keys of ids [from, to) only (to 0: to the table's end). */
static ss_status walk_range(ss__emb_db *db, uint32_t table_id, size_t key_len, uint64_t from,
                            uint64_t to, key_fn fn, void *ctx) {
    rocksdb_iterator_t *it = rocksdb_create_iterator(db->db, db->ropts);
    if (!it)
        return SS_ERR_NO_MEMORY;
    unsigned char start[KEY_LEN];
    row_key(start, table_id, from);
    ss_status st = SS_OK;
    rocksdb_iter_seek(it, (const char *)start, sizeof start); /* id 0: the table's first key */
    for (; st == SS_OK && rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t klen, vlen;
        const char *k = rocksdb_iter_key(it, &klen), *v = rocksdb_iter_value(it, &vlen);
        if (klen < 4 || memcmp(k, start, 4) != 0)
            break; /* past the table */
        if (to && klen >= KEY_LEN && get_be64((const unsigned char *)k + 4) >= to)
            break;
        if (klen == key_len) /* rows (KEY_LEN) and given rows (GIVEN_KEY_LEN) interleave */
            st = fn(ctx, (const unsigned char *)k, v, vlen);
    }
    rocksdb_iter_destroy(it);
    return st;
}

static ss_status walk_table(ss__emb_db *db, uint32_t table_id, size_t key_len, key_fn fn,
                            void *ctx) {
    return walk_range(db, table_id, key_len, 0, 0, fn, ctx);
}

typedef struct row_walk {
    ss_status (*fn)(void *ctx, const uint64_t *ids, const float *rows, size_t n);
    void *ctx;
    uint64_t *ids;
    float *rows;
    size_t row_floats, batch, n;
} row_walk;

static ss_status batch_row(void *arg, const unsigned char *key, const char *v, size_t vlen) {
    row_walk *w = arg;
    if (vlen != w->row_floats * sizeof(float))
        return SS_ERR_PARSE;
    w->ids[w->n] = get_be64(key + 4);
    memcpy(w->rows + w->n * w->row_floats, v, vlen);
    if (++w->n < w->batch)
        return SS_OK;
    w->n = 0;
    return w->fn(w->ctx, w->ids, w->rows, w->batch);
}

ss_status ss__emb_db_each_row(ss__emb_db *db, uint32_t table_id, size_t row_floats, size_t batch,
                              ss_status (*fn)(void *ctx, const uint64_t *ids, const float *rows,
                                              size_t n),
                              void *ctx) {
    return ss__emb_db_each_row_from(db, table_id, row_floats, batch, 0, fn, ctx);
}

ss_status ss__emb_db_each_row_from(
    ss__emb_db *db, uint32_t table_id, size_t row_floats, size_t batch, uint64_t from,
    ss_status (*fn)(void *ctx, const uint64_t *ids, const float *rows, size_t n), void *ctx) {
    row_walk w = {fn,
                  ctx,
                  malloc(batch * sizeof *w.ids),
                  malloc(batch * row_floats * sizeof *w.rows),
                  row_floats,
                  batch,
                  0};
    ss_status st = w.ids && w.rows ? walk_range(db, table_id, KEY_LEN, from, 0, batch_row, &w)
                                   : SS_ERR_NO_MEMORY;
    if (st == SS_OK && from) /* then from the start, up to where the walk began */
        st = walk_range(db, table_id, KEY_LEN, 0, from, batch_row, &w);
    if (st == SS_OK && w.n)
        st = fn(ctx, w.ids, w.rows, w.n);
    free(w.ids);
    free(w.rows);
    return st;
}

typedef struct given_walk {
    ss_status (*fn)(void *ctx, uint64_t id, uint64_t epoch, const float *row);
    void *ctx;
    float *row;
    size_t row_floats;
} given_walk;

static ss_status one_given(void *arg, const unsigned char *key, const char *v, size_t vlen) {
    given_walk *w = arg;
    if (vlen != w->row_floats * sizeof(float))
        return SS_ERR_PARSE;
    memcpy(w->row, v, vlen);
    return w->fn(w->ctx, get_be64(key + 4), get_be64(key + KEY_LEN), w->row);
}

ss_status ss__emb_db_each_given(ss__emb_db *db, uint32_t table_id, size_t row_floats,
                                ss_status (*fn)(void *ctx, uint64_t id, uint64_t epoch,
                                                const float *row),
                                void *ctx) {
    given_walk w = {fn, ctx, malloc(row_floats * sizeof *w.row + 1), row_floats};
    ss_status st =
        w.row ? walk_table(db, table_id, GIVEN_KEY_LEN, one_given, &w) : SS_ERR_NO_MEMORY;
    free(w.row);
    return st;
}

typedef struct spec_record {
    char magic[6];
    uint32_t dim, optimizer;
    float lr, eps, init_scale;
} __attribute__((packed)) spec_record;

ss_status ss__emb_db_put_spec(ss__emb_db *db, const ss__emb_spec *spec) {
    char key[SPEC_PREFIX_N + SS_EMB_NAME_MAX];
    size_t nlen = strlen(spec->name);
    memcpy(key, SPEC_PREFIX, SPEC_PREFIX_N);
    memcpy(key + SPEC_PREFIX_N, spec->name, nlen);
    spec_record r = {.dim = spec->dim,
                     .optimizer = (uint32_t)spec->optimizer,
                     .lr = spec->lr,
                     .eps = spec->eps,
                     .init_scale = spec->init_scale};
    memcpy(r.magic, SPEC_MAGIC, sizeof r.magic);
    char *err = NULL;
    rocksdb_put(db->db, db->wopts_sync, key, SPEC_PREFIX_N + nlen, (const char *)&r, sizeof r,
                &err);
    if (err) {
        rocksdb_free(err);
        return SS_ERR_IO;
    }
    return SS_OK;
}

ss_status ss__emb_db_decode_spec(const char *name, size_t nlen, const char *value, size_t vlen,
                                 ss__emb_spec *out) {
    spec_record r;
    if (vlen != sizeof r || nlen == 0 || nlen >= SS_EMB_NAME_MAX)
        return SS_ERR_PARSE;
    memcpy(&r, value, sizeof r);
    if (memcmp(r.magic, SPEC_MAGIC, sizeof r.magic) != 0)
        return SS_ERR_PARSE;
    ss__emb_spec spec = {.dim = r.dim,
                         .optimizer = (ss__emb_optimizer)r.optimizer,
                         .lr = r.lr,
                         .eps = r.eps,
                         .init_scale = r.init_scale};
    memcpy(spec.name, name, nlen);
    spec.name[nlen] = '\0';
    if (ss__emb_spec_check(&spec, NULL, 0) != SS_OK)
        return SS_ERR_PARSE;
    *out = spec;
    return SS_OK;
}

ss_status ss__emb_db_each_spec(ss__emb_db *db, ss_status (*fn)(void *ctx, const ss__emb_spec *spec),
                               void *ctx) {
    rocksdb_iterator_t *it = rocksdb_create_iterator(db->db, db->ropts);
    ss_status st = SS_OK;
    for (rocksdb_iter_seek(it, SPEC_PREFIX, SPEC_PREFIX_N); st == SS_OK && rocksdb_iter_valid(it);
         rocksdb_iter_next(it)) {
        size_t klen, vlen;
        const char *k = rocksdb_iter_key(it, &klen);
        const char *v = rocksdb_iter_value(it, &vlen);
        if (klen < SPEC_PREFIX_N || memcmp(k, SPEC_PREFIX, SPEC_PREFIX_N) != 0)
            break;
        ss__emb_spec spec;
        if ((st = ss__emb_db_decode_spec(k + SPEC_PREFIX_N, klen - SPEC_PREFIX_N, v, vlen,
                                         &spec)) != SS_OK)
            break;
        st = fn(ctx, &spec);
    }
    rocksdb_iter_destroy(it);
    return st;
}

ss_status ss__emb_db_checkpoint(ss__emb_db *db, const char *dir, char *why, size_t whylen) {
    char *err = NULL;
    rocksdb_checkpoint_t *cp = rocksdb_checkpoint_object_create(db->db, &err);
    if (!err)
        rocksdb_checkpoint_create(cp, dir, 0, &err);
    if (cp)
        rocksdb_checkpoint_object_destroy(cp);
    if (err) {
        set_why(why, whylen, dir, err);
        rocksdb_free(err);
        return SS_ERR_IO;
    }
    return SS_OK;
}
