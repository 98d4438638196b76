/* The reference training run: N trainers in one process, each with its own
 * dense replica and Hogwild worker threads, reading a disjoint 1/N of the
 * data, epoch after epoch in a new order, until the validation loss stops
 * improving; embeddings shared in process. Replicas are kept
 * together by the shadow engine in the background, by the same rounds in
 * the foreground every K steps, or not at all. In process mode the one
 * trainer of this process syncs with other processes through the public
 * trainer hooks (libshadowsync) and parameter servers. */
#ifndef SS_CTR_RUN_H
#define SS_CTR_RUN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "shadow/engine.h"
#include "shadowsync/shadowsync.h"
#include "tools/ctr/criteo.h"
#include "tools/ctr/dlrm.h"
#include "tools/ctr/emb_path.h"
#include "tools/ctr/eval.h"
#include "tools/ctr/stream.h"

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
    ss__ctr_optimizer optimizer;  /* the dense part's (each trainer its own state) */
    float lr, emb_lr;             /* emb_lr: the embeddings' optimizer (emb_optimizer) */
    float lr_scale;               /* lr is one trainer's lr times this (synced trainers); a
                                     lone replica (after a restore) divides it back */
    uint32_t epochs;              /* at most this many passes over the data */
    uint32_t patience;            /* stop after this many epochs without a better validation
                                     loss, and keep the best epoch's model (0: all epochs) */
    bool shuffle;                 /* every epoch, each trainer's rows in a new order */
    bool train_val_last;          /* after early stopping, one pass over the validation rows */
    uint32_t val_rank, val_world; /* process mode: this process trains validation rows
                                     val_rank, val_rank + val_world, ... (0, 1: all) */
    double base_ctr;              /* the output bias starts at logit(base_ctr); 0: the
                                     training rows' click rate */
    const char *predictions_out;  /* optional: one test prediction per line */
    uint64_t seed;
    uint32_t round_deadline_ms;
    uint32_t link_latency_us; /* in-process link emulation (benchmarks) */
    double link_gbps;
    uint32_t encoding;   /* ss__encoding of in-process sync (compressed sync) */
    bool error_feedback; /* false: an ablation (in-process only) */
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
    const char *emb_ps;               /* remote/cached shards; NULL = the process config's ps */
    const char *emb_shard_map;        /* or a shard map file of them, followed; NULL = none */
    ss_table_optimizer emb_optimizer; /* both paths: the array and the table */
    size_t emb_cache_rows;            /* cached mode */
    float emb_alpha;                  /* cached mode: elastic rate of the row sync */
    const char *emb_encoding;         /* cached mode: the row sync's encoding; NULL = f32 */
    uint32_t emb_sync_ms;             /* cached mode: pause between row-sync passes */
    bool emb_prefetch;                /* fetch the next batch's rows while training */
    uint32_t emb_warm_batches;        /* cached: batches warmed per ss_table_warm (0: none) */
    /* Online training: one pass over this stream, chunk by chunk (train is
     * its first chunk; no validation, no epochs; test may be empty: no
     * final evaluation). Each example is scored before it is trained on:
     * progressive NE overall and over the last progressive_window rows. */
    ss__ctr_stream *stream;
    uint64_t progressive_window;
    FILE *progressive_out; /* optional: "rows clicks logloss_sum" per chunk (bootstraps) */
} ss__ctr_train_config;

typedef struct ss__ctr_trainer_result {
    uint64_t examples;
    double seconds, examples_per_s;
    ss__group_stats sync;    /* zeroed when sync is none */
    ss__ctr_quality quality; /* of this trainer's replica, when eval_each */
} ss__ctr_trainer_result;

typedef struct ss__ctr_train_result {
    ss_table_stats emb; /* table path only */
    ss__ctr_trainer_result trainer[SS_CTR_MAX_TRAINERS];
    uint64_t examples;
    double seconds, examples_per_s;
    double train_loss; /* mean log loss over the training passes */
    uint64_t rounds;
    double gap_mean; /* mean over trainers of each trainer's mean */
    uint64_t gap_p50_worst, gap_p99_worst, gap_max_worst; /* the largest over trainers */
    uint64_t failed_rounds, rejoins;                      /* summed over trainers */
    uint32_t epochs, best_epoch; /* run; the one whose model is evaluated */
    double val_logloss;          /* of the best epoch (NAN: no validation set) */
    ss__ctr_quality quality;     /* of the final model on the test set */
    char model_evaluated[48];    /* "replica0", "central", "replica0@epoch3" */
    /* Online: progressive NE (each example scored before its step), over
     * the whole stream and over its last window (NAN: not a stream). */
    double progressive_ne, progressive_ne_window;
    char error[512]; /* on failure: the library's message (ss_last_error), or "" */
} ss__ctr_train_result;

/* Sets every field to the reference defaults: the library's for the sync
 * and the table (ss_trainer_config_init, ss_table_config_init), the
 * reference model's own for its shape, optimizers and rates. */
void ss__ctr_train_config_default(ss__ctr_train_config *cfg);
/* The sync and table fields from the library's settings (algo, alpha,
 * bmuf_*, shadow_threads, sync_every, min_round_gap, round_interval_us,
 * final_rounds, encoding; the table's dim, init_scale, optimizer, lr,
 * cache_rows, alpha, sync_interval_ms, encoding, ps): one mapping for the
 * defaults and for ctr-train's flags. SS_ERR_INVALID_ARGUMENT with why
 * for an algo or encoding it does not know. */
ss_status ss__ctr_train_config_settings(ss__ctr_train_config *cfg, const ss_trainer_config *t,
                                        const ss_table_config *tb, char *why, size_t whylen);

/* val: rows for early stopping (NULL or empty: every epoch runs and the
 * last one's model is evaluated). */
ss_status ss__ctr_train_run(const ss__ctr_train_config *cfg, const ss__ctr_dataset *train,
                            const ss__ctr_dataset *val, const ss__ctr_dataset *test,
                            ss__ctr_train_result *res);

/* A model's scores on a dataset (single thread); train_ctr normalizes NE.
 * predictions_out: optional file of one prediction per row. */
ss_status ss__ctr_evaluate(const ss__ctr_model_config *mcfg, const float *dense,
                           const ss__ctr_embeddings *emb, const ss__ctr_dataset *data,
                           double train_ctr, const char *predictions_out, ss__ctr_quality *out);

#endif
