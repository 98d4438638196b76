/* ctr-gen: synthetic CTR data in the Criteo TSV format from a seeded
 * ground-truth model, with every row's true click probability; with
 * --drift, a non-stationary stream for online training (tools/ctr/drift.h). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/flags.h"
#include "tools/ctr/drift.h"
#include "tools/ctr/truth.h"

/* What --help and --version say. */
static const ss__program program = {
    "ctr-gen",
    "Writes synthetic click data (label, 13 integer, 26 categorical hex fields) from a seeded\n"
    "logistic ground truth, and prints the Bayes-optimal NE of the set. --drift makes a\n"
    "non-stationary stream for online training (ids turn over, weights drift); --out -\n"
    "writes to standard output, and --window-rows prints each window's Bayes NE."};

typedef struct gen_options {
    int64_t rows, model_seed, data_seed, window, threads;
    const char *out_path, *probs_path, *shape;
    bool quiet, drift;
    double turnover, rate;
} gen_options;

/* The Bayes-optimal NE of a span: the true probabilities' log loss over
 * the entropy of the span's click rate. */
typedef struct span {
    double ll, clicks, n;
} span;

static double bayes_ne(const span *s) {
    double ctr = s->clicks / s->n;
    double h = (ctr > 0 && ctr < 1) ? -(ctr * log(ctr) + (1 - ctr) * log(1 - ctr)) : NAN;
    return (s->ll / s->n) / h;
}

/* The generator of the run: the stationary truth, or the drifting one. */
typedef struct generator {
    ss__ctr_truth *truth;
    ss__ctr_drift *drift;
} generator;

/* What the rows written so far add up to, and the lines it prints. */
typedef struct tally {
    const gen_options *o;
    FILE *info;
    span all, win;
    int64_t rows;
} tally;

static void count_row(tally *t, bool label, double p) {
    const double ll = label ? -log(p) : -log1p(-p);
    t->all = (span){t->all.ll + ll, t->all.clicks + label, t->all.n + 1};
    t->win = (span){t->win.ll + ll, t->win.clicks + label, t->win.n + 1};
    const int64_t i = t->rows++, w = t->o->window;
    if (w && (i + 1) % w == 0) {
        fprintf(t->info, "ctr-gen: window=%lld rows=%lld-%lld ctr=%.4f bayes_ne=%.4f\n",
                (long long)(i / w), (long long)(i + 1 - w), (long long)i, t->win.clicks / t->win.n,
                bayes_ne(&t->win));
        t->win = (span){0};
    }
    if (!t->o->quiet && (i + 1) % 10000000 == 0)
        fprintf(stderr, "ctr-gen: %lld/%lld rows\n", (long long)(i + 1), (long long)t->o->rows);
}

static void report(const tally *t) {
    const gen_options *o = t->o;
    fprintf(t->info,
            "ctr-gen: rows=%lld ctr=%.4f bayes_ne=%.4f model_seed=%lld data_seed=%lld shape=%s "
            "drift=%s turnover=%g rate=%g out=%s\n",
            (long long)o->rows, t->all.clicks / t->all.n, bayes_ne(&t->all),
            (long long)o->model_seed, (long long)o->data_seed, o->shape,
            o->drift ? "true" : "false", o->drift ? o->turnover : 0.0, o->drift ? o->rate : 0.0,
            o->out_path);
}

static void seed_rows(const gen_options *o, ss__rng *rng) {
    ss__rng_seed(rng, (uint64_t)o->data_seed * 0x9e3779b97f4a7c15ull + (uint64_t)o->model_seed);
}

/* The stationary truth's rows, one after the other. */
static int write_truth_rows(const gen_options *o, ss__ctr_truth *truth, FILE *out, FILE *probs,
                            tally *t) {
    ss__rng rng;
    seed_rows(o, &rng);
    char buf[SS_CTR_ROW_MAX];
    for (int64_t i = 0; i < o->rows; i++) {
        ss__ctr_raw_row row;
        double p;
        ss__ctr_truth_sample(truth, &rng, &row, &p);
        size_t len = ss__ctr_raw_row_format(&row, buf);
        if (fwrite(buf, 1, len, out) != len || (probs && fprintf(probs, "%.9g\n", p) < 0))
            return 1;
        count_row(t, row.label, p);
    }
    return 0;
}

/* The drifting truth's rows, made on --threads threads in blocks: this
 * thread draws each block's random numbers in order (the stream is the
 * same for any thread count), the makers turn blocks into text, and this
 * thread writes them in order. */
#define BLOCK_ROWS 2048
#define PROB_MAX   24 /* "%.9g\n" */

typedef enum { BLOCK_FREE, BLOCK_DRAWN, BLOCK_MAKING, BLOCK_MADE } block_state;

typedef struct block {
    block_state state;
    int64_t first; /* its first row's index */
    int n;
    ss__ctr_drift_draws draws[BLOCK_ROWS];
    double p[BLOCK_ROWS];
    bool label[BLOCK_ROWS];
    size_t text_len, probs_len;
    char text[BLOCK_ROWS * SS_CTR_ROW_MAX], probs[BLOCK_ROWS * PROB_MAX];
} block;

typedef struct makers {
    const ss__ctr_drift *drift;
    bool probs, stop;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    block *blocks;
    int64_t nblocks, drawn, made_next; /* ring of nblocks; sequence numbers */
} makers;

static void make_block(const makers *m, ss__ctr_drift_cache *cache, block *b) {
    b->text_len = b->probs_len = 0;
    for (int r = 0; r < b->n; r++) {
        ss__ctr_raw_row row;
        ss__ctr_drift_make(m->drift, cache, &b->draws[r], (uint64_t)(b->first + r), &row, &b->p[r]);
        b->label[r] = row.label;
        b->text_len += ss__ctr_raw_row_format(&row, b->text + b->text_len);
        if (m->probs)
            b->probs_len += (size_t)snprintf(b->probs + b->probs_len, PROB_MAX, "%.9g\n", b->p[r]);
    }
}

static void *maker_main(void *arg) {
    makers *m = arg;
    ss__ctr_drift_cache *cache;
    if (ss__ctr_drift_cache_create(m->drift, &cache, NULL, 0) != SS_OK)
        return "out of memory for a slot cache";
    pthread_mutex_lock(&m->lock);
    for (;;) {
        while (!m->stop && m->made_next == m->drawn)
            pthread_cond_wait(&m->cond, &m->lock);
        if (m->stop)
            break;
        block *b = &m->blocks[m->made_next++ % m->nblocks];
        b->state = BLOCK_MAKING;
        pthread_mutex_unlock(&m->lock);
        make_block(m, cache, b);
        pthread_mutex_lock(&m->lock);
        b->state = BLOCK_MADE;
        pthread_cond_broadcast(&m->cond);
    }
    pthread_mutex_unlock(&m->lock);
    ss__ctr_drift_cache_destroy(cache);
    return NULL;
}

/* Draws blocks into the free slots of the ring, up to the last row. */
static void draw_ahead(makers *m, const gen_options *o, ss__rng *rng, int64_t written) {
    const int64_t total = (o->rows + BLOCK_ROWS - 1) / BLOCK_ROWS;
    while (m->drawn < total && m->drawn - written < m->nblocks) {
        block *b = &m->blocks[m->drawn % m->nblocks];
        pthread_mutex_unlock(&m->lock);
        b->first = m->drawn * BLOCK_ROWS;
        b->n = (int)(o->rows - b->first < BLOCK_ROWS ? o->rows - b->first : BLOCK_ROWS);
        for (int r = 0; r < b->n; r++)
            ss__ctr_drift_draw(m->drift, rng, &b->draws[r]);
        pthread_mutex_lock(&m->lock);
        b->state = BLOCK_DRAWN;
        m->drawn++;
        pthread_cond_broadcast(&m->cond);
    }
}

static int write_blocks(makers *m, const gen_options *o, FILE *out, FILE *probs, tally *t) {
    ss__rng rng;
    seed_rows(o, &rng);
    const int64_t total = (o->rows + BLOCK_ROWS - 1) / BLOCK_ROWS;
    int rc = 0;
    pthread_mutex_lock(&m->lock);
    for (int64_t k = 0; k < total && !rc; k++) {
        draw_ahead(m, o, &rng, k);
        block *b = &m->blocks[k % m->nblocks];
        while (b->state != BLOCK_MADE)
            pthread_cond_wait(&m->cond, &m->lock);
        pthread_mutex_unlock(&m->lock);
        if (fwrite(b->text, 1, b->text_len, out) != b->text_len ||
            (probs && fwrite(b->probs, 1, b->probs_len, probs) != b->probs_len))
            rc = 1;
        for (int r = 0; r < b->n; r++)
            count_row(t, b->label[r], b->p[r]);
        pthread_mutex_lock(&m->lock);
        b->state = BLOCK_FREE;
    }
    m->stop = true;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    return rc;
}

static int write_drift_rows(const gen_options *o, const ss__ctr_drift *drift, FILE *out,
                            FILE *probs, tally *t) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int threads = o->threads ? (int)o->threads : cores < 1 ? 1 : cores > 8 ? 8 : (int)cores;
    makers m = {.drift = drift, .probs = probs != NULL, .nblocks = 2 * threads + 2};
    pthread_t th[64];
    int started = 0, rc = 1, err = 0;
    pthread_mutex_init(&m.lock, NULL);
    pthread_cond_init(&m.cond, NULL);
    if (!(m.blocks = calloc((size_t)m.nblocks, sizeof *m.blocks)))
        fprintf(stderr, "ctr-gen: out of memory for %lld blocks of rows\n", (long long)m.nblocks);
    while (m.blocks && started < threads &&
           !(err = pthread_create(&th[started], NULL, maker_main, &m)))
        started++;
    if (m.blocks && started == threads)
        rc = write_blocks(&m, o, out, probs, t);
    else if (m.blocks)
        fprintf(stderr, "ctr-gen: cannot start maker thread %d: %s\n", started + 1, strerror(err));
    pthread_mutex_lock(&m.lock);
    m.stop = true;
    pthread_cond_broadcast(&m.cond);
    pthread_mutex_unlock(&m.lock);
    for (int i = 0; i < started; i++) {
        void *why = NULL;
        pthread_join(th[i], &why);
        if (why) {
            fprintf(stderr, "ctr-gen: %s\n", (const char *)why);
            rc = 1;
        }
    }
    free(m.blocks);
    pthread_cond_destroy(&m.cond);
    pthread_mutex_destroy(&m.lock);
    return rc;
}

static int write_rows(const gen_options *o, generator *g, FILE *out, FILE *probs, FILE *info) {
    tally t = {.o = o, .info = info};
    int rc = g->drift ? write_drift_rows(o, g->drift, out, probs, &t)
                      : write_truth_rows(o, g->truth, out, probs, &t);
    if (rc == 0)
        report(&t);
    return rc;
}

static int open_generator(const gen_options *o, generator *g) {
    *g = (generator){0};
    const bool categorical = !strcmp(o->shape, "categorical");
    if (o->drift || categorical) {
        const ss__ctr_drift_config dc = {.model_seed = (uint64_t)o->model_seed,
                                         .categorical = categorical,
                                         .turnover = o->drift ? o->turnover : 0.0,
                                         .rate = o->drift ? o->rate : 0.0};
        return ss__ctr_drift_create(&dc, &g->drift, NULL, 0) == SS_OK ? 0 : 1;
    }
    return ss__ctr_truth_create((uint64_t)o->model_seed, &g->truth, NULL, 0) == SS_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    gen_options o = {.rows = 100000,
                     .model_seed = 42,
                     .data_seed = 1,
                     .shape = "criteo",
                     .turnover = 0.2,
                     .rate = 0.5};
    ss__flag flags[] = {
        {"rows", SS_FLAG_INT, &o.rows, "rows to write", NULL, 1, 1e12},
        {"model-seed", SS_FLAG_INT, &o.model_seed, "seed of the ground-truth model", NULL, 0, 0},
        {"data-seed", SS_FLAG_INT, &o.data_seed,
         "seed of the row sampler (train and test sets: same model seed, other data seeds)", NULL,
         0, 0},
        {"out", SS_FLAG_STRING, &o.out_path,
         "output TSV path (required); - writes to standard output (the report goes to stderr)",
         NULL, 0, 0},
        {"probs", SS_FLAG_STRING, &o.probs_path,
         "side file: the true click probability of every row, one per line", NULL, 0, 0},
        {"shape", SS_FLAG_STRING, &o.shape,
         "criteo: 13 integer and 26 categorical fields with Criteo-like cardinalities; "
         "categorical: no integer fields, 26 categorical fields of 20k-200k values each",
         "criteo|categorical", 0, 0},
        {"drift", SS_FLAG_BOOL, &o.drift,
         "a non-stationary stream: ids turn over and the weights drift with the row index", NULL, 0,
         0},
        {"drift-turnover", SS_FLAG_DOUBLE, &o.turnover,
         "--drift: fraction of each field's ids replaced by new ids per million rows", NULL, 0,
         1e6},
        {"drift-rate", SS_FLAG_DOUBLE, &o.rate,
         "--drift: radians every hidden weight turns per million rows (its spread stays the "
         "same)",
         NULL, 0, 1e6},
        {"window-rows", SS_FLAG_INT, &o.window,
         "print the click rate and Bayes NE of every window of this many rows (0 = none)", NULL, 0,
         1e12},
        {"threads", SS_FLAG_INT, &o.threads,
         "--drift or --shape categorical: threads that make rows (0 = the machine's cores, up "
         "to 8; the rows are the same for any count)",
         NULL, 0, 64},
        {"quiet", SS_FLAG_BOOL, &o.quiet, "no progress lines", NULL, 0, 0},
    };
    int exit_code = ss__flags_cli(&program, flags, sizeof flags / sizeof *flags, argc, argv);
    if (exit_code >= 0)
        return exit_code;
    if (!o.out_path) {
        fprintf(stderr, "ctr-gen: --out is required (see --help)\n");
        return 2;
    }
    generator g;
    if (open_generator(&o, &g) != 0) {
        fprintf(stderr, "ctr-gen: out of memory\n");
        return 1;
    }
    const bool to_stdout = !strcmp(o.out_path, "-");
    FILE *out = to_stdout ? stdout : fopen(o.out_path, "w");
    FILE *probs = o.probs_path ? fopen(o.probs_path, "w") : NULL;
    int rc = 1;
    if (!out || (o.probs_path && !probs)) {
        fprintf(stderr, "ctr-gen: cannot open %s: %s\n", !out ? o.out_path : o.probs_path,
                strerror(errno));
    } else {
        static char obuf[1 << 20];
        setvbuf(out, obuf, _IOFBF, sizeof obuf);
        rc = write_rows(&o, &g, out, probs, to_stdout ? stderr : stdout);
        if ((out && fflush(out) != 0) || (probs && fflush(probs) != 0))
            rc = 1;
        if (rc)
            fprintf(stderr, "ctr-gen: write failed: %s\n", strerror(errno));
    }
    if (out && !to_stdout)
        fclose(out);
    if (probs)
        fclose(probs);
    ss__ctr_truth_destroy(g.truth);
    ss__ctr_drift_destroy(g.drift);
    return rc;
}
