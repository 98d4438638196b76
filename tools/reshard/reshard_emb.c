/* Offline resharding, the embedding part (reshard.h): every input store
 * exported whole (a delta base), its rows routed by jump hash into one
 * base per output, each applied to a new store, then every output checked
 * against the inputs' counts and checksums. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fnv.h"
#include "embedding-store/delta_file.h"
#include "embedding-store/emb_store.h"
#include "tools/reshard/reshard_internal.h"

/* A table's count and order-free checksum (a sum of every row's hash). */
typedef struct table_sum {
    ss__emb_spec spec;
    uint64_t rows, sum;
} table_sum;

typedef struct sums {
    table_sum t[SS_EMB_MAX_TABLES];
    size_t n;
    size_t cur; /* the table being walked */
} sums;

static uint64_t row_hash(uint64_t id, const float *row, size_t floats) {
    return ss__fnv1a(ss__fnv1a(SS_FNV_OFFSET, &id, sizeof id), row, floats * sizeof(float));
}

/* Finds or adds spec's table; SS_ERR_EXISTS when one of that name has
 * another spec. */
static ss_status sum_table(sums *s, const ss__emb_spec *spec) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->t[i].spec.name, spec->name)) {
            s->cur = i;
            return ss__emb_spec_same(&s->t[i].spec, spec) ? SS_OK : SS_ERR_EXISTS;
        }
    if (s->n == SS_EMB_MAX_TABLES)
        return SS_ERR_TOO_LARGE;
    s->t[s->n] = (table_sum){.spec = *spec};
    s->cur = s->n++;
    return SS_OK;
}

/* Walking an input's base: rows go to their output's writer. */
typedef struct route_ctx {
    sums *in;
    ss__emb_delta_writer **out;
    size_t n_out;
    uint32_t tid;
    size_t row_floats;
    uint64_t *ids; /* a bucket per output, row_floats x batch */
    float *rows;
    size_t *count;
    size_t batch;
    const char *input; /* for why */
    char *why;
    size_t whylen;
} route_ctx;

static ss_status route_table(void *ctx, const ss__emb_spec *spec) {
    route_ctx *r = ctx;
    ss_status st = sum_table(r->in, spec);
    if (st == SS_ERR_EXISTS)
        snprintf(r->why, r->whylen,
                 "table %s of %s has another dim, optimizer, lr, eps or "
                 "init_scale than the same table in an input before it",
                 spec->name, r->input);
    if (st != SS_OK)
        return st;
    for (size_t j = 0; j < r->n_out; j++)
        ss__emb_delta_table(r->out[j], spec);
    r->tid = ss__emb_table_id(spec->name);
    r->row_floats = ss__emb_row_floats(spec);
    free(r->ids);
    free(r->rows);
    free(r->count);
    r->batch = 4096;
    r->ids = malloc(r->n_out * r->batch * sizeof *r->ids);
    r->rows = malloc(r->n_out * r->batch * r->row_floats * sizeof *r->rows);
    r->count = calloc(r->n_out, sizeof *r->count);
    return r->ids && r->rows && r->count ? SS_OK : SS_ERR_NO_MEMORY;
}

static ss_status flush_bucket(route_ctx *r, size_t j) {
    ss_status st = ss__emb_delta_put(r->out[j], r->ids + j * r->batch,
                                     r->rows + j * r->batch * r->row_floats, r->count[j]);
    r->count[j] = 0;
    return st;
}

static ss_status route_rows(void *ctx, const uint64_t *ids, const float *rows, size_t n) {
    route_ctx *r = ctx;
    if (!rows)
        return SS_OK; /* a base's tombstones: nothing to move */
    table_sum *t = &r->in->t[r->in->cur];
    ss_status st = SS_OK;
    for (size_t i = 0; i < n && st == SS_OK; i++) {
        const float *row = rows + i * r->row_floats;
        t->rows++;
        t->sum += row_hash(ids[i], row, r->row_floats);
        const size_t j = ss__emb_shard_of(r->tid, ids[i], (uint32_t)r->n_out);
        r->ids[j * r->batch + r->count[j]] = ids[i];
        memcpy(r->rows + (j * r->batch + r->count[j]) * r->row_floats, row,
               r->row_floats * sizeof(float));
        if (++r->count[j] == r->batch)
            st = flush_bucket(r, j);
    }
    for (size_t j = 0; j < r->n_out && st == SS_OK; j++) /* the table may end here */
        if (r->count[j])
            st = flush_bucket(r, j);
    return st;
}

/* A stopped store, exported whole into path (a base). */
static ss_status export_store(const char *db, const char *path, char *why, size_t whylen) {
    ss__emb_store_config cfg = {.db_path = db};
    ss__emb_store *st;
    ss_status s = ss__emb_store_create(&cfg, &st, NULL, 0);
    if (s != SS_OK) {
        snprintf(why, whylen,
                 "cannot open the embedding store %s (%s): is a shadowsync-ps still running on "
                 "it? Stop it first; the log line above says why",
                 db, ss_strerror(s));
        return s;
    }
    ss__emb_store_track_changes(st);
    s = ss__emb_store_write_delta(st, path, 1, true, NULL);
    ss__emb_store_destroy(st);
    if (s != SS_OK)
        snprintf(why, whylen, "cannot export %s: %s", db, ss_strerror(s));
    return s;
}

static ss_status read_base(const char *path, ss__emb_delta_file **f, char *why, size_t whylen) {
    char r[160];
    ss_status s = ss__emb_delta_read(path, f, r, sizeof r);
    if (s != SS_OK)
        snprintf(why, whylen, "%s: %s", path, r);
    return s;
}

/* Every input into one base per output, summing the inputs. */
static ss_status split_inputs(const ss__reshard_config *cfg, const char *work, sums *in, char *why,
                              size_t whylen) {
    ss__emb_delta_writer *out[SS_RESHARD_MAX_SHARDS] = {0};
    char path[4200];
    ss_status s = SS_OK;
    for (size_t j = 0; j < cfg->n_out_db && s == SS_OK; j++) {
        snprintf(path, sizeof path, "%s/out-%zu.base", work, j);
        s = ss__emb_delta_begin(path, 1, true, 0, &out[j]);
    }
    route_ctx r = {.in = in, .out = out, .n_out = cfg->n_out_db, .why = why, .whylen = whylen};
    for (size_t i = 0; i < cfg->n_in_db && s == SS_OK; i++) {
        snprintf(path, sizeof path, "%s/in-%zu.base", work, i);
        ss__emb_delta_file *f = NULL;
        if ((s = export_store(cfg->in_db[i], path, why, whylen)) == SS_OK &&
            (s = read_base(path, &f, why, whylen)) == SS_OK) {
            r.input = cfg->in_db[i];
            const ss__emb_delta_visitor v = {route_table, route_rows, &r};
            s = ss__emb_delta_walk(f, &v);
        }
        ss__emb_delta_close(f);
        remove(path);
    }
    free(r.ids);
    free(r.rows);
    free(r.count);
    for (size_t j = 0; j < cfg->n_out_db; j++) {
        if (!out[j])
            continue;
        ss_status c = s == SS_OK ? ss__emb_delta_commit(out[j]) : SS_OK;
        if (s != SS_OK)
            ss__emb_delta_abort(out[j]);
        if (s == SS_OK && c != SS_OK) {
            snprintf(why, whylen, "cannot write %s/out-%zu.base", work, j);
            s = c;
        }
    }
    return s;
}

/* Walking an output's export: each row on its shard, and the sums. */
typedef struct check_ctx {
    sums *out;
    uint32_t tid, shard, shards;
    size_t row_floats;
    bool misplaced;
} check_ctx;

static ss_status check_table(void *ctx, const ss__emb_spec *spec) {
    check_ctx *c = ctx;
    c->tid = ss__emb_table_id(spec->name);
    c->row_floats = ss__emb_row_floats(spec);
    return sum_table(c->out, spec);
}

static ss_status check_rows(void *ctx, const uint64_t *ids, const float *rows, size_t n) {
    check_ctx *c = ctx;
    table_sum *t = &c->out->t[c->out->cur];
    for (size_t i = 0; rows && i < n; i++) {
        c->misplaced |= ss__emb_shard_of(c->tid, ids[i], c->shards) != c->shard;
        t->rows++;
        t->sum += row_hash(ids[i], rows + i * c->row_floats, c->row_floats);
    }
    return SS_OK;
}

/* Each output base into its new store, then the stores exported again and
 * summed. */
static ss_status fill_outputs(const ss__reshard_config *cfg, const char *work, sums *out, char *why,
                              size_t whylen) {
    char path[4200];
    ss_status s = SS_OK;
    for (size_t j = 0; j < cfg->n_out_db && s == SS_OK; j++) {
        snprintf(path, sizeof path, "%s/out-%zu.base", work, j);
        ss__emb_store_config scfg = {.db_path = cfg->out_db[j]};
        ss__emb_store *st = NULL;
        ss__emb_delta_file *f = NULL;
        if ((s = ss__emb_store_create(&scfg, &st, NULL, 0)) != SS_OK)
            snprintf(why, whylen, "cannot make the store %s: %s", cfg->out_db[j], ss_strerror(s));
        if (s == SS_OK && (s = read_base(path, &f, why, whylen)) == SS_OK &&
            (s = ss__emb_store_apply_delta(st, f)) == SS_OK &&
            (s = ss__emb_store_flush(st)) != SS_OK)
            snprintf(why, whylen, "cannot write the store %s: %s", cfg->out_db[j], ss_strerror(s));
        ss__emb_delta_close(f);
        ss__emb_store_destroy(st);
        remove(path);
        f = NULL;
        snprintf(path, sizeof path, "%s/check-%zu.base", work, j);
        if (s == SS_OK && (s = export_store(cfg->out_db[j], path, why, whylen)) == SS_OK &&
            (s = read_base(path, &f, why, whylen)) == SS_OK) {
            check_ctx c = {.out = out, .shard = (uint32_t)j, .shards = (uint32_t)cfg->n_out_db};
            const ss__emb_delta_visitor v = {check_table, check_rows, &c};
            if ((s = ss__emb_delta_walk(f, &v)) == SS_OK && c.misplaced) {
                snprintf(why, whylen, "%s holds a row of another shard", cfg->out_db[j]);
                s = SS_ERR_STATE;
            }
        }
        ss__emb_delta_close(f);
        remove(path);
    }
    return s;
}

ss_status ss__reshard_emb(const ss__reshard_config *cfg, const char *work, ss__reshard_report *rep,
                          char *why, size_t whylen) {
    sums *in = calloc(1, sizeof *in), *out = calloc(1, sizeof *out);
    ss_status s = in && out ? SS_OK : SS_ERR_NO_MEMORY;
    if (s == SS_OK)
        s = split_inputs(cfg, work, in, why, whylen);
    if (s == SS_OK)
        s = fill_outputs(cfg, work, out, why, whylen);
    for (size_t i = 0; s == SS_OK && i < in->n; i++) {
        const table_sum *a = &in->t[i], *b = NULL;
        for (size_t k = 0; k < out->n && !b; k++)
            if (!strcmp(out->t[k].spec.name, a->spec.name))
                b = &out->t[k];
        if (!b || b->rows != a->rows || b->sum != a->sum) {
            snprintf(why, whylen,
                     "table %s: the outputs hold %llu rows (checksum %016llx), the inputs "
                     "%llu (%016llx)",
                     a->spec.name, b ? (unsigned long long)b->rows : 0ull,
                     b ? (unsigned long long)b->sum : 0ull, (unsigned long long)a->rows,
                     (unsigned long long)a->sum);
            s = SS_ERR_STATE;
        }
        rep->rows += a->rows;
        rep->checksum += a->sum;
    }
    if (s == SS_OK)
        rep->tables = in->n;
    free(in);
    free(out);
    return s;
}
