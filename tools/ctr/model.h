/* A DLRM-style CTR model: bottom MLP over the 13 dense features, one
 * embedding table per categorical field, pairwise dot-product interaction
 * of the 27 vectors, top MLP, sigmoid; logistic loss.
 *
 * The dense parameters are one flat float array (the replica the shadow
 * pool syncs); embeddings are one flat array of rows. Workers read and
 * write both only through shadow/'s ss_kernel_live_* kernels (Hogwild). */
#ifndef SS_CTR_MODEL_H
#define SS_CTR_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "criteo.h"
#include "shadowsync/status.h"

typedef struct ss_ctr_model_config {
    uint32_t emb_dim;       /* D: embedding and bottom-MLP output width */
    uint32_t table_rows;    /* rows per table (row 0 = missing value) */
    uint32_t bottom_hidden; /* bottom MLP: 13 -> bottom_hidden -> D */
    uint32_t top_hidden;    /* top MLP: D + 351 -> top_hidden -> 1 */
} ss_ctr_model_config;

/* Offsets of each parameter block inside the flat dense array. */
typedef struct ss_ctr_layout {
    size_t w1, b1, w2, b2, w3, b3, w4, b4, total;
    size_t interact; /* width of the top MLP input: D + 27*26/2 */
} ss_ctr_layout;

ss_status ss_ctr_model_config_check(const ss_ctr_model_config *cfg);
void ss_ctr_layout_of(const ss_ctr_model_config *cfg, ss_ctr_layout *out);

/* Xavier-uniform weights, zero biases; identical for identical seeds. */
void ss_ctr_dense_init(const ss_ctr_model_config *cfg, float *dense, uint64_t seed);

/* All tables in one array: table f row r at ((f * rows) + r) * D. */
typedef struct ss_ctr_embeddings {
    float *data;
    size_t rows, dim;
} ss_ctr_embeddings;

ss_status ss_ctr_embeddings_create(const ss_ctr_model_config *cfg, uint64_t seed,
                                   ss_ctr_embeddings *out);
void ss_ctr_embeddings_destroy(ss_ctr_embeddings *emb);
/* Row of field f for a raw categorical value (row 0 when missing). */
size_t ss_ctr_row_index(const ss_ctr_model_config *cfg, int field, const ss_ctr_example *ex);

/* Per-thread scratch for forward/backward passes and the dense gradient. */
typedef struct ss_ctr_worker ss_ctr_worker;

ss_status ss_ctr_worker_create(const ss_ctr_model_config *cfg, ss_ctr_worker **out);
void ss_ctr_worker_destroy(ss_ctr_worker *w);

/* One SGD step on a minibatch: embeddings are updated per example with
 * emb_lr, the dense replica once per batch with lr times the mean gradient.
 * Adds the batch's summed log loss to *loss_sum when non-NULL. */
void ss_ctr_train_batch(ss_ctr_worker *w, float *dense, ss_ctr_embeddings *emb,
                        const ss_ctr_example *const *batch, size_t count, float lr, float emb_lr,
                        double *loss_sum);

/* The same step over rows gathered from an embedding table (the table
 * path of ctr-train --emb local|remote|cached): rows[i * 26 + f] is
 * example i's row of field f (read only), and d loss / d row is added to
 * grads[i * 26 + f] (rows of one id share one buffer). The caller pushes
 * the summed gradients to the table, whose optimizer applies them. */
void ss_ctr_train_batch_gathered(ss_ctr_worker *w, float *dense, const float *const *rows,
                                 float *const *grads, const ss_ctr_example *const *batch,
                                 size_t count, float lr, double *loss_sum);

/* Id of an example's row of field f in one table holding every field:
 * field * table_rows + ss_ctr_row_index. */
uint64_t ss_ctr_row_id(const ss_ctr_model_config *cfg, int field, const ss_ctr_example *ex);

/* Click probability for one example. */
float ss_ctr_predict(ss_ctr_worker *w, const float *dense, const ss_ctr_embeddings *emb,
                     const ss_ctr_example *ex);

#endif
