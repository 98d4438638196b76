/* ctr-train's embedding table path (--emb local|remote|cached): the rows
 * of a minibatch are gathered from an ss_table of the public API (all 26
 * fields in one table, id = field * table_rows + row), the batch trains on
 * private copies, and the summed row gradients are pushed back; the
 * table's optimizer applies them (locally, on the shards, or in the
 * cache). The default --emb array keeps the shared Hogwild array. */
#ifndef SS_CTR_EMB_PATH_H
#define SS_CTR_EMB_PATH_H

#include <stdbool.h>

#include "shadowsync/shadowsync.h"
#include "tools/ctr/dlrm.h"

typedef enum ss__ctr_emb_mode {
    SS_CTR_EMB_ARRAY = 0, /* shared in-process array (no table) */
    SS_CTR_EMB_LOCAL,
    SS_CTR_EMB_REMOTE,
    SS_CTR_EMB_CACHED
} ss__ctr_emb_mode;

ss_status ss__ctr_emb_mode_parse(const char *text, ss__ctr_emb_mode *out);
const char *ss__ctr_emb_mode_name(ss__ctr_emb_mode mode);

/* The tables of the table path: the rows, and the first-order weights
 * (one float each, SGD at --wide-lr; NULL without them), both by the ids
 * of ss__ctr_wide_ids (a row's weight has the row's id). */
typedef struct ss__ctr_tables {
    ss_table *rows, *wide;
} ss__ctr_tables;

/* One minibatch in flight through the tables. A worker keeps three: the
 * one training, the next one's rows on their way, and the one trained
 * before, whose gradients go to the table with that fetch (one round
 * trip per step for a remote table: ss_table_push_prefetch). */
typedef struct ss__ctr_gather ss__ctr_gather;

ss_status ss__ctr_gather_create(const ss__ctr_model_config *cfg, uint32_t batch,
                                ss__ctr_gather **out, char *why, size_t whylen);
void ss__ctr_gather_destroy(ss__ctr_gather *g);
/* Takes the batch, collects its distinct row ids and starts fetching
 * their rows (in the background when prefetch). done (optional): a
 * trained batch whose gradients are not pushed yet; they are pushed
 * first, with the fetch. */
ss_status ss__ctr_gather_begin(ss__ctr_gather *g, const ss__ctr_tables *t,
                               const ss__ctr_example *const *batch, size_t count, bool prefetch,
                               ss__ctr_gather *done);
/* Waits for the rows and trains the batch; its row gradients stay in g
 * for ss__ctr_gather_begin or ss__ctr_gather_push. */
ss_status ss__ctr_gather_train(ss__ctr_gather *g, ss__ctr_worker *w, float *dense,
                               ss__ctr_dense_opt *opt, double *loss_sum);
/* Pushes a trained batch's gradients on their own (the last batch). */
ss_status ss__ctr_gather_push(ss__ctr_gather *g, const ss__ctr_tables *t);
/* Copies every row of the tables into emb (to evaluate with the array
 * code), the first-order weights into emb->wide. */
ss_status ss__ctr_emb_materialize(const ss__ctr_tables *t, ss__ctr_embeddings *emb);
/* Only the rows a dataset's examples use (a validation pass). */
ss_status ss__ctr_emb_materialize_rows(const ss__ctr_tables *t, const ss__ctr_model_config *cfg,
                                       ss__ctr_embeddings *emb, const ss__ctr_dataset *data);

#endif
