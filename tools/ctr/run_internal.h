/* What tools/ctr/run.c (a run: epochs, validation, the sync engines)
 * and tools/ctr/workers.c (the Hogwild workers' loop) share. */
#ifndef SS_CTR_RUN_INTERNAL_H
#define SS_CTR_RUN_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "shadow/engine.h"
#include "shadow/replica.h"
#include "shadowsync/shadowsync.h"
#include "tools/ctr/emb_path.h"
#include "tools/ctr/run.h"

typedef struct trainer {
    struct run *run;
    uint32_t index;
    ss__replica *replica; /* in-process mode */
    ss__engine *engine;
    ss__engine_group *group;
    ss_trainer *hooks; /* process mode */
    ss_dense *hooks_dense;
    float *dense;
    ss__ctr_dense_opt opt;     /* this trainer's optimizer state, shared by its workers */
    size_t count;              /* examples in this trainer's 1/N of the data */
    size_t *order;             /* this epoch's order of them */
    uint32_t stride;           /* rows index, index + stride, ...: the trainers of this pass */
    _Atomic size_t cursor;     /* next example (in the trainer's own index) */
    _Atomic size_t warmed;     /* examples before this one are warmed (cached tables) */
    _Atomic uint64_t steps;    /* minibatches done by all workers */
    _Atomic uint64_t examples; /* examples trained */
    _Atomic uint32_t workers_left;
    uint64_t t_start, t_end;
} trainer;

typedef struct run {
    const ss__ctr_train_config *cfg;
    const ss__ctr_dataset *train, *test;
    const ss__ctr_dataset *val;  /* early stopping; NULL = none */
    const ss__ctr_dataset *pass; /* the rows of the pass running now: train or val */
    double train_ctr;            /* NE's normalizer */
    double base_ctr;             /* the output bias starts at its logit */
    ss__ctr_layout L;            /* of the dense replica */
    bool syncing;                /* the engines here sync the replicas (in-process runs) */
    ss__transport *transport;    /* in-process runs that sync */
    ss__ctr_embeddings emb;
    ss__ctr_tables tables; /* the table path (rows NULL: the shared array) */
    trainer tr[SS_CTR_MAX_TRAINERS];
    _Atomic uint32_t trainers_left;
    _Atomic uint64_t loss_sum_micro; /* summed loss in micro-units */
    _Atomic int failed;              /* a worker's failure (ss_status; 0 = none) */
    float *best_dense, *best_emb;    /* the best epoch's model (early stopping) */
    uint64_t t_begin;                /* the first epoch's start (progress lines) */
    bool restored;                   /* the best epoch's model is back in replica 0; sync is over */
    pthread_mutex_t done_lock;
    pthread_cond_t done_cond;
} run;

typedef struct worker_arg {
    trainer *tr;
} worker_arg;

/* The workers' pass over rows (the training rows, a chunk of the stream,
 * or at the end the validation rows), with progress lines in epoch mode;
 * its wall time is added to *seconds. shuffle: in a new order, else in
 * file order. epoch 1 starts the run's clocks. */
ss_status ss__ctr_train_pass(run *r, const ss__ctr_dataset *rows, uint32_t epoch, bool shuffle,
                             uint32_t trainers, double *seconds);

/* Step 3 of an online run (tools/ctr/online.c): one pass over the stream
 * with progressive validation and progress lines. */
ss_status ss__ctr_run_stream(run *r, ss__ctr_train_result *res);

/* A worker of a trainer (pthread main; arg: a worker_arg) until the
 * pass's examples run out. */
void *ss__ctr_worker_main(void *arg);

/* The first failure of a worker is the run's (later ones are its echoes). */
static inline void ss__ctr_run_failed(run *r, ss_status st) {
    int none = 0;
    atomic_compare_exchange_strong(&r->failed, &none, (int)st);
}

#endif
