/* The table path of ctr-train: gather, train, push. */
#include "tools/ctr/emb_path.h"

#include <stdlib.h>
#include <string.h>

#include "common/names.h"
#include "common/strbuf.h"

static const char *const emb_names[] = {"array", "local", "remote", "cached"};

ss_status ss__ctr_emb_mode_parse(const char *text, ss__ctr_emb_mode *out) {
    const int i = ss__name_index(text, emb_names, 4);
    if (i < 0)
        return SS_ERR_INVALID_ARGUMENT;
    *out = (ss__ctr_emb_mode)i;
    return SS_OK;
}

const char *ss__ctr_emb_mode_name(ss__ctr_emb_mode mode) {
    return (unsigned)mode < 4 ? emb_names[mode] : "unknown";
}

struct ss__ctr_gather {
    ss__ctr_model_config cfg;
    size_t cap;   /* batch * 26 */
    size_t wcap;  /* batch * SS_CTR_NWIDE with first-order weights, else 0 */
    size_t count; /* examples in the batch */
    const ss__ctr_example **ex;
    uint64_t *uniq;    /* distinct row ids, then the other first-order weights' ids */
    size_t m, mw;      /* distinct row ids; all distinct ids (m without weights) */
    uint32_t *slot_of; /* position (example * 26 + field) -> index into uniq */
    uint32_t *wslot;   /* position (example * SS_CTR_NWIDE + k) -> index, UINT32_MAX: none */
    size_t *hash;      /* open addressing over uniq, SIZE_MAX = empty */
    size_t hash_cap;
    float *rows, *grads;  /* m * D each */
    float *wide, *wgrads; /* mw each: the first-order weights and their gradients */
    const float **rowp;   /* per position */
    float **gradp;
    const float **widep; /* per example * SS_CTR_NWIDE */
    float **wgradp;
    ss_table_fetch *fetch, *wfetch; /* NULL: looked up at once */
    ss_status lookup_status;
    bool unpushed; /* trained; its gradients not pushed yet */
};

ss_status ss__ctr_gather_create(const ss__ctr_model_config *cfg, uint32_t batch,
                                ss__ctr_gather **out, char *why, size_t whylen) {
    ss__ctr_gather *g = calloc(1, sizeof *g);
    if (!g)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the gather of a batch");
    g->cfg = *cfg;
    g->cap = (size_t)batch * SS_CTR_NUM_CAT;
    g->wcap = ss__ctr_wide_count(cfg) ? (size_t)batch * SS_CTR_NWIDE : 0;
    const size_t ids = g->wcap ? g->wcap : g->cap;
    g->hash_cap = 16;
    while (g->hash_cap < 2 * ids)
        g->hash_cap *= 2;
    const size_t D = cfg->emb_dim;
    g->ex = calloc(batch, sizeof *g->ex);
    g->uniq = malloc(ids * sizeof *g->uniq);
    g->slot_of = malloc(g->cap * sizeof *g->slot_of);
    g->hash = malloc(g->hash_cap * sizeof *g->hash);
    g->rows = malloc(g->cap * D * sizeof *g->rows);
    g->grads = malloc(g->cap * D * sizeof *g->grads);
    g->rowp = malloc(g->cap * sizeof *g->rowp);
    g->gradp = malloc(g->cap * sizeof *g->gradp);
    bool wide_ok = true;
    if (g->wcap) {
        g->wslot = malloc(g->wcap * sizeof *g->wslot);
        g->wide = malloc(g->wcap * sizeof *g->wide);
        g->wgrads = malloc(g->wcap * sizeof *g->wgrads);
        g->widep = malloc(g->wcap * sizeof *g->widep);
        g->wgradp = malloc(g->wcap * sizeof *g->wgradp);
        wide_ok = g->wslot && g->wide && g->wgrads && g->widep && g->wgradp;
    }
    if (!g->ex || !g->uniq || !g->slot_of || !g->hash || !g->rows || !g->grads || !g->rowp ||
        !g->gradp || !wide_ok) {
        ss__ctr_gather_destroy(g);
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the gather of a batch");
    }
    *out = g;
    return SS_OK;
}

void ss__ctr_gather_destroy(ss__ctr_gather *g) {
    if (!g)
        return;
    if (g->fetch)
        ss_table_fetch_wait(g->fetch, NULL);
    if (g->wfetch)
        ss_table_fetch_wait(g->wfetch, NULL);
    free(g->wslot);
    free(g->wide);
    free(g->wgrads);
    free(g->widep);
    free(g->wgradp);
    free(g->ex);
    free(g->uniq);
    free(g->slot_of);
    free(g->hash);
    free(g->rows);
    free(g->grads);
    free(g->rowp);
    free(g->gradp);
    free(g);
}

/* The index of id in uniq, added when new. */
static uint32_t index_of(ss__ctr_gather *g, uint64_t id, size_t *count) {
    size_t h = (size_t)((id * 0x9E3779B97F4A7C15ull) >> 20) & (g->hash_cap - 1);
    while (g->hash[h] != SIZE_MAX && g->uniq[g->hash[h]] != id)
        h = (h + 1) & (g->hash_cap - 1);
    if (g->hash[h] == SIZE_MAX) {
        g->hash[h] = *count;
        g->uniq[(*count)++] = id;
    }
    return (uint32_t)g->hash[h];
}

/* The batch's distinct row ids (uniq[0 .. m)), then the ids of its other
 * first-order weights (uniq[m .. mw)): a row's weight has the row's id. */
static void collect_ids(ss__ctr_gather *g, const ss__ctr_example *const *batch, size_t count) {
    g->count = count;
    g->m = 0;
    memset(g->hash, 0xff, g->hash_cap * sizeof *g->hash);
    for (size_t i = 0; i < count; i++) {
        g->ex[i] = batch[i];
        for (int f = 0; f < SS_CTR_NUM_CAT; f++)
            g->slot_of[i * SS_CTR_NUM_CAT + (size_t)f] =
                index_of(g, ss__ctr_row_id(&g->cfg, f, batch[i]), &g->m);
    }
    g->mw = g->m;
    for (size_t i = 0; g->wcap && i < count; i++) {
        uint64_t ids[SS_CTR_NUM_DENSE]; /* the rows' are in slot_of already */
        ss__ctr_wide_class_ids(&g->cfg, batch[i], ids);
        uint32_t *slot = g->wslot + i * SS_CTR_NWIDE;
        memcpy(slot, g->slot_of + i * SS_CTR_NUM_CAT, SS_CTR_NUM_CAT * sizeof *slot);
        for (int j = 0; j < SS_CTR_NUM_DENSE; j++)
            slot[SS_CTR_NUM_CAT + j] =
                ids[j] == UINT64_MAX ? UINT32_MAX : index_of(g, ids[j], &g->mw);
    }
}

/* One table's part of gather_begin: push done's gradients (when given)
 * and fetch n rows, as the main table's. */
static ss_status begin_table(ss_table *t, const uint64_t *push_ids, size_t np, const float *grads,
                             const uint64_t *ids, size_t n, bool prefetch, ss_table_fetch **fetch,
                             float *rows) {
    if (prefetch && push_ids)
        return ss_table_push_prefetch(t, push_ids, np, grads, ids, n, fetch);
    ss_status st = push_ids ? ss_table_push(t, push_ids, np, grads) : SS_OK;
    if (st == SS_OK)
        st = prefetch ? ss_table_prefetch(t, ids, n, fetch) : ss_table_lookup(t, ids, n, rows);
    return st;
}

ss_status ss__ctr_gather_begin(ss__ctr_gather *g, const ss__ctr_tables *t,
                               const ss__ctr_example *const *batch, size_t count, bool prefetch,
                               ss__ctr_gather *done) {
    if (count * SS_CTR_NUM_CAT > g->cap || g->fetch || g->wfetch || g->unpushed ||
        (done && (done == g || !done->unpushed)) || !t->wide != !g->wcap)
        return SS_ERR_INVALID_ARGUMENT;
    collect_ids(g, batch, count);
    if (done)
        done->unpushed = false;
    ss_status st =
        begin_table(t->rows, done ? done->uniq : NULL, done ? done->m : 0,
                    done ? done->grads : NULL, g->uniq, g->m, prefetch, &g->fetch, g->rows);
    if (st == SS_OK && t->wide)
        st = begin_table(t->wide, done ? done->uniq : NULL, done ? done->mw : 0,
                         done ? done->wgrads : NULL, g->uniq, g->mw, prefetch, &g->wfetch, g->wide);
    g->lookup_status = st;
    return st;
}

ss_status ss__ctr_gather_push(ss__ctr_gather *g, const ss__ctr_tables *t) {
    if (!g->unpushed)
        return SS_ERR_STATE;
    g->unpushed = false;
    ss_status st = ss_table_push(t->rows, g->uniq, g->m, g->grads);
    if (st == SS_OK && t->wide)
        st = ss_table_push(t->wide, g->uniq, g->mw, g->wgrads);
    return st;
}

/* Waits for the batch's rows and weights (looked up or on their way). */
static ss_status gather_wait(ss__ctr_gather *g) {
    ss_status st = g->lookup_status;
    if (g->fetch) {
        ss_status s = ss_table_fetch_wait(g->fetch, g->rows);
        st = st == SS_OK ? s : st;
        g->fetch = NULL;
    }
    if (g->wfetch) {
        ss_status s = ss_table_fetch_wait(g->wfetch, g->wide);
        st = st == SS_OK ? s : st;
        g->wfetch = NULL;
    }
    return st;
}

ss_status ss__ctr_gather_train(ss__ctr_gather *g, ss__ctr_worker *w, float *dense,
                               ss__ctr_dense_opt *opt, double *loss_sum) {
    ss_status st = gather_wait(g);
    if (st != SS_OK)
        return st;
    const size_t D = g->cfg.emb_dim;
    memset(g->grads, 0, g->m * D * sizeof *g->grads);
    for (size_t p = 0; p < g->count * SS_CTR_NUM_CAT; p++) {
        g->rowp[p] = g->rows + (size_t)g->slot_of[p] * D;
        g->gradp[p] = g->grads + (size_t)g->slot_of[p] * D;
    }
    if (g->wcap) {
        memset(g->wgrads, 0, g->mw * sizeof *g->wgrads);
        for (size_t p = 0; p < g->count * SS_CTR_NWIDE; p++) {
            const bool none = g->wslot[p] == UINT32_MAX;
            g->widep[p] = none ? NULL : g->wide + g->wslot[p];
            g->wgradp[p] = none ? NULL : g->wgrads + g->wslot[p];
        }
    }
    const ss__ctr_gathered in = {g->rowp, g->gradp, g->wcap ? g->widep : NULL,
                                 g->wcap ? g->wgradp : NULL};
    ss__ctr_train_batch_gathered(w, dense, opt, &in, g->ex, g->count, loss_sum);
    g->unpushed = true;
    return SS_OK;
}

/* n ids from first, looked up CHUNK at a time into out (dim floats each). */
static ss_status lookup_range(ss_table *t, uint64_t first, size_t n, size_t dim, float *out) {
    enum { CHUNK = 8192 };
    uint64_t *ids = malloc(CHUNK * sizeof *ids);
    if (!ids)
        return SS_ERR_NO_MEMORY;
    ss_status st = SS_OK;
    for (size_t off = 0; off < n && st == SS_OK; off += CHUNK) {
        size_t k = n - off < CHUNK ? n - off : CHUNK;
        for (size_t i = 0; i < k; i++)
            ids[i] = first + off + i;
        st = ss_table_lookup(t, ids, k, out + off * dim);
    }
    free(ids);
    return st;
}

ss_status ss__ctr_emb_materialize(const ss__ctr_tables *t, ss__ctr_embeddings *emb) {
    ss_status st =
        lookup_range(t->rows, 0, (size_t)SS_CTR_NUM_CAT * emb->rows, emb->dim, emb->data);
    if (st == SS_OK && t->wide && emb->wide)
        st = lookup_range(t->wide, 0, (size_t)SS_CTR_NUM_CAT * emb->rows + SS_CTR_WIDE_DENSE, 1,
                          emb->wide);
    return st;
}

/* ids[0 .. n) looked up in t and copied to emb + id * dim. */
static ss_status lookup_scatter(ss_table *t, const uint64_t *ids, size_t n, size_t dim, float *rows,
                                float *emb) {
    ss_status st = ss_table_lookup(t, ids, n, rows);
    for (size_t k = 0; st == SS_OK && k < n; k++)
        memcpy(emb + ids[k] * dim, rows + k * dim, dim * sizeof(float));
    return st;
}

ss_status ss__ctr_emb_materialize_rows(const ss__ctr_tables *t, const ss__ctr_model_config *cfg,
                                       ss__ctr_embeddings *emb, const ss__ctr_dataset *data) {
    enum { CHUNK = 8192 };
    const bool wide = t->wide && emb->wide;
    uint64_t *ids = malloc(CHUNK * sizeof *ids), *wids = malloc(CHUNK * sizeof *wids);
    float *rows = malloc((size_t)CHUNK * emb->dim * sizeof *rows);
    ss_status st = ids && wids && rows ? SS_OK : SS_ERR_NO_MEMORY;
    size_t n = 0, nw = 0;
    for (size_t i = 0; st == SS_OK && i <= data->nrows; i++) {
        if (nw + SS_CTR_NWIDE > CHUNK || (i == data->nrows && nw)) {
            st = lookup_scatter(t->rows, ids, n, emb->dim, rows, emb->data);
            if (st == SS_OK && wide)
                st = lookup_scatter(t->wide, wids, nw, 1, rows, emb->wide);
            n = nw = 0;
        }
        if (i == data->nrows)
            break;
        uint64_t w[SS_CTR_NWIDE];
        ss__ctr_wide_ids(cfg, &data->rows[i], w); /* the rows' ids, then the classes' */
        for (int k = 0; k < SS_CTR_NWIDE; k++) {
            if (k < SS_CTR_NUM_CAT)
                ids[n++] = w[k];
            if (w[k] != UINT64_MAX)
                wids[nw++] = w[k];
        }
    }
    free(ids);
    free(wids);
    free(rows);
    return st;
}
