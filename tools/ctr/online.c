/* Step 3 of an online run: one pass over a stream of rows, chunk by chunk,
 * with progressive validation (run_internal.h). The workers' loss on a
 * minibatch is the model's loss before its step on those rows, so summed
 * per chunk it is the progressive loss of the chunk: every example scored
 * before it is trained on, the standard metric of online CTR learning.
 * The window's NE is over whole chunks: the newest chunks that together
 * hold at least progressive_window rows. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "common/clock.h"
#include "tools/ctr/run_internal.h"

/* Progressive sums of a span of rows. */
typedef struct span {
    double loss, n, clicks;
} span;

typedef struct progressive {
    span all;
    span *ring; /* per-bucket sums, newest at head - 1 */
    size_t buckets, head, used;
    double bucket_rows; /* a bucket closes at this many rows */
    span open;          /* the bucket filling now */
} progressive;

/* The window is kept in up to 64 buckets of window / 64 rows each. */
#define WINDOW_BUCKETS 64

static void span_add(span *a, const span *b) {
    a->loss += b->loss;
    a->n += b->n;
    a->clicks += b->clicks;
}

static void progressive_add(progressive *p, const span *chunk) {
    span_add(&p->all, chunk);
    span_add(&p->open, chunk);
    if (p->open.n < p->bucket_rows)
        return;
    p->ring[p->head] = p->open;
    p->head = (p->head + 1) % p->buckets;
    if (p->used < p->buckets)
        p->used++;
    p->open = (span){0};
}

/* The newest whole buckets (and the open one) until window rows. */
static double window_ne(const progressive *p, double window) {
    span w = p->open;
    for (size_t k = 1; k <= p->used && w.n < window; k++)
        span_add(&w, &p->ring[(p->head + p->buckets - k) % p->buckets]);
    return ss__ctr_ne_of(w.loss, w.n, w.clicks);
}

static void print_stream_progress(run *r, const progressive *p, double window) {
    const ss__ctr_train_config *cfg = r->cfg;
    uint64_t rounds = 0;
    for (uint32_t t = 0; t < cfg->trainers; t++) {
        ss__group_stats gs;
        ss_dense_stats ds;
        if (r->tr[t].engine && ss__engine_group_stats(r->tr[t].group, &gs) == SS_OK)
            rounds += gs.rounds;
        if (r->tr[t].hooks_dense && ss_dense_get_stats(r->tr[t].hooks_dense, &ds) == SS_OK)
            rounds += ds.rounds;
    }
    const double el = (double)(ss__now_ns() - r->t_begin) * 1e-9;
    fprintf(cfg->progress,
            "progress: t=%.1fs examples=%.0f examples/s=%.0f progressive_ne_window=%.5f "
            "progressive_ne=%.5f window_rows=%.0f sync_rounds=%llu\n",
            el, p->all.n, el > 0 ? p->all.n / el : 0.0, window_ne(p, window),
            ss__ctr_ne_of(p->all.loss, p->all.n, p->all.clicks), window,
            (unsigned long long)rounds);
    fflush(cfg->progress);
}

static double clicks_of(const ss__ctr_dataset *chunk) {
    double c = 0.0;
    for (size_t i = 0; i < chunk->nrows; i++)
        c += chunk->rows[i].label > 0.5f;
    return c;
}

ss_status ss__ctr_run_stream(run *r, ss__ctr_train_result *res) {
    const ss__ctr_train_config *cfg = r->cfg;
    const double window = cfg->progressive_window ? (double)cfg->progressive_window : 1e5;
    progressive p = {.buckets = WINDOW_BUCKETS, .bucket_rows = window / WINDOW_BUCKETS};
    if (!(p.ring = calloc(p.buckets, sizeof *p.ring)))
        return SS_ERR_NO_MEMORY;
    const ss__ctr_dataset *chunk = r->train; /* the first chunk, read by the caller */
    r->train = NULL;                         /* not valid past the next chunk */
    ss_status st = SS_OK;
    uint64_t next_report = 0;
    for (uint32_t pass = 1; chunk->nrows > 0 && st == SS_OK; pass++) {
        const uint64_t loss0 = atomic_load(&r->loss_sum_micro);
        if ((st = ss__ctr_train_pass(r, chunk, pass, false, cfg->trainers, &res->seconds)) != SS_OK)
            break;
        const span s = {(double)(atomic_load(&r->loss_sum_micro) - loss0) * 1e-6,
                        (double)chunk->nrows, clicks_of(chunk)};
        progressive_add(&p, &s);
        if (cfg->progressive_out)
            fprintf(cfg->progressive_out, "%.0f %.0f %.9g\n", s.n, s.clicks, s.loss);
        if (pass == 1)
            next_report = r->t_begin + (uint64_t)(cfg->progress_interval_s * 1e9);
        if (cfg->progress && cfg->progress_interval_s > 0 && ss__now_ns() >= next_report) {
            print_stream_progress(r, &p, window);
            next_report = ss__now_ns() + (uint64_t)(cfg->progress_interval_s * 1e9);
        }
        st = ss__ctr_stream_next(cfg->stream, &chunk);
    }
    if (cfg->progress && p.all.n > 0)
        print_stream_progress(r, &p, window);
    res->epochs = res->best_epoch = 1;
    res->val_logloss = NAN;
    res->progressive_ne = ss__ctr_ne_of(p.all.loss, p.all.n, p.all.clicks);
    res->progressive_ne_window = window_ne(&p, window);
    free(p.ring);
    return st;
}
