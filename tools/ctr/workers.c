/* The Hogwild workers of a ctr-train run (train_internal.h): each claims
 * minibatches of its trainer's share, trains them on the shared replica,
 * counts the step (a foreground round when due) and, with a table, looks
 * rows up and pushes gradients, warming the cache ahead. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "common/clock.h"
#include "common/log.h"
#include "tools/ctr/run_internal.h"

/* After each minibatch: count the step; a foreground round when due. */
static void after_step(trainer *tr, uint64_t step) {
    const ss__ctr_train_config *cfg = tr->run->cfg;
    if (tr->hooks) {
        /* The public API: counts the step, runs a foreground round every K
         * steps itself. */
        ss_status st = ss_trainer_step(tr->hooks);
        if (st != SS_OK && st != SS_ERR_TIMEOUT)
            SS_LOG_WARNF("ctr-train", "event=foreground_round_failed status=%s",
                         ss_status_name(st));
        return;
    }
    ss__replica_tick(tr->replica, 1);
    if (cfg->sync == SS_CTR_SYNC_FOREGROUND && !tr->run->restored && step % cfg->sync_every == 0) {
        /* FR-X: the same round, blocking this worker. */
        ss_status st = ss__engine_run_round(tr->engine, tr->group);
        if (st != SS_OK && st != SS_ERR_TIMEOUT)
            SS_LOG_WARNF("ctr-train", "event=foreground_round_failed trainer=%u status=%s",
                         tr->index, ss_status_name(st));
    }
}

/* Claims the trainer's next minibatch into batch; 0 when none is left. */
static size_t claim_batch(trainer *tr, const ss__ctr_example **batch) {
    const ss__ctr_train_config *cfg = tr->run->cfg;
    size_t start = atomic_fetch_add(&tr->cursor, cfg->batch);
    if (start >= tr->count)
        return 0;
    size_t n = tr->count - start < cfg->batch ? tr->count - start : cfg->batch;
    for (size_t j = 0; j < n; j++)
        batch[j] = &tr->run->pass->rows[tr->index + tr->order[start + j] * tr->stride];
    return n;
}

/* Cached tables: once the warmed span stops two batches past the next
 * unclaimed one, the rows of the next emb_warm_batches batches go to
 * ss_table_warm in one call. Their lookups then find them in the cache:
 * one round trip for several batches' misses instead of one per batch.
 * Workers race for the span; the one whose compare-exchange wins warms. */
static void warm_ahead(trainer *tr) {
    const ss__ctr_train_config *cfg = tr->run->cfg;
    if (cfg->emb != SS_CTR_EMB_CACHED || cfg->emb_warm_batches == 0)
        return;
    const size_t next = atomic_load(&tr->cursor);
    size_t warmed = atomic_load(&tr->warmed);
    if (warmed >= tr->count || warmed >= next + 2 * (size_t)cfg->batch)
        return;
    const size_t from = warmed > next ? warmed : next;
    if (from >= tr->count)
        return;
    size_t to = from + (size_t)cfg->emb_warm_batches * cfg->batch;
    if (to > tr->count)
        to = tr->count;
    if (!atomic_compare_exchange_strong(&tr->warmed, &warmed, to))
        return;
    uint64_t *ids = malloc((to - from) * SS_CTR_NUM_CAT * sizeof *ids);
    if (!ids)
        return; /* a hint: the lookups load the rows themselves */
    size_t n = 0;
    for (size_t j = from; j < to; j++) {
        const ss__ctr_example *ex = &tr->run->pass->rows[tr->index + tr->order[j] * tr->stride];
        for (int f = 0; f < SS_CTR_NUM_CAT; f++)
            ids[n++] = ss__ctr_row_id(&cfg->model, f, ex);
    }
    ss_status st = ss_table_warm(tr->run->tables.rows, ids, n);
    if (st != SS_OK)
        SS_LOG_DEBUGF("ctr-train", "event=warm_failed status=%s", ss_status_name(st));
    free(ids);
}

/* The table path: batch k+1's rows are fetched while batch k trains, and
 * batch k-1's gradients go to the table with that fetch. */
static ss_status table_loop(trainer *tr, ss__ctr_worker *w, const ss__ctr_example **batch,
                            double *loss) {
    run *r = tr->run;
    const ss__ctr_train_config *cfg = r->cfg;
    const bool prefetch = cfg->emb_prefetch && cfg->emb != SS_CTR_EMB_LOCAL;
    ss__ctr_gather *g[3] = {NULL, NULL, NULL};
    ss_status st = SS_OK;
    for (int i = 0; i < 3 && st == SS_OK; i++)
        st = ss__ctr_gather_create(&cfg->model, cfg->batch, &g[i], NULL, 0);
    size_t n = st == SS_OK ? claim_batch(tr, batch) : 0;
    warm_ahead(tr);
    if (n)
        st = ss__ctr_gather_begin(g[0], &r->tables, batch, n, prefetch, NULL);
    ss__ctr_gather *trained = NULL; /* the batch before, its gradients not pushed yet */
    for (int cur = 0; n && st == SS_OK; cur = (cur + 1) % 3) {
        size_t next = claim_batch(tr, batch);
        warm_ahead(tr);
        if (next) {
            st = ss__ctr_gather_begin(g[(cur + 1) % 3], &r->tables, batch, next, prefetch, trained);
        } else if (trained) {
            st = ss__ctr_gather_push(trained, &r->tables);
        }
        ss_status s = ss__ctr_gather_train(g[cur], w, tr->dense, &tr->opt, loss);
        if (st == SS_OK)
            st = s;
        trained = g[cur];
        atomic_fetch_add_explicit(&tr->examples, n, memory_order_relaxed);
        after_step(tr, atomic_fetch_add(&tr->steps, 1) + 1);
        n = next;
    }
    if (st == SS_OK && trained) /* the last batch */
        st = ss__ctr_gather_push(trained, &r->tables);
    for (int i = 0; i < 3; i++)
        ss__ctr_gather_destroy(g[i]);
    if (st != SS_OK)
        SS_LOG_ERRORF("ctr-train", "event=table_path_failed status=%s", ss_status_name(st));
    return st;
}

void *ss__ctr_worker_main(void *arg) {
    trainer *tr = ((worker_arg *)arg)->tr;
    run *r = tr->run;
    const ss__ctr_train_config *cfg = r->cfg;
    ss__ctr_worker *w = NULL;
    const ss__ctr_example **batch = malloc(cfg->batch * sizeof *batch);
    if (!batch || ss__ctr_worker_create(&cfg->model, &w, NULL, 0) != SS_OK) {
        ss__ctr_run_failed(r, SS_ERR_NO_MEMORY);
        goto done;
    }
    double loss = 0.0;
    if (r->tables.rows) {
        ss_status st = table_loop(tr, w, batch, &loss);
        if (st != SS_OK)
            ss__ctr_run_failed(r, st);
    } else {
        size_t n;
        while ((n = claim_batch(tr, batch)) > 0) {
            ss__ctr_train_batch(w, tr->dense, &tr->opt, &r->emb, batch, n, &loss);
            atomic_fetch_add_explicit(&tr->examples, n, memory_order_relaxed);
            after_step(tr, atomic_fetch_add(&tr->steps, 1) + 1);
        }
    }
    atomic_fetch_add(&r->loss_sum_micro, (uint64_t)(loss * 1e6));
done:
    ss__ctr_worker_destroy(w);
    free(batch);
    if (atomic_fetch_sub(&tr->workers_left, 1) == 1) {
        tr->t_end = ss__now_ns();
        pthread_mutex_lock(&r->done_lock);
        atomic_fetch_sub(&r->trainers_left, 1);
        pthread_cond_broadcast(&r->done_cond);
        pthread_mutex_unlock(&r->done_lock);
    }
    return NULL;
}
