/* The reference training run: N trainers in one process, each with its own
 * dense replica and Hogwild worker threads, reading a disjoint 1/N of the
 * data in one pass; embeddings shared in process. Replicas are kept
 * together by the shadow engine in the background, by the same rounds in
 * the foreground every K steps, or not at all. In process mode the one
 * trainer of this process syncs with other processes through the public
 * trainer hooks (libshadowsync) and parameter servers. */
#ifndef SS_CTR_TRAIN_H
#define SS_CTR_TRAIN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "shadow/engine.h"
#include "shadowsync/shadowsync.h"
#include "tools/ctr/criteo.h"
#include "tools/ctr/emb_path.h"
#include "tools/ctr/model.h"

typedef enum ss__ctr_sync_mode {
    SS_CTR_SYNC_NONE,
    SS_CTR_SYNC_SHADOW,
    SS_CTR_SYNC_FOREGROUND
} ss__ctr_sync_mode;

ss_status ss__ctr_sync_mode_parse(const char *text, ss__ctr_sync_mode *out);
const char *ss__ctr_sync_mode_name(ss__ctr_sync_mode mode);

#define SS_CTR_MAX_TRAINERS 64

typedef struct ss__ctr_train_config {
    ss__ctr_model_config model;
    uint32_t trainers;       /* replicas */
    uint32_t workers;        /* Hogwild threads per trainer */
    uint32_t shadow_threads; /* per trainer, shadow mode */
    ss__ctr_sync_mode sync;
    ss__sync_params params;
    uint32_t sync_every; /* K, foreground mode */
    uint32_t batch;
    float lr, emb_lr;
    uint64_t seed;
    uint32_t round_deadline_ms;
    uint32_t link_latency_us; /* in-process link emulation (benchmarks) */
    double link_gbps;
    uint64_t round_interval_us;
    uint64_t min_round_gap;
    uint32_t final_rounds; /* rounds per trainer after training, before eval */
    bool eval_central;     /* evaluate the central variable instead of replica 0 */
    bool eval_each;        /* also evaluate every trainer's replica */
    double progress_interval_s;
    FILE *progress;       /* progress lines go here; NULL = quiet */
    ss__metrics *metrics; /* engines register here; NULL = private registries */
    /* Process mode: this process is one trainer of a cluster and syncs
     * through the public trainer hooks with these settings (trainers must
     * be 1; sync, params, sync_every, final_rounds come from here, the
     * fields above are ignored for sync). NULL: in-process replicas. */
    const ss_trainer_config *process;
    const char *dense_out; /* optional: trainer 0's final dense replica, raw float32 */
    /* Embeddings: the shared array (default) or one ss_table of the public
     * API in local, remote or cached mode (emb_lr is the table's lr). */
    ss__ctr_emb_mode emb;
    const char *emb_ps; /* remote/cached shards; NULL = the process config's ps */
    ss_table_optimizer emb_optimizer;
    size_t emb_cache_rows; /* cached mode */
    float emb_alpha;       /* cached mode: elastic rate of the row sync */
    uint32_t emb_sync_ms;  /* cached mode: pause between row-sync passes */
    bool emb_prefetch;     /* fetch the next batch's rows while training */
} ss__ctr_train_config;

typedef struct ss__ctr_trainer_result {
    uint64_t examples;
    double seconds, examples_per_s;
    ss__group_stats sync; /* zeroed when sync is none */
    double ne, auc;       /* of this trainer's replica, when eval_each */
} ss__ctr_trainer_result;

typedef struct ss__ctr_train_result {
    ss_table_stats emb; /* table path only */
    ss__ctr_trainer_result trainer[SS_CTR_MAX_TRAINERS];
    uint64_t examples;
    double seconds, examples_per_s;
    double train_loss; /* mean log loss over the training pass */
    uint64_t rounds;
    double gap_mean;  /* mean over trainers */
    uint64_t gap_p99; /* max over trainers */
    double ne, auc;   /* of the final model */
    const char *model_evaluated;
} ss__ctr_train_result;

/* Sets every field to the reference defaults. */
void ss__ctr_train_config_default(ss__ctr_train_config *cfg);

ss_status ss__ctr_train_run(const ss__ctr_train_config *cfg, const ss__ctr_dataset *train,
                            const ss__ctr_dataset *test, ss__ctr_train_result *res);

/* NE and AUC of a model on a dataset (single thread). */
ss_status ss__ctr_evaluate(const ss__ctr_model_config *mcfg, const float *dense,
                           const ss__ctr_embeddings *emb, const ss__ctr_dataset *test, double *ne,
                           double *auc);

#endif
