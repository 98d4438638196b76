/* The table path of ctr-train: gather, train, push. */
#include "tools/ctr/emb_path.h"

#include <stdlib.h>
#include <string.h>

static const char *const emb_names[] = {"array", "local", "remote", "cached"};

ss_status ss__ctr_emb_mode_parse(const char *text, ss__ctr_emb_mode *out) {
    for (int i = 0; i < 4; i++)
        if (text && strcmp(text, emb_names[i]) == 0) {
            *out = (ss__ctr_emb_mode)i;
            return SS_OK;
        }
    return SS_ERR_INVALID_ARGUMENT;
}

const char *ss__ctr_emb_mode_name(ss__ctr_emb_mode mode) {
    return (unsigned)mode < 4 ? emb_names[mode] : "unknown";
}

struct ss__ctr_gather {
    ss__ctr_model_config cfg;
    size_t cap;   /* batch * 26 */
    size_t count; /* examples in the batch */
    const ss__ctr_example **ex;
    uint64_t *uniq; /* distinct ids */
    size_t m;
    uint32_t *slot_of; /* position (example * 26 + field) -> index into uniq */
    size_t *hash;      /* open addressing over uniq, SIZE_MAX = empty */
    size_t hash_cap;
    float *rows, *grads; /* m * D each */
    const float **rowp;  /* per position */
    float **gradp;
    ss_table_fetch *fetch; /* NULL: rows were looked up at once */
    ss_status lookup_status;
    bool unpushed; /* trained; its gradients not pushed yet */
};

ss_status ss__ctr_gather_create(const ss__ctr_model_config *cfg, uint32_t batch,
                                ss__ctr_gather **out) {
    ss__ctr_gather *g = calloc(1, sizeof *g);
    if (!g)
        return SS_ERR_NO_MEMORY;
    g->cfg = *cfg;
    g->cap = (size_t)batch * SS_CTR_NUM_CAT;
    g->hash_cap = 16;
    while (g->hash_cap < 2 * g->cap)
        g->hash_cap *= 2;
    const size_t D = cfg->emb_dim;
    g->ex = calloc(batch, sizeof *g->ex);
    g->uniq = malloc(g->cap * sizeof *g->uniq);
    g->slot_of = malloc(g->cap * sizeof *g->slot_of);
    g->hash = malloc(g->hash_cap * sizeof *g->hash);
    g->rows = malloc(g->cap * D * sizeof *g->rows);
    g->grads = malloc(g->cap * D * sizeof *g->grads);
    g->rowp = malloc(g->cap * sizeof *g->rowp);
    g->gradp = malloc(g->cap * sizeof *g->gradp);
    if (!g->ex || !g->uniq || !g->slot_of || !g->hash || !g->rows || !g->grads || !g->rowp ||
        !g->gradp) {
        ss__ctr_gather_destroy(g);
        return SS_ERR_NO_MEMORY;
    }
    *out = g;
    return SS_OK;
}

void ss__ctr_gather_destroy(ss__ctr_gather *g) {
    if (!g)
        return;
    if (g->fetch)
        ss_table_fetch_wait(g->fetch, NULL);
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

ss_status ss__ctr_gather_begin(ss__ctr_gather *g, ss_table *table,
                               const ss__ctr_example *const *batch, size_t count, bool prefetch,
                               ss__ctr_gather *done) {
    if (count * SS_CTR_NUM_CAT > g->cap || g->fetch || g->unpushed ||
        (done && (done == g || !done->unpushed)))
        return SS_ERR_INVALID_ARGUMENT;
    g->count = count;
    g->m = 0;
    memset(g->hash, 0xff, g->hash_cap * sizeof *g->hash);
    for (size_t i = 0; i < count; i++) {
        g->ex[i] = batch[i];
        for (int f = 0; f < SS_CTR_NUM_CAT; f++) {
            uint64_t id = ss__ctr_row_id(&g->cfg, f, batch[i]);
            size_t h = (size_t)((id * 0x9E3779B97F4A7C15ull) >> 20) & (g->hash_cap - 1);
            while (g->hash[h] != SIZE_MAX && g->uniq[g->hash[h]] != id)
                h = (h + 1) & (g->hash_cap - 1);
            if (g->hash[h] == SIZE_MAX) {
                g->hash[h] = g->m;
                g->uniq[g->m++] = id;
            }
            g->slot_of[i * SS_CTR_NUM_CAT + (size_t)f] = (uint32_t)g->hash[h];
        }
    }
    if (prefetch && done) {
        done->unpushed = false;
        return ss_table_push_prefetch(table, done->uniq, done->m, done->grads, g->uniq, g->m,
                                      &g->fetch);
    }
    if (done) {
        ss_status st = ss__ctr_gather_push(done, table);
        if (st != SS_OK)
            return st;
    }
    if (prefetch)
        return ss_table_prefetch(table, g->uniq, g->m, &g->fetch);
    g->lookup_status = ss_table_lookup(table, g->uniq, g->m, g->rows);
    return g->lookup_status;
}

ss_status ss__ctr_gather_push(ss__ctr_gather *g, ss_table *table) {
    if (!g->unpushed)
        return SS_ERR_STATE;
    g->unpushed = false;
    return ss_table_push(table, g->uniq, g->m, g->grads);
}

ss_status ss__ctr_gather_train(ss__ctr_gather *g, ss__ctr_worker *w, float *dense,
                               ss__ctr_dense_opt *opt, double *loss_sum) {
    ss_status st = g->lookup_status;
    if (g->fetch) {
        st = ss_table_fetch_wait(g->fetch, g->rows);
        g->fetch = NULL;
    }
    if (st != SS_OK)
        return st;
    const size_t D = g->cfg.emb_dim;
    memset(g->grads, 0, g->m * D * sizeof *g->grads);
    for (size_t p = 0; p < g->count * SS_CTR_NUM_CAT; p++) {
        g->rowp[p] = g->rows + (size_t)g->slot_of[p] * D;
        g->gradp[p] = g->grads + (size_t)g->slot_of[p] * D;
    }
    ss__ctr_train_batch_gathered(w, dense, opt, g->rowp, g->gradp, g->ex, g->count, loss_sum);
    g->unpushed = true;
    return SS_OK;
}

ss_status ss__ctr_emb_materialize(ss_table *table, ss__ctr_embeddings *emb) {
    enum { CHUNK = 8192 };
    const size_t total = (size_t)SS_CTR_NUM_CAT * emb->rows;
    uint64_t *ids = malloc(CHUNK * sizeof *ids);
    if (!ids)
        return SS_ERR_NO_MEMORY;
    ss_status st = SS_OK;
    for (size_t off = 0; off < total && st == SS_OK; off += CHUNK) {
        size_t n = total - off < CHUNK ? total - off : CHUNK;
        for (size_t i = 0; i < n; i++)
            ids[i] = off + i;
        st = ss_table_lookup(table, ids, n, emb->data + off * emb->dim);
    }
    free(ids);
    return st;
}

ss_status ss__ctr_emb_materialize_rows(ss_table *table, const ss__ctr_model_config *cfg,
                                       ss__ctr_embeddings *emb, const ss__ctr_dataset *data) {
    enum { CHUNK = 8192 };
    uint64_t *ids = malloc(CHUNK * sizeof *ids);
    float *rows = malloc((size_t)CHUNK * emb->dim * sizeof *rows);
    ss_status st = ids && rows ? SS_OK : SS_ERR_NO_MEMORY;
    size_t n = 0;
    for (size_t i = 0; st == SS_OK && i <= data->nrows; i++) {
        if (n + SS_CTR_NUM_CAT > CHUNK || (i == data->nrows && n)) {
            st = ss_table_lookup(table, ids, n, rows);
            for (size_t k = 0; st == SS_OK && k < n; k++)
                memcpy(emb->data + ids[k] * emb->dim, rows + k * emb->dim,
                       emb->dim * sizeof(float));
            n = 0;
        }
        if (i < data->nrows)
            for (int f = 0; f < SS_CTR_NUM_CAT; f++)
                ids[n++] = ss__ctr_row_id(cfg, f, &data->rows[i]);
    }
    free(ids);
    free(rows);
    return st;
}
