/* A DLRM-style CTR model: bottom MLP over the 13 dense features, one
 * embedding table per categorical field, pairwise dot-product interaction
 * of the 27 vectors, top MLP, sigmoid; logistic loss.
 *
 * The dense parameters are one flat float array (the replica the shadow
 * pool syncs); embeddings are one flat array of rows. Workers read and
 * write both only through shadow/'s ss__kernel_live_* kernels (Hogwild). */
#ifndef SS_CTR_DLRM_H
#define SS_CTR_DLRM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shadowsync/status.h"
#include "tools/ctr/criteo.h"

typedef struct ss__ctr_model_config {
    uint32_t emb_dim;       /* D: embedding and bottom-MLP output width */
    uint32_t table_rows;    /* rows per table (row 0 = missing value) */
    uint32_t bottom_hidden; /* bottom MLP: 13 -> bottom_hidden -> D */
    uint32_t top_hidden;    /* top MLP: D + 351 -> top_hidden -> 1 */
    float emb_init_scale;   /* rows start uniform in [-s, s] (0: 0.05) */
    /* > 0: first-order weights, one per embedding row and one per integer
     * feature's log2 class, added to the logit and trained by SGD at this
     * rate (the wide part of Wide & Deep: it learns an id's click rate from
     * its first examples, while the interactions need many); 0: none. The
     * array path only. */
    float wide_lr;
} ss__ctr_model_config;

/* Offsets of each parameter block inside the flat dense array. */
typedef struct ss__ctr_layout {
    size_t w1, b1, w2, b2, w3, b3, w4, b4, total;
    size_t interact; /* width of the top MLP input: D + 27*26/2 */
} ss__ctr_layout;

ss_status ss__ctr_model_config_check(const ss__ctr_model_config *cfg);
void ss__ctr_layout_of(const ss__ctr_model_config *cfg, ss__ctr_layout *out);

/* Xavier-uniform weights, zero biases; identical for identical seeds. */
void ss__ctr_dense_init(const ss__ctr_model_config *cfg, float *dense, uint64_t seed);

/* The dense part's optimizer. Its state is each trainer's own (not synced:
 * as in local SGD and EASGD, each replica keeps its optimizer), shared by
 * the trainer's Hogwild workers through the live kernels. */
typedef enum ss__ctr_optimizer {
    SS_CTR_OPT_SGD = 0,
    SS_CTR_OPT_ADAGRAD,
    SS_CTR_OPT_ADAM
} ss__ctr_optimizer;

ss_status ss__ctr_optimizer_parse(const char *text, ss__ctr_optimizer *out);
const char *ss__ctr_optimizer_name(ss__ctr_optimizer opt);

typedef struct ss__ctr_dense_opt {
    ss__ctr_optimizer kind;
    float lr, beta1, beta2, eps;
    float *m, *v; /* Adam's moments; Adagrad's sum of squares in v */
    size_t n;
    _Atomic uint64_t steps; /* Adam's bias correction */
} ss__ctr_dense_opt;

/* Adam: beta1 0.9, beta2 0.999, eps 1e-8; Adagrad: eps 1e-8. */
ss_status ss__ctr_dense_opt_init(ss__ctr_dense_opt *o, ss__ctr_optimizer kind, float lr, size_t n);
void ss__ctr_dense_opt_free(ss__ctr_dense_opt *o);
/* One step with the gradient grad_sum * scale (scale = 1 / batch). */
void ss__ctr_dense_opt_apply(ss__ctr_dense_opt *o, float *dense, const float *grad_sum,
                             float scale);

/* All tables in one array: table f row r at ((f * rows) + r) * D. Updated
 * per example by SGD or row-wise Adagrad (acc: one accumulator per row). */
typedef struct ss__ctr_embeddings {
    float *data;
    size_t rows, dim;
    float *acc; /* row-wise Adagrad; NULL = SGD */
    float lr;
    float
        *wide; /* NULL, or the first-order weights (rows', then classes'), in data after the rows */
    float wide_lr; /* their SGD rate (cfg->wide_lr) */
} ss__ctr_embeddings;

/* Floats in emb->data: the rows, and the first-order weights if any. */
size_t ss__ctr_embeddings_floats(const ss__ctr_embeddings *emb);

/* The rows' initial scale (cfg->emb_init_scale, 0: 0.05). */
float ss__ctr_emb_init_scale(const ss__ctr_model_config *cfg);
ss_status ss__ctr_embeddings_create(const ss__ctr_model_config *cfg, uint64_t seed,
                                    ss__ctr_embeddings *out, char *why, size_t whylen);
void ss__ctr_embeddings_destroy(ss__ctr_embeddings *emb);
/* SGD (default, lr 0.05) or row-wise Adagrad (allocates the accumulators). */
ss_status ss__ctr_embeddings_set_optimizer(ss__ctr_embeddings *emb, bool adagrad, float lr);
/* Row of field f for a raw categorical value (row 0 when missing). */
size_t ss__ctr_row_index(const ss__ctr_model_config *cfg, int field, const ss__ctr_example *ex);

/* Per-thread scratch for forward/backward passes and the dense gradient. */
typedef struct ss__ctr_worker ss__ctr_worker;

ss_status ss__ctr_worker_create(const ss__ctr_model_config *cfg, ss__ctr_worker **out, char *why,
                                size_t whylen);
void ss__ctr_worker_destroy(ss__ctr_worker *w);

/* One step on a minibatch: embeddings are updated per example by their
 * optimizer, the dense replica once per batch by opt with the mean
 * gradient. Adds the batch's summed log loss to *loss_sum when non-NULL. */
void ss__ctr_train_batch(ss__ctr_worker *w, float *dense, ss__ctr_dense_opt *opt,
                         ss__ctr_embeddings *emb, const ss__ctr_example *const *batch, size_t count,
                         double *loss_sum);

/* The rows and first-order weights of a batch gathered from tables. */
typedef struct ss__ctr_gathered {
    /* rows[i * 26 + f]: example i's row of field f (read only); d loss /
     * d row is added to grads[i * 26 + f] (rows of one id share one
     * buffer). */
    const float *const *rows;
    float *const *grads;
    /* NULL, or example i's first-order weights at wide[i * SS_CTR_NWIDE +
     * k] (NULL where it has none), d loss / d weight added to
     * wide_grads[i * SS_CTR_NWIDE + k]. */
    const float *const *wide;
    float *const *wide_grads;
} ss__ctr_gathered;

/* The same step over rows gathered from embedding tables (the table path
 * of ctr-train --emb local|remote|cached). The caller pushes the summed
 * gradients to the tables, whose optimizers apply them. */
void ss__ctr_train_batch_gathered(ss__ctr_worker *w, float *dense, ss__ctr_dense_opt *opt,
                                  const ss__ctr_gathered *in, const ss__ctr_example *const *batch,
                                  size_t count, double *loss_sum);

/* First-order weights per example: one per field's row, one per integer
 * feature's magnitude class. */
#define SS_CTR_NWIDE (SS_CTR_NUM_CAT + SS_CTR_NUM_DENSE)
/* The integer features' classes: 32 per feature, after the rows'. */
#define SS_CTR_WIDE_DENSE (SS_CTR_NUM_DENSE * 32)
/* How many first-order weights a model has (0 without them): the rows',
 * then the classes'. Weight k is emb->wide[k], or id k of a table of them. */
size_t ss__ctr_wide_count(const ss__ctr_model_config *cfg);
/* An example's first-order weights as ids in [0, ss__ctr_wide_count):
 * ids[k] for k < SS_CTR_NWIDE, UINT64_MAX where it has none (an integer
 * feature that is 0, negative or empty). */
void ss__ctr_wide_ids(const ss__ctr_model_config *cfg, const ss__ctr_example *ex,
                      uint64_t ids[SS_CTR_NWIDE]);
/* Only the integer features' classes, ids[SS_CTR_NUM_CAT ..] of
 * ss__ctr_wide_ids (for a caller that has the rows' ids already). */
void ss__ctr_wide_class_ids(const ss__ctr_model_config *cfg, const ss__ctr_example *ex,
                            uint64_t ids[SS_CTR_NUM_DENSE]);

/* Id of an example's row of field f in one table holding every field:
 * field * table_rows + ss__ctr_row_index. */
uint64_t ss__ctr_row_id(const ss__ctr_model_config *cfg, int field, const ss__ctr_example *ex);

/* Sets the output bias so that the model starts predicting ctr (the
 * training set's click rate): a CTR model that starts at 0.5 spends its
 * first steps only learning the base rate. */
void ss__ctr_dense_init_bias(const ss__ctr_model_config *cfg, float *dense, double ctr);

/* Click probability for one example. */
float ss__ctr_predict(ss__ctr_worker *w, const float *dense, const ss__ctr_embeddings *emb,
                      const ss__ctr_example *ex);

#endif
