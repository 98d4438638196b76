#include "tools/ctr/dlrm.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/names.h"
#include "common/strbuf.h"
#include "shadow/kernels.h"
#include "tools/ctr/rng.h"

#define NVEC  (1 + SS_CTR_NUM_CAT)    /* bottom output + one per field */
#define NPAIR (NVEC * (NVEC - 1) / 2) /* 351 dot products */
/* The first-order part also weighs each integer feature by its magnitude
 * class, floor(log2(1 + x)) (capped), as a hashed logistic regression
 * takes it: WIDE_BUCKETS weights per feature after the rows' weights. */
#define WIDE_BUCKETS 32
#define WIDE_DENSE   SS_CTR_WIDE_DENSE
_Static_assert(WIDE_DENSE == SS_CTR_NUM_DENSE * WIDE_BUCKETS, "a class per bucket");
#define NWIDE SS_CTR_NWIDE

ss_status ss__ctr_model_config_check(const ss__ctr_model_config *cfg) {
    if (!cfg || cfg->emb_dim == 0 || cfg->emb_dim > 256 || cfg->table_rows < 2 ||
        !(cfg->emb_init_scale >= 0.0f && cfg->emb_init_scale <= 1.0f) ||
        !(cfg->wide_lr >= 0.0f && cfg->wide_lr <= 1.0f) || cfg->bottom_hidden == 0 ||
        cfg->bottom_hidden > 4096 || cfg->top_hidden == 0 || cfg->top_hidden > 4096)
        return SS_ERR_INVALID_ARGUMENT;
    return SS_OK;
}

void ss__ctr_layout_of(const ss__ctr_model_config *cfg, ss__ctr_layout *L) {
    const size_t D = cfg->emb_dim, H = cfg->bottom_hidden, T = cfg->top_hidden;
    L->interact = D + NPAIR;
    size_t o = 0;
    L->w1 = o, o += H * SS_CTR_NUM_DENSE;
    L->b1 = o, o += H;
    L->w2 = o, o += D * H;
    L->b2 = o, o += D;
    L->w3 = o, o += T * L->interact;
    L->b3 = o, o += T;
    L->w4 = o, o += T;
    L->b4 = o, o += 1;
    L->total = o;
}

static void xavier(float *w, size_t fan_out, size_t fan_in, ss__rng *rng) {
    double a = sqrt(6.0 / (double)(fan_in + fan_out));
    for (size_t i = 0; i < fan_out * fan_in; i++)
        w[i] = (float)((2.0 * ss__rng_uniform(rng) - 1.0) * a);
}

void ss__ctr_dense_init(const ss__ctr_model_config *cfg, float *dense, uint64_t seed) {
    ss__ctr_layout L;
    ss__ctr_layout_of(cfg, &L);
    memset(dense, 0, L.total * sizeof *dense);
    ss__rng rng;
    ss__rng_seed(&rng, seed);
    xavier(dense + L.w1, cfg->bottom_hidden, SS_CTR_NUM_DENSE, &rng);
    xavier(dense + L.w2, cfg->emb_dim, cfg->bottom_hidden, &rng);
    xavier(dense + L.w3, cfg->top_hidden, L.interact, &rng);
    xavier(dense + L.w4, 1, cfg->top_hidden, &rng);
}

float ss__ctr_emb_init_scale(const ss__ctr_model_config *cfg) {
    return cfg->emb_init_scale > 0.0f ? cfg->emb_init_scale : 0.05f;
}

ss_status ss__ctr_embeddings_create(const ss__ctr_model_config *cfg, uint64_t seed,
                                    ss__ctr_embeddings *out, char *why, size_t whylen) {
    if (ss__ctr_model_config_check(cfg) != SS_OK || !out)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "the model config is not valid");
    const size_t rows = (size_t)SS_CTR_NUM_CAT * cfg->table_rows, n = rows * cfg->emb_dim;
    const size_t wide = ss__ctr_wide_count(cfg);
    out->data = malloc((n + wide) * sizeof(float));
    if (!out->data)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the embedding tables");
    out->rows = cfg->table_rows;
    out->dim = cfg->emb_dim;
    out->acc = NULL;
    out->lr = 0.05f;
    out->wide = wide ? out->data + n : NULL; /* from 0: the bias holds the base rate */
    out->wide_lr = cfg->wide_lr;
    memset(out->data + n, 0, wide * sizeof(float));
    ss__rng rng;
    ss__rng_seed(&rng, seed ^ 0xe3b0c44298fc1c14ull);
    for (size_t i = 0; i < n; i++)
        out->data[i] = (float)((2.0 * ss__rng_uniform(&rng) - 1.0) * ss__ctr_emb_init_scale(cfg));
    return SS_OK;
}

size_t ss__ctr_embeddings_floats(const ss__ctr_embeddings *emb) {
    const size_t rows = (size_t)SS_CTR_NUM_CAT * emb->rows;
    return rows * emb->dim + (emb->wide ? rows + WIDE_DENSE : 0);
}

void ss__ctr_embeddings_destroy(ss__ctr_embeddings *emb) {
    if (!emb)
        return;
    free(emb->data);
    free(emb->acc);
    emb->data = NULL;
    emb->acc = NULL;
    emb->wide = NULL;
}

ss_status ss__ctr_embeddings_set_optimizer(ss__ctr_embeddings *emb, bool adagrad, float lr) {
    if (!emb || !emb->data || !(lr >= 0.0f))
        return SS_ERR_INVALID_ARGUMENT;
    free(emb->acc);
    emb->acc = NULL;
    if (adagrad && !(emb->acc = calloc((size_t)SS_CTR_NUM_CAT * emb->rows, sizeof(float))))
        return SS_ERR_NO_MEMORY;
    emb->lr = lr;
    return SS_OK;
}

/* ---- the dense optimizer ---- */

static const char *const opt_names[] = {"sgd", "adagrad", "adam"};

ss_status ss__ctr_optimizer_parse(const char *text, ss__ctr_optimizer *out) {
    const int i = ss__name_index(text, opt_names, 3);
    if (i < 0)
        return SS_ERR_INVALID_ARGUMENT;
    *out = (ss__ctr_optimizer)i;
    return SS_OK;
}

const char *ss__ctr_optimizer_name(ss__ctr_optimizer opt) {
    return (unsigned)opt < 3 ? opt_names[opt] : "?";
}

ss_status ss__ctr_dense_opt_init(ss__ctr_dense_opt *o, ss__ctr_optimizer kind, float lr, size_t n) {
    if (!o || (unsigned)kind > SS_CTR_OPT_ADAM || !(lr > 0.0f) || n == 0)
        return SS_ERR_INVALID_ARGUMENT;
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->lr = lr;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    o->n = n;
    if (kind == SS_CTR_OPT_ADAM && !(o->m = calloc(n, sizeof(float))))
        return SS_ERR_NO_MEMORY;
    if (kind != SS_CTR_OPT_SGD && !(o->v = calloc(n, sizeof(float)))) {
        free(o->m);
        return SS_ERR_NO_MEMORY;
    }
    return SS_OK;
}

void ss__ctr_dense_opt_free(ss__ctr_dense_opt *o) {
    if (!o)
        return;
    free(o->m);
    free(o->v);
    o->m = o->v = NULL;
}

void ss__ctr_dense_opt_apply(ss__ctr_dense_opt *o, float *dense, const float *grad_sum,
                             float scale) {
    switch (o->kind) {
    case SS_CTR_OPT_ADAM: {
        uint64_t t = atomic_fetch_add_explicit(&o->steps, 1, memory_order_relaxed) + 1;
        double c1 = 1.0 - pow(o->beta1, (double)t), c2 = 1.0 - pow(o->beta2, (double)t);
        float lr_t = (float)(o->lr * sqrt(c2) / c1);
        ss__kernel_live_adam(dense, o->m, o->v, grad_sum, scale, lr_t, o->beta1, o->beta2, o->eps,
                             o->n);
        break;
    }
    case SS_CTR_OPT_ADAGRAD:
        ss__kernel_live_adagrad(dense, o->v, grad_sum, scale, o->lr, o->eps, o->n);
        break;
    case SS_CTR_OPT_SGD:
        ss__kernel_live_add_scaled(dense, grad_sum, -o->lr * scale, o->n);
        break;
    }
}

void ss__ctr_dense_init_bias(const ss__ctr_model_config *cfg, float *dense, double ctr) {
    ss__ctr_layout L;
    ss__ctr_layout_of(cfg, &L);
    if (ctr > 0.0 && ctr < 1.0)
        dense[L.b4] = (float)log(ctr / (1.0 - ctr));
}

size_t ss__ctr_row_index(const ss__ctr_model_config *cfg, int field, const ss__ctr_example *ex) {
    if (ex->cat_missing & (1u << field))
        return 0;
    return 1 + (size_t)(ss__hash3((uint64_t)field, ex->cat[field], 0x51ed) %
                        (uint64_t)(cfg->table_rows - 1));
}

struct ss__ctr_worker {
    ss__ctr_model_config cfg;
    ss__ctr_layout L;
    float *a1, *z1, *a2, *V, *f, *a3, *h; /* forward activations */
    float *dh, *df, *dV, *dz2, *dz1;      /* backward */
    float *grad;                          /* dense gradient sum over the batch */
    float *block;                         /* one allocation behind every buffer above */
};

ss_status ss__ctr_worker_create(const ss__ctr_model_config *cfg, ss__ctr_worker **out, char *why,
                                size_t whylen) {
    if (ss__ctr_model_config_check(cfg) != SS_OK || !out)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "the model config is not valid");
    ss__ctr_worker *w = calloc(1, sizeof *w);
    if (!w)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for a worker");
    w->cfg = *cfg;
    ss__ctr_layout_of(cfg, &w->L);
    const size_t D = cfg->emb_dim, H = cfg->bottom_hidden, T = cfg->top_hidden;
    const size_t F = w->L.interact;
    size_t sizes[] = {H, H, D, NVEC * D, F, T, T, T, F, NVEC * D, D, H, w->L.total};
    float **bufs[] = {&w->a1, &w->z1, &w->a2, &w->V,   &w->f,   &w->a3,  &w->h,
                      &w->dh, &w->df, &w->dV, &w->dz2, &w->dz1, &w->grad};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        total += (sizes[i] + 15) & ~(size_t)15; /* keep every buffer 64-byte aligned */
    w->block = aligned_alloc(64, total * sizeof(float));
    if (!w->block) {
        free(w);
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for a worker");
    }
    memset(w->block, 0, total * sizeof(float));
    size_t off = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        *bufs[i] = w->block + off;
        off += (sizes[i] + 15) & ~(size_t)15;
    }
    *out = w;
    return SS_OK;
}

void ss__ctr_worker_destroy(ss__ctr_worker *w) {
    if (!w)
        return;
    free(w->block);
    free(w);
}

static void relu(const float *restrict a, float *restrict z, size_t n) {
    for (size_t i = 0; i < n; i++)
        z[i] = a[i] > 0.0f ? a[i] : 0.0f;
}

static float dot(const float *restrict a, const float *restrict b, size_t n) {
    float s = 0.0f;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* Forward pass; returns the logit. rows[f] is the example's row of field
 * f (live shared rows in the array path, private gathered copies in the
 * table path). Leaves activations in w for backward. */
static float forward(ss__ctr_worker *w, const float *dense, const float *const *rows,
                     const ss__ctr_example *ex) {
    const ss__ctr_layout *L = &w->L;
    const size_t D = w->cfg.emb_dim, H = w->cfg.bottom_hidden, T = w->cfg.top_hidden;
    ss__kernel_live_matvec(dense + L->w1, dense + L->b1, ex->dense, w->a1, H, SS_CTR_NUM_DENSE);
    relu(w->a1, w->z1, H);
    ss__kernel_live_matvec(dense + L->w2, dense + L->b2, w->z1, w->a2, D, H);
    relu(w->a2, w->V, D);
    for (int f = 0; f < SS_CTR_NUM_CAT; f++)
        ss__kernel_live_snapshot(w->V + (size_t)(f + 1) * D, rows[f], D);
    memcpy(w->f, w->V, D * sizeof(float));
    size_t p = D;
    for (size_t i = 0; i < NVEC; i++)
        for (size_t j = i + 1; j < NVEC; j++)
            w->f[p++] = dot(w->V + i * D, w->V + j * D, D);
    ss__kernel_live_matvec(dense + L->w3, dense + L->b3, w->f, w->a3, T, L->interact);
    relu(w->a3, w->h, T);
    float logit;
    ss__kernel_live_matvec(dense + L->w4, dense + L->b4, w->h, &logit, 1, T);
    return logit;
}

size_t ss__ctr_wide_count(const ss__ctr_model_config *cfg) {
    return cfg->wide_lr > 0.0f ? (size_t)SS_CTR_NUM_CAT * cfg->table_rows + WIDE_DENSE : 0;
}

void ss__ctr_wide_ids(const ss__ctr_model_config *cfg, const ss__ctr_example *ex,
                      uint64_t ids[SS_CTR_NWIDE]) {
    for (int f = 0; f < SS_CTR_NUM_CAT; f++)
        ids[f] = ss__ctr_row_id(cfg, f, ex);
    ss__ctr_wide_class_ids(cfg, ex, ids + SS_CTR_NUM_CAT);
}

void ss__ctr_wide_class_ids(const ss__ctr_model_config *cfg, const ss__ctr_example *ex,
                            uint64_t ids[SS_CTR_NUM_DENSE]) {
    const uint64_t classes = (uint64_t)SS_CTR_NUM_CAT * cfg->table_rows;
    for (int j = 0; j < SS_CTR_NUM_DENSE; j++) {
        /* dense[j] = ln(1 + x): log2(1 + x) = dense[j] / ln 2 */
        const float c = ex->dense[j] * 1.44269504f;
        /* 0 (or empty, or negative): no weight, as a regression has no
         * token for an empty field (all of them in a categorical stream) */
        ids[j] = c > 0.0f ? classes + (uint64_t)j * WIDE_BUCKETS +
                                (c < WIDE_BUCKETS - 1 ? (uint64_t)c : WIDE_BUCKETS - 1)
                          : UINT64_MAX;
    }
}

/* The example's rows in the shared array, their Adagrad accumulators
 * (acc may be NULL) and their first-order weights (NULL without them). */
static void array_rows(ss__ctr_worker *w, const ss__ctr_embeddings *emb, const ss__ctr_example *ex,
                       float **rows, float **acc, float **wide) {
    for (int f = 0; f < SS_CTR_NUM_CAT; f++) {
        size_t r = (size_t)f * emb->rows + ss__ctr_row_index(&w->cfg, f, ex);
        rows[f] = emb->data + r * w->cfg.emb_dim;
        if (acc)
            acc[f] = emb->acc ? emb->acc + r : NULL;
        wide[f] = emb->wide ? emb->wide + r : NULL; /* a row's weight has the row's index */
    }
    uint64_t ids[SS_CTR_NUM_DENSE];
    if (emb->wide)
        ss__ctr_wide_class_ids(&w->cfg, ex, ids);
    for (int j = 0; j < SS_CTR_NUM_DENSE; j++)
        wide[SS_CTR_NUM_CAT + j] = emb->wide && ids[j] != UINT64_MAX ? emb->wide + ids[j] : NULL;
}

/* The first-order part of the logit: the sum of the example's weights
 * (live: read through the Hogwild kernel). */
static float wide_logit(float *const *wide) {
    float sum = 0.0f;
    for (int f = 0; f < NWIDE; f++) {
        float v = 0.0f;
        if (wide[f])
            ss__kernel_live_snapshot(&v, wide[f], 1);
        sum += v;
    }
    return sum;
}

/* d loss / d weight = dlogit for each of them: one SGD step. */
static void wide_step(float *const *wide, float dlogit, float lr) {
    for (int f = 0; f < NWIDE; f++)
        if (wide[f])
            ss__kernel_live_add_scaled(wide[f], &dlogit, -lr, 1);
}

static float sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

float ss__ctr_predict(ss__ctr_worker *w, const float *dense, const ss__ctr_embeddings *emb,
                      const ss__ctr_example *ex) {
    float *rows[SS_CTR_NUM_CAT], *wide[NWIDE];
    array_rows(w, emb, ex, rows, NULL, wide);
    return sigmoid(forward(w, dense, (const float *const *)rows, ex) + wide_logit(wide));
}

/* Backward pass for one example with dlogit = p - y: adds dense gradients
 * to w->grad; each field's embedding gradient goes to upd[f] scaled by
 * scale: applied to the live shared row at once (array path, live) or
 * added to a private gradient buffer (table path). */
static void backward(ss__ctr_worker *w, const float *dense, float *const *upd,
                     const ss__ctr_embeddings *emb, float *const *acc, const ss__ctr_example *ex,
                     float dlogit) {
    const ss__ctr_layout *L = &w->L;
    const size_t D = w->cfg.emb_dim, H = w->cfg.bottom_hidden, T = w->cfg.top_hidden;
    const size_t F = L->interact;
    float *g = w->grad;

    ss__kernel_axpy(g + L->w4, w->h, dlogit, T);
    g[L->b4] += dlogit;
    ss__kernel_live_matvec_t(dense + L->w4, &dlogit, w->dh, 1, T);
    for (size_t r = 0; r < T; r++)
        if (w->a3[r] <= 0.0f)
            w->dh[r] = 0.0f;

    for (size_t r = 0; r < T; r++)
        if (w->dh[r] != 0.0f)
            ss__kernel_axpy(g + L->w3 + r * F, w->f, w->dh[r], F);
    ss__kernel_axpy(g + L->b3, w->dh, 1.0f, T);
    ss__kernel_live_matvec_t(dense + L->w3, w->dh, w->df, T, F);

    memset(w->dV, 0, NVEC * D * sizeof(float));
    memcpy(w->dV, w->df, D * sizeof(float));
    size_t p = D;
    for (size_t i = 0; i < NVEC; i++) {
        for (size_t j = i + 1; j < NVEC; j++) {
            float gp = w->df[p++];
            ss__kernel_axpy(w->dV + i * D, w->V + j * D, gp, D);
            ss__kernel_axpy(w->dV + j * D, w->V + i * D, gp, D);
        }
    }

    for (size_t r = 0; r < D; r++)
        w->dz2[r] = w->a2[r] > 0.0f ? w->dV[r] : 0.0f;
    for (size_t r = 0; r < D; r++)
        ss__kernel_axpy(g + L->w2 + r * H, w->z1, w->dz2[r], H);
    ss__kernel_axpy(g + L->b2, w->dz2, 1.0f, D);
    ss__kernel_live_matvec_t(dense + L->w2, w->dz2, w->dz1, D, H);
    for (size_t r = 0; r < H; r++)
        if (w->a1[r] <= 0.0f)
            w->dz1[r] = 0.0f;
    for (size_t r = 0; r < H; r++)
        ss__kernel_axpy(g + L->w1 + r * SS_CTR_NUM_DENSE, ex->dense, w->dz1[r], SS_CTR_NUM_DENSE);
    ss__kernel_axpy(g + L->b1, w->dz1, 1.0f, H);

    for (int f = 0; f < SS_CTR_NUM_CAT; f++) {
        const float *gf = w->dV + (size_t)(f + 1) * D;
        if (!emb) /* the table path: into the gradient buffer the table gets */
            ss__kernel_axpy(upd[f], gf, 1.0f, D);
        else if (acc)
            ss__kernel_live_adagrad_row(upd[f], acc[f], gf, emb->lr, 1e-8f, D);
        else
            ss__kernel_live_add_scaled(upd[f], gf, -emb->lr, D);
    }
}

/* One batch: example i's rows come from the shared array (emb, updated at
 * once) or from gathered (their gradients added to its buffers); the
 * dense replica gets one optimizer step with the mean gradient at the
 * end. */
static void train_batch(ss__ctr_worker *w, float *dense, ss__ctr_dense_opt *opt,
                        const ss__ctr_embeddings *emb, const ss__ctr_gathered *gathered,
                        const ss__ctr_example *const *batch, size_t count, double *loss_sum) {
    if (count == 0)
        return;
    memset(w->grad, 0, w->L.total * sizeof(float));
    double loss = 0.0;
    for (size_t i = 0; i < count; i++) {
        const ss__ctr_example *ex = batch[i];
        float *rows[SS_CTR_NUM_CAT], *acc[SS_CTR_NUM_CAT], *wide[NWIDE] = {NULL};
        if (emb)
            array_rows(w, emb, ex, rows, acc, wide);
        else if (gathered->wide) /* read only: wide_logit reads, nothing writes */
            memcpy(wide, gathered->wide + i * NWIDE, sizeof wide);
        const float *const *in =
            emb ? (const float *const *)rows : gathered->rows + i * SS_CTR_NUM_CAT;
        const float p = sigmoid(forward(w, dense, in, ex) + wide_logit(wide));
        const float pc = fminf(fmaxf(p, 1e-7f), 1.0f - 1e-7f), dlogit = p - ex->label;
        loss -= ex->label > 0.5f ? logf(pc) : logf(1.0f - pc);
        if (emb) {
            backward(w, dense, rows, emb, emb->acc ? acc : NULL, ex, dlogit);
            wide_step(wide, dlogit, emb->wide_lr);
            continue;
        }
        backward(w, dense, gathered->grads + i * SS_CTR_NUM_CAT, NULL, NULL, ex, dlogit);
        for (int k = 0; gathered->wide_grads && k < NWIDE; k++)
            if (gathered->wide_grads[i * NWIDE + (size_t)k]) /* d loss / d weight = dlogit */
                *gathered->wide_grads[i * NWIDE + (size_t)k] += dlogit;
    }
    ss__ctr_dense_opt_apply(opt, dense, w->grad, 1.0f / (float)count);
    if (loss_sum)
        *loss_sum += loss;
}

void ss__ctr_train_batch(ss__ctr_worker *w, float *dense, ss__ctr_dense_opt *opt,
                         ss__ctr_embeddings *emb, const ss__ctr_example *const *batch, size_t count,
                         double *loss_sum) {
    train_batch(w, dense, opt, emb, NULL, batch, count, loss_sum);
}

void ss__ctr_train_batch_gathered(ss__ctr_worker *w, float *dense, ss__ctr_dense_opt *opt,
                                  const ss__ctr_gathered *in, const ss__ctr_example *const *batch,
                                  size_t count, double *loss_sum) {
    train_batch(w, dense, opt, NULL, in, batch, count, loss_sum);
}

uint64_t ss__ctr_row_id(const ss__ctr_model_config *cfg, int field, const ss__ctr_example *ex) {
    return (uint64_t)field * cfg->table_rows + ss__ctr_row_index(cfg, field, ex);
}
