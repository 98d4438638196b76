#include "tools/ctr/run.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/names.h"
#include "shadow/codec.h"
#include "shadow/inproc_transport.h"
#include "shadow/kernels.h"
#include "tools/ctr/eval.h"
#include "tools/ctr/rng.h"
#include "tools/ctr/run_internal.h"

static const char *const mode_names[] = {"none", "shadow", "foreground"};

ss_status ss__ctr_sync_mode_parse(const char *text, ss__ctr_sync_mode *out) {
    if (!text || !out)
        return SS_ERR_INVALID_ARGUMENT;
    const int i = ss__name_index(text, mode_names, 3);
    if (i < 0)
        return SS_ERR_INVALID_ARGUMENT;
    *out = (ss__ctr_sync_mode)i;
    return SS_OK;
}

const char *ss__ctr_sync_mode_name(ss__ctr_sync_mode mode) {
    return (unsigned)mode < 3 ? mode_names[mode] : "unknown";
}

ss_status ss__ctr_train_config_settings(ss__ctr_train_config *cfg, const ss_trainer_config *t,
                                        const ss_table_config *tb, char *why, size_t whylen) {
    ss__encoding enc;
    if (ss__algo_parse(t->algo, &cfg->params.algo) != SS_OK) {
        snprintf(why, whylen, "algo \"%s\": not easgd, ma or bmuf", t->algo);
        return SS_ERR_INVALID_ARGUMENT;
    }
    if (!ss__encoding_parse(t->encoding, &enc)) {
        snprintf(why, whylen, "encoding \"%s\": not f32, fp16, bf16 or int8", t->encoding);
        return SS_ERR_INVALID_ARGUMENT;
    }
    cfg->encoding = (uint32_t)enc;
    cfg->params.alpha = t->alpha;
    cfg->params.bmuf =
        (ss__bmuf_params){.eta = t->bmuf_eta, .zeta = t->bmuf_zeta, .nesterov = t->bmuf_nesterov};
    cfg->shadow_threads = t->shadow_threads;
    cfg->sync_every = t->sync_every;
    cfg->min_round_gap = t->min_round_gap;
    cfg->round_interval_us = t->round_interval_us;
    cfg->final_rounds = t->final_rounds;
    cfg->model.emb_dim = tb->dim;
    cfg->model.emb_init_scale = tb->init_scale;
    cfg->emb_optimizer = tb->optimizer;
    cfg->emb_lr = tb->lr;
    cfg->emb_cache_rows = tb->cache_rows;
    cfg->emb_alpha = tb->alpha;
    cfg->emb_sync_ms = tb->sync_interval_ms;
    cfg->emb_encoding = tb->encoding;
    cfg->emb_ps = tb->ps;
    cfg->emb_shard_map = tb->shard_map;
    return SS_OK;
}

void ss__ctr_train_config_default(ss__ctr_train_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    /* The sync and table settings: the library's defaults. */
    ss_trainer_config t;
    ss_table_config tb;
    ss_trainer_config_init(&t);
    ss_table_config_init(&tb, "ctr", 8);
    char why[160];
    ss__ctr_train_config_settings(cfg, &t, &tb, why, sizeof why);
    /* The reference model's own: its shape, optimizers and rates. */
    cfg->model = (ss__ctr_model_config){.emb_dim = 8,
                                        .table_rows = 32768,
                                        .bottom_hidden = 32,
                                        .top_hidden = 64,
                                        .emb_init_scale = 0.05f};
    cfg->emb_optimizer = SS_TABLE_ADAGRAD;
    cfg->emb_lr = 0.03f;
    cfg->trainers = 1;
    cfg->workers = 1;
    cfg->sync = SS_CTR_SYNC_SHADOW;
    cfg->batch = 32;
    cfg->optimizer = SS_CTR_OPT_ADAM;
    cfg->lr = 0.002f;
    cfg->lr_scale = 1.0f;
    cfg->epochs = 10;
    cfg->patience = 1;
    cfg->shuffle = true;
    cfg->train_val_last = true;
    cfg->val_world = 1;
    cfg->seed = 1;
    cfg->round_deadline_ms = 500;
    cfg->error_feedback = true;
    cfg->progress_interval_s = 1.0;
    cfg->emb = SS_CTR_EMB_ARRAY;
    cfg->emb_prefetch = true;
    cfg->emb_warm_batches = 4;
}

ss_status ss__ctr_evaluate(const ss__ctr_model_config *mcfg, const float *dense,
                           const ss__ctr_embeddings *emb, const ss__ctr_dataset *data,
                           double train_ctr, const char *predictions_out, ss__ctr_quality *out) {
    if (!mcfg || !dense || !emb || !data || data->nrows == 0 || !out)
        return SS_ERR_INVALID_ARGUMENT;
    ss__ctr_worker *w;
    ss_status st = ss__ctr_worker_create(mcfg, &w, NULL, 0);
    if (st != SS_OK)
        return st;
    float *pred = malloc(data->nrows * sizeof *pred);
    float *label = malloc(data->nrows * sizeof *label);
    if (!pred || !label) {
        st = SS_ERR_NO_MEMORY;
        goto out;
    }
    for (size_t i = 0; i < data->nrows; i++) {
        pred[i] = ss__ctr_predict(w, dense, emb, &data->rows[i]);
        label[i] = data->rows[i].label;
    }
    st = ss__ctr_score(pred, label, data->nrows, train_ctr, out);
    if (st == SS_OK && predictions_out) {
        FILE *f = fopen(predictions_out, "w");
        for (size_t i = 0; f && i < data->nrows; i++)
            fprintf(f, "%.7g\n", (double)pred[i]);
        if (!f || fclose(f) != 0) {
            SS_LOG_ERRORF("ctr-train", "event=predictions_not_written path=%s", predictions_out);
            st = SS_ERR_IO;
        }
    }
out:
    free(pred);
    free(label);
    ss__ctr_worker_destroy(w);
    return st;
}

static void print_progress(run *r, uint32_t epoch, uint64_t total) {
    const uint64_t t0 = r->t_begin;
    const ss__ctr_train_config *cfg = r->cfg;
    uint64_t ex = 0, rounds = 0;
    double divergence = 0.0; /* largest over trainers, at a recent round */
    for (uint32_t t = 0; t < cfg->trainers; t++) {
        ex += atomic_load(&r->tr[t].examples);
        ss__group_stats gs;
        if (r->tr[t].engine && ss__engine_group_stats(r->tr[t].group, &gs) == SS_OK) {
            rounds += gs.rounds;
            divergence = gs.divergence > divergence ? gs.divergence : divergence;
        }
        ss_dense_stats ds;
        if (r->tr[t].hooks_dense && ss_dense_get_stats(r->tr[t].hooks_dense, &ds) == SS_OK) {
            rounds += ds.rounds;
            divergence = ds.divergence > divergence ? ds.divergence : divergence;
        }
    }
    double el = (double)(ss__now_ns() - t0) * 1e-9;
    fprintf(cfg->progress,
            "progress: t=%.1fs epoch=%u examples=%llu/%llu (%.1f%%) examples/s=%.0f "
            "sync_rounds=%llu divergence=%.4g\n",
            el, epoch, (unsigned long long)ex, (unsigned long long)total,
            total ? 100.0 * (double)ex / (double)total : 0.0, el > 0 ? (double)ex / el : 0.0,
            (unsigned long long)rounds, divergence);
    fflush(cfg->progress);
}

static ss_status check_config(const ss__ctr_train_config *cfg, const ss__ctr_dataset *train,
                              const ss__ctr_dataset *test) {
    if (!cfg || !train || !test || ss__ctr_model_config_check(&cfg->model) != SS_OK)
        return SS_ERR_INVALID_ARGUMENT;
    if (cfg->trainers == 0 || cfg->trainers > SS_CTR_MAX_TRAINERS || cfg->workers == 0 ||
        cfg->workers > 256 || cfg->batch == 0 || !(cfg->lr > 0) || !(cfg->emb_lr >= 0) ||
        cfg->epochs == 0 || (unsigned)cfg->optimizer > SS_CTR_OPT_ADAM ||
        (cfg->sync == SS_CTR_SYNC_FOREGROUND && cfg->sync_every == 0) ||
        (cfg->sync == SS_CTR_SYNC_SHADOW && cfg->shadow_threads == 0))
        return SS_ERR_INVALID_ARGUMENT;
    if (train->nrows == 0 || (!cfg->stream && (train->nrows < cfg->trainers || test->nrows == 0)))
        return SS_ERR_INVALID_ARGUMENT;
    if (cfg->process && (cfg->trainers != 1 || cfg->eval_central))
        return SS_ERR_INVALID_ARGUMENT;
    if ((unsigned)cfg->emb > SS_CTR_EMB_CACHED)
        return SS_ERR_INVALID_ARGUMENT;
    return SS_OK;
}

/* The table of the table path: held by this process's trainer hooks, or
 * standalone when the replicas are in-process (no hooks). */
static ss_status open_table(run *r) {
    const ss__ctr_train_config *cfg = r->cfg;
    ss_status st;
    ss_table_config t;
    ss_table_config_init(&t, "ctr_emb", cfg->model.emb_dim);
    t.mode = cfg->emb == SS_CTR_EMB_LOCAL    ? SS_TABLE_LOCAL
             : cfg->emb == SS_CTR_EMB_REMOTE ? SS_TABLE_REMOTE
                                             : SS_TABLE_CACHED;
    t.optimizer = cfg->emb_optimizer;
    t.lr = cfg->emb_lr;
    t.init_scale = ss__ctr_emb_init_scale(&cfg->model); /* as the shared array */
    t.cache_rows = cfg->emb_cache_rows;
    t.alpha = cfg->emb_alpha;
    t.sync_interval_ms = cfg->emb_sync_ms;
    if (cfg->emb_encoding)
        t.encoding = cfg->emb_encoding;
    t.ps = cfg->emb_ps;
    t.shard_map = cfg->emb_shard_map;
    st = ss_table_open(r->tr[0].hooks, &t, &r->tables.rows);
    if (st == SS_OK && cfg->model.wide_lr > 0.0f) {
        /* The first-order weights: one float per id, from 0, by SGD at
         * their own rate (as the array path's), in the same mode. */
        t.name = "ctr_wide";
        t.dim = 1;
        t.optimizer = SS_TABLE_SGD;
        t.lr = cfg->model.wide_lr;
        t.init_scale = 0.0f;
        st = ss_table_open(r->tr[0].hooks, &t, &r->tables.wide);
    }
    if (st != SS_OK)
        SS_LOG_ERRORF("ctr-train", "event=table_open_failed mode=%s table=%s status=%s",
                      ss__ctr_emb_mode_name(cfg->emb), t.name, ss_status_name(st));
    return st;
}

/* Pushes applied and cached rows synced, in both tables. */
static ss_status flush_tables(run *r) {
    ss_status st = ss_table_flush(r->tables.rows);
    if (st == SS_OK && r->tables.wide)
        st = ss_table_flush(r->tables.wide);
    return st;
}

/* The final replica as raw float32, for comparing trainers' models. */
static ss_status write_dense(const char *path, const float *x, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return SS_ERR_IO;
    bool ok = fwrite(x, sizeof *x, n, f) == n;
    if (fclose(f) != 0)
        ok = false;
    return ok ? SS_OK : SS_ERR_IO;
}

/* Step 1: every trainer's replica, and its engine or hooks. */
static ss_status open_trainers(run *r) {
    const ss__ctr_train_config *cfg = r->cfg;
    const uint32_t N = cfg->trainers;
    ss_status st;
    if (r->syncing) {
        ss__inproc_config icfg = {.round_deadline_ms = cfg->round_deadline_ms,
                                  .link_latency_us = cfg->link_latency_us,
                                  .link_gbps = cfg->link_gbps,
                                  .encoding = (ss__encoding)cfg->encoding,
                                  .no_error_feedback = !cfg->error_feedback};
        if ((st = ss__inproc_transport_create(&icfg, &r->transport, NULL, 0)) != SS_OK)
            return st;
    }
    for (uint32_t t = 0; t < N; t++) {
        trainer *tr = &r->tr[t];
        tr->run = r;
        tr->index = t;
        size_t most =
            r->train->nrows > (r->val ? r->val->nrows : 0) ? r->train->nrows : r->val->nrows;
        if (cfg->stream && most < SS_CTR_STREAM_MAX_CHUNK)
            most = SS_CTR_STREAM_MAX_CHUNK; /* every chunk of the stream fits */
        if (!(tr->order = malloc(((most + N - 1) / N + 1) * sizeof *tr->order)))
            return SS_ERR_NO_MEMORY;
        if ((st = ss__ctr_dense_opt_init(&tr->opt, cfg->optimizer, cfg->lr, r->L.total)) != SS_OK)
            return st;
        if (cfg->process) {
            float *init = malloc(r->L.total * sizeof *init);
            if (!init)
                return SS_ERR_NO_MEMORY;
            /* Same seed and base rate in every process: replicas start identical. */
            ss__ctr_dense_init(&cfg->model, init, cfg->seed);
            ss__ctr_dense_init_bias(&cfg->model, init, r->base_ctr);
            if ((st = ss_trainer_open(cfg->process, &tr->hooks)) == SS_OK)
                st = ss_trainer_add_dense(tr->hooks, "dense", r->L.total, init, &tr->hooks_dense);
            free(init);
            if (st != SS_OK)
                return st;
            tr->dense = ss_dense_data(tr->hooks_dense);
            continue;
        }
        if ((st = ss__replica_create(r->L.total, &tr->replica, NULL, 0)) != SS_OK)
            return st;
        tr->dense = ss__replica_data(tr->replica);
        /* Same seed everywhere: replicas start identical, as after a broadcast. */
        ss__ctr_dense_init(&cfg->model, tr->dense, cfg->seed);
        ss__ctr_dense_init_bias(&cfg->model, tr->dense, r->base_ctr);
        if (!r->syncing)
            continue;
        char name[32];
        snprintf(name, sizeof name, "t%u", t);
        ss__engine_config ecfg = {.transport = r->transport,
                                  .metrics = cfg->metrics,
                                  .trainer = name,
                                  .threads = cfg->shadow_threads ? cfg->shadow_threads : 1,
                                  .round_interval_us = cfg->round_interval_us,
                                  .min_round_gap = cfg->min_round_gap};
        if ((st = ss__engine_create(&ecfg, &tr->engine, NULL, 0)) != SS_OK ||
            (st = ss__engine_add_group(tr->engine, "dense", tr->replica, &cfg->params,
                                       &tr->group)) != SS_OK)
            return st;
    }
    return SS_OK;
}

/* Every trainer's rows in a new order (Fisher-Yates, seeded by the run's
 * seed, the epoch and the trainer: the same in every run). */
static void shuffle_rows(trainer *tr, uint32_t epoch) {
    ss__rng rng;
    ss__rng_seed(&rng, tr->run->cfg->seed * 0x9e3779b97f4a7c15ull + epoch * 1000003ull + tr->index);
    for (size_t i = tr->count; i > 1; i--) {
        size_t j = (size_t)(ss__rng_uniform(&rng) * (double)i);
        if (j >= i)
            j = i - 1;
        size_t tmp = tr->order[i - 1];
        tr->order[i - 1] = tr->order[j];
        tr->order[j] = tmp;
    }
}

/* Step 2: the background engines run through every epoch. */
static ss_status start_engines(run *r) {
    ss_status st = SS_OK;
    if (r->syncing && r->cfg->sync == SS_CTR_SYNC_SHADOW)
        for (uint32_t t = 0; t < r->cfg->trainers && st == SS_OK; t++)
            st = ss__engine_start(r->tr[t].engine, NULL, 0);
    return st;
}

/* Step 3, once per epoch (run_internal.h). */
ss_status ss__ctr_train_pass(run *r, const ss__ctr_dataset *rows, uint32_t epoch, bool shuffle,
                             uint32_t trainers, double *seconds) {
    const ss__ctr_train_config *cfg = r->cfg;
    const uint32_t N = cfg->trainers;
    ss_status st = SS_OK;
    pthread_t *threads = calloc((size_t)N * cfg->workers, sizeof *threads);
    worker_arg *wargs = calloc(N, sizeof *wargs);
    size_t nthreads = 0;
    if (!threads || !wargs) {
        free(threads);
        free(wargs);
        return SS_ERR_NO_MEMORY;
    }
    atomic_store(&r->trainers_left, N);
    r->pass = rows;
    for (uint32_t t = 0; t < N; t++) {
        trainer *tr = &r->tr[t];
        tr->count =
            t < trainers && rows->nrows > t ? (rows->nrows - t + trainers - 1) / trainers : 0;
        tr->stride = trainers;
        for (size_t i = 0; i < tr->count; i++)
            tr->order[i] = i;
        atomic_store(&tr->cursor, 0);
        atomic_store(&tr->warmed, 0);
        atomic_store(&tr->workers_left, cfg->workers);
        if (shuffle)
            shuffle_rows(tr, epoch);
    }
    const uint64_t t0 = ss__now_ns();
    if (epoch == 1)
        r->t_begin = t0;
    for (uint32_t t = 0; t < N && st == SS_OK; t++) {
        wargs[t].tr = &r->tr[t];
        if (epoch == 1)
            r->tr[t].t_start = t0;
        for (uint32_t k = 0; k < cfg->workers; k++) {
            if (pthread_create(&threads[nthreads], NULL, ss__ctr_worker_main, &wargs[t]) != 0) {
                st = SS_ERR_NO_MEMORY;
                ss__ctr_run_failed(r, st);
                break;
            }
            nthreads++;
        }
    }
    /* Progress until every trainer has finished its pass. */
    pthread_mutex_lock(&r->done_lock);
    uint64_t next_report = t0 + (uint64_t)(cfg->progress_interval_s * 1e9);
    while (atomic_load(&r->trainers_left) > 0 && nthreads == (size_t)N * cfg->workers) {
        struct timespec ts = ss__deadline_in(100000000ull);
        pthread_cond_timedwait(&r->done_cond, &r->done_lock, &ts);
        if (cfg->progress && !cfg->stream && cfg->progress_interval_s > 0 &&
            ss__now_ns() >= next_report) {
            pthread_mutex_unlock(&r->done_lock);
            print_progress(r, epoch, (uint64_t)epoch * r->train->nrows);
            pthread_mutex_lock(&r->done_lock);
            next_report += (uint64_t)(cfg->progress_interval_s * 1e9);
        }
    }
    pthread_mutex_unlock(&r->done_lock);
    for (size_t i = 0; i < nthreads; i++)
        pthread_join(threads[i], NULL);
    *seconds += (double)(ss__now_ns() - t0) * 1e-9;
    free(threads);
    free(wargs);
    if (st == SS_OK && atomic_load(&r->failed))
        st = (ss_status)atomic_load(&r->failed);
    return st;
}

/* The model under evaluation as it is now: the central variable (read into
 * buf) or replica 0. */
static ss_status current_model(run *r, float *buf, const float **out) {
    if (r->syncing && r->cfg->eval_central && !r->restored) {
        *out = buf;
        return ss__transport_read_central(r->transport, "dense", buf, r->L.total);
    }
    *out = r->tr[0].dense;
    return SS_OK;
}

/* After an epoch: the validation loss of the model under evaluation. The
 * array path keeps a copy of the best epoch's model (dense and
 * embeddings); the table path cannot put its shards back, so it only
 * stops. Returns whether this epoch was the best so far. */
static ss_status validate_epoch(run *r, uint32_t epoch, float *buf, double *best, bool *better) {
    const ss__ctr_train_config *cfg = r->cfg;
    ss_status st = SS_OK;
    *better = false;
    if (r->tables.rows &&
        ((st = flush_tables(r)) != SS_OK ||
         (st = ss__ctr_emb_materialize_rows(&r->tables, &cfg->model, &r->emb, r->val)) != SS_OK))
        return st;
    const float *model;
    ss__ctr_quality q;
    if ((st = current_model(r, buf, &model)) != SS_OK ||
        (st = ss__ctr_evaluate(&cfg->model, model, &r->emb, r->val, r->train_ctr, NULL, &q)) !=
            SS_OK)
        return st;
    *better = q.logloss < *best;
    if (*better) {
        *best = q.logloss;
        /* The array path in one process: the best model is kept (a
         * table's rows live on its shards, another process's replica in
         * that process). */
        if (!r->tables.rows && !cfg->process && cfg->patience > 0) {
            const size_t ne = ss__ctr_embeddings_floats(&r->emb);
            if (!r->best_dense && !(r->best_dense = malloc(r->L.total * sizeof(float))))
                return SS_ERR_NO_MEMORY;
            if (!r->best_emb && !(r->best_emb = malloc(ne * sizeof(float))))
                return SS_ERR_NO_MEMORY;
            ss__kernel_live_snapshot(r->best_dense, model, r->L.total);
            ss__kernel_live_snapshot(r->best_emb, r->emb.data, ne);
        }
    }
    if (cfg->progress)
        fprintf(cfg->progress, "epoch %u: validation rows=%zu logloss=%.5f ne=%.5f%s\n", epoch, q.n,
                q.logloss, q.ne, *better ? " (best so far)" : "");
    return SS_OK;
}

/* Step 3: epochs until the validation loss has not improved for patience
 * epochs (or cfg->epochs ran). */
static ss_status run_epochs(run *r, ss__ctr_train_result *res) {
    const ss__ctr_train_config *cfg = r->cfg;
    const bool validate = r->val && r->val->nrows > 0;
    float *buf = malloc(r->L.total * sizeof *buf);
    if (!buf)
        return SS_ERR_NO_MEMORY;
    double best = INFINITY;
    uint32_t worse = 0;
    ss_status st = SS_OK;
    res->val_logloss = NAN;
    for (uint32_t epoch = 1; epoch <= cfg->epochs && st == SS_OK; epoch++) {
        if ((st = ss__ctr_train_pass(r, r->train, epoch, cfg->shuffle, cfg->trainers,
                                     &res->seconds)) != SS_OK)
            break;
        res->epochs = res->best_epoch = epoch;
        if (!validate)
            continue;
        bool better;
        if ((st = validate_epoch(r, epoch, buf, &best, &better)) != SS_OK)
            break;
        res->val_logloss = best;
        if (better) {
            worse = 0;
        } else if (cfg->patience > 0 && ++worse >= cfg->patience) {
            break;
        }
    }
    if (st == SS_OK && validate && r->best_dense && worse > 0) {
        /* Back to the best epoch's model (replica 0's, or the central
         * variable's), into replica 0, as from a checkpoint: the sync is
         * over (its central state is the later epochs'), replica 0 is the
         * model from here on. */
        res->best_epoch = res->epochs - worse;
        r->restored = true;
        if (r->syncing)
            for (uint32_t t = 0; t < cfg->trainers; t++)
                ss__engine_stop(r->tr[t].engine);
        memcpy(r->tr[0].dense, r->best_dense, r->L.total * sizeof(float));
        if (cfg->lr_scale > 0.0f) /* replica 0 trains alone from here */
            r->tr[0].opt.lr = cfg->lr / cfg->lr_scale;
        memcpy(r->emb.data, r->best_emb, ss__ctr_embeddings_floats(&r->emb) * sizeof(float));
    }
    /* The validation rows are the newest: once they have chosen the epoch,
     * the model learns from them too, once, in file order (as a
     * production trainer goes on with the newest data); after a restore,
     * replica 0 alone. */
    if (st == SS_OK && validate && cfg->train_val_last) {
        /* Several processes hold the same validation rows: each trains its
         * share. */
        ss__ctr_dataset share = *r->val;
        const uint32_t world = cfg->val_world ? cfg->val_world : 1;
        if (world > 1) {
            share.rows = malloc((r->val->nrows / world + 1) * sizeof *share.rows);
            if (!share.rows) {
                free(buf);
                return SS_ERR_NO_MEMORY;
            }
            share.nrows = 0;
            for (size_t i = cfg->val_rank; i < r->val->nrows; i += world)
                share.rows[share.nrows++] = r->val->rows[i];
        }
        st = ss__ctr_train_pass(r, &share, res->epochs + 1, false, r->restored ? 1 : cfg->trainers,
                                &res->seconds);
        if (world > 1)
            free(share.rows);
    }
    free(buf);
    return st;
}

typedef struct final_arg {
    trainer *tr;
    uint32_t rounds;
} final_arg;

static void *final_rounds_main(void *arg) {
    final_arg *fa = arg;
    for (uint32_t i = 0; i < fa->rounds; i++)
        ss__engine_run_round(fa->tr->engine, fa->tr->group);
    return NULL;
}

/* Step 4: the final rounds, then the table's rows as this trainer sees
 * them into the array the evaluation reads. */
static ss_status finish_sync(run *r, ss__ctr_train_result *res) {
    const ss__ctr_train_config *cfg = r->cfg;
    const uint32_t N = cfg->trainers;
    ss_status st;
    const bool rounds = r->syncing && !r->restored && cfg->final_rounds > 0;
    if (rounds && cfg->params.algo == SS_ALGO_EASGD) {
        /* S-EASGD: round-robin, one exchange per trainer per pass, so every
         * replica meets the centre after the others have moved it (run
         * trainer by trainer, an in-process exchange takes microseconds and
         * trainer 0 would be done before the others began). */
        for (uint32_t k = 0; k < cfg->final_rounds; k++)
            for (uint32_t t = 0; t < N; t++)
                ss__engine_run_round(r->tr[t].engine, r->tr[t].group);
    } else if (rounds) {
        /* All members at once, so MA/BMUF rounds close without deadlines. */
        pthread_t fin[SS_CTR_MAX_TRAINERS];
        final_arg fargs[SS_CTR_MAX_TRAINERS];
        for (uint32_t t = 0; t < N; t++) {
            fargs[t] = (final_arg){.tr = &r->tr[t], .rounds = cfg->final_rounds};
            pthread_create(&fin[t], NULL, final_rounds_main, &fargs[t]);
        }
        for (uint32_t t = 0; t < N; t++)
            pthread_join(fin[t], NULL);
    }
    if (r->syncing)
        for (uint32_t t = 0; t < N; t++)
            ss__engine_stop(r->tr[t].engine);
    if (cfg->process && (st = ss_trainer_finish(r->tr[0].hooks)) != SS_OK)
        SS_LOG_WARNF("ctr-train", "event=final_rounds_failed status=%s", ss_status_name(st));
    if (!r->tables.rows)
        return SS_OK;
    /* Pushes applied / cached rows synced, then the rows. */
    if ((st = flush_tables(r)) == SS_OK)
        st = ss__ctr_emb_materialize(&r->tables, &r->emb);
    ss_table_get_stats(r->tables.rows, &res->emb);
    return st;
}

/* Step 4: per-trainer throughput, sync stats and (optionally) quality. */
static ss_status collect_trainers(run *r, ss__ctr_train_result *res) {
    const ss__ctr_train_config *cfg = r->cfg;
    const uint32_t N = cfg->trainers;
    double gap_sum = 0.0;
    res->examples = 0;
    for (uint32_t t = 0; t < N; t++) {
        trainer *tr = &r->tr[t];
        ss__ctr_trainer_result *tres = &res->trainer[t];
        tres->examples = atomic_load(&tr->examples);
        tres->seconds = (double)(tr->t_end - tr->t_start) * 1e-9;
        tres->examples_per_s = tres->seconds > 0 ? (double)tres->examples / tres->seconds : 0;
        res->examples += tres->examples;
        if (tr->hooks_dense) {
            ss_dense_stats ds;
            ss_dense_get_stats(tr->hooks_dense, &ds);
            tres->sync = (ss__group_stats){.rounds = ds.rounds,
                                           .failed_rounds = ds.failed_rounds,
                                           .rejoins = ds.rejoins,
                                           .gap_mean = ds.gap_mean,
                                           .gap_p50 = ds.gap_p50,
                                           .gap_p99 = ds.gap_p99,
                                           .gap_max = ds.gap_max,
                                           .divergence = ds.divergence};
        } else if (r->syncing) {
            ss__engine_group_stats(tr->group, &tres->sync);
        }
        if (tr->hooks_dense || r->syncing) {
            const ss__group_stats *g = &tres->sync;
            res->rounds += g->rounds;
            gap_sum += g->gap_mean;
            res->gap_p50_worst = g->gap_p50 > res->gap_p50_worst ? g->gap_p50 : res->gap_p50_worst;
            res->gap_p99_worst = g->gap_p99 > res->gap_p99_worst ? g->gap_p99 : res->gap_p99_worst;
            res->gap_max_worst = g->gap_max > res->gap_max_worst ? g->gap_max : res->gap_max_worst;
            res->failed_rounds += g->failed_rounds;
            res->rejoins += g->rejoins;
        }
        ss_status st;
        if (cfg->eval_each && r->test->nrows &&
            (st = ss__ctr_evaluate(&cfg->model, tr->dense, &r->emb, r->test, r->train_ctr, NULL,
                                   &tres->quality)) != SS_OK)
            return st;
    }
    res->gap_mean = gap_sum / N;
    res->examples_per_s = res->seconds > 0 ? (double)res->examples / res->seconds : 0.0;
    res->train_loss = res->examples
                          ? (double)atomic_load(&r->loss_sum_micro) * 1e-6 / (double)res->examples
                          : 0.0;
    return SS_OK;
}

/* Step 6: the model's scores on the test set: the central variable or
 * replica 0 (also written to --dense-out). */
static ss_status evaluate_model(run *r, ss__ctr_train_result *res) {
    const ss__ctr_train_config *cfg = r->cfg;
    const char *which = cfg->eval_central && r->syncing ? "central" : "replica0";
    float *buf = malloc(r->L.total * sizeof *buf);
    if (!buf)
        return SS_ERR_NO_MEMORY;
    if (res->best_epoch != res->epochs)
        snprintf(res->model_evaluated, sizeof res->model_evaluated, "%s@epoch%u", which,
                 res->best_epoch);
    else
        snprintf(res->model_evaluated, sizeof res->model_evaluated, "%s", which);
    const float *model;
    ss_status st = current_model(r, buf, &model);
    if (st == SS_OK && r->test->nrows == 0) /* online, no --test: nothing to score */
        res->quality = (ss__ctr_quality){.logloss = NAN,
                                         .ne = NAN,
                                         .ne_own_ctr = NAN,
                                         .auc = NAN,
                                         .mean_pred = NAN,
                                         .one_class = -1};
    else if (st == SS_OK)
        st = ss__ctr_evaluate(&cfg->model, model, &r->emb, r->test, r->train_ctr,
                              cfg->predictions_out, &res->quality);
    if (st == SS_OK && cfg->dense_out)
        st = write_dense(cfg->dense_out, model, r->L.total);
    free(buf);
    return st;
}

static void run_destroy(run *r) {
    if (r->tables.rows && !r->tr[0].hooks) { /* standalone; a trainer's close with it */
        ss_table_close(r->tables.rows);
        if (r->tables.wide)
            ss_table_close(r->tables.wide);
    }
    for (uint32_t t = 0; t < r->cfg->trainers; t++) {
        ss__engine_destroy(r->tr[t].engine);
        ss__replica_destroy(r->tr[t].replica);
        if (r->tr[t].hooks)
            ss_trainer_close(r->tr[t].hooks);
    }
    for (uint32_t t = 0; t < r->cfg->trainers; t++) {
        ss__ctr_dense_opt_free(&r->tr[t].opt);
        free(r->tr[t].order);
    }
    ss__transport_destroy(r->transport);
    ss__ctr_embeddings_destroy(&r->emb);
    free(r->best_dense);
    free(r->best_emb);
    pthread_mutex_destroy(&r->done_lock);
    pthread_cond_destroy(&r->done_cond);
    free(r);
}

ss_status ss__ctr_train_run(const ss__ctr_train_config *cfg, const ss__ctr_dataset *train,
                            const ss__ctr_dataset *val, const ss__ctr_dataset *test,
                            ss__ctr_train_result *res) {
    if (!res)
        return SS_ERR_INVALID_ARGUMENT;
    ss_status st = check_config(cfg, train, test);
    if (st != SS_OK)
        return st;
    memset(res, 0, sizeof *res);
    res->progressive_ne = res->progressive_ne_window = NAN;
    run *r = calloc(1, sizeof *r);
    if (!r)
        return SS_ERR_NO_MEMORY;
    r->cfg = cfg;
    r->train = train;
    r->val = val;
    r->test = test;
    /* NE's normalizer, and the output bias's start unless cfg says */
    r->train_ctr = ss__ctr_dataset_ctr(train);
    r->base_ctr = cfg->base_ctr > 0.0 ? cfg->base_ctr : r->train_ctr;
    /* In-process sync through the engines here; process mode syncs inside
     * the hooks. */
    r->syncing = !cfg->process && cfg->sync != SS_CTR_SYNC_NONE;
    ss__ctr_layout_of(&cfg->model, &r->L);
    pthread_mutex_init(&r->done_lock, NULL);
    ss__cond_init_monotonic(&r->done_cond);

    if (r->train_ctr <= 0.0 || r->train_ctr >= 1.0) {
        SS_LOG_ERRORF("ctr-train", "event=one_class_training_set rows=%zu label=%d", train->nrows,
                      r->train_ctr >= 1.0);
        run_destroy(r);
        return SS_ERR_INVALID_ARGUMENT;
    }
    if ((st = ss__ctr_embeddings_create(&cfg->model, cfg->seed, &r->emb, NULL, 0)) == SS_OK &&
        (st = ss__ctr_embeddings_set_optimizer(&r->emb, cfg->emb_optimizer == SS_TABLE_ADAGRAD,
                                               cfg->emb_lr)) == SS_OK &&
        (st = open_trainers(r)) == SS_OK &&
        (cfg->emb == SS_CTR_EMB_ARRAY || (st = open_table(r)) == SS_OK) &&
        (st = start_engines(r)) == SS_OK &&
        (st = cfg->stream ? ss__ctr_run_stream(r, res) : run_epochs(r, res)) == SS_OK &&
        (st = finish_sync(r, res)) == SS_OK && (st = collect_trainers(r, res)) == SS_OK)
        st = evaluate_model(r, res);
    if (st != SS_OK) /* before run_destroy's calls start the library's error afresh */
        snprintf(res->error, sizeof res->error, "%s", ss_last_error());
    run_destroy(r);
    return st;
}
