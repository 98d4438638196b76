/* ctr-gen: synthetic CTR data in the Criteo TSV format from a seeded
 * ground-truth model, with every row's true click probability; with
 * --drift, a non-stationary stream for online training (tools/ctr/drift.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    int64_t rows, model_seed, data_seed, window;
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

static int write_rows(const gen_options *o, generator *g, FILE *out, FILE *probs, FILE *info) {
    ss__rng rng;
    ss__rng_seed(&rng, (uint64_t)o->data_seed * 0x9e3779b97f4a7c15ull + (uint64_t)o->model_seed);
    span all = {0}, win = {0};
    char buf[SS_CTR_ROW_MAX];
    for (int64_t i = 0; i < o->rows; i++) {
        ss__ctr_raw_row row;
        double p;
        if (g->drift)
            ss__ctr_drift_sample(g->drift, &rng, (uint64_t)i, &row, &p);
        else
            ss__ctr_truth_sample(g->truth, &rng, &row, &p);
        size_t len = ss__ctr_raw_row_format(&row, buf);
        if (fwrite(buf, 1, len, out) != len || (probs && fprintf(probs, "%.9g\n", p) < 0))
            return 1;
        const double ll = row.label ? -log(p) : -log1p(-p);
        all = (span){all.ll + ll, all.clicks + row.label, all.n + 1};
        win = (span){win.ll + ll, win.clicks + row.label, win.n + 1};
        if (o->window && (i + 1) % o->window == 0) {
            fprintf(info, "ctr-gen: window=%lld rows=%lld-%lld ctr=%.4f bayes_ne=%.4f\n",
                    (long long)(i / o->window), (long long)(i + 1 - o->window), (long long)i,
                    win.clicks / win.n, bayes_ne(&win));
            win = (span){0};
        }
        if (!o->quiet && (i + 1) % 10000000 == 0)
            fprintf(stderr, "ctr-gen: %lld/%lld rows\n", (long long)(i + 1), (long long)o->rows);
    }
    fprintf(info,
            "ctr-gen: rows=%lld ctr=%.4f bayes_ne=%.4f model_seed=%lld data_seed=%lld shape=%s "
            "drift=%s turnover=%g rate=%g out=%s\n",
            (long long)o->rows, all.clicks / all.n, bayes_ne(&all), (long long)o->model_seed,
            (long long)o->data_seed, o->shape, o->drift ? "true" : "false",
            o->drift ? o->turnover : 0.0, o->drift ? o->rate : 0.0, o->out_path);
    return 0;
}

static int open_generator(const gen_options *o, generator *g) {
    *g = (generator){0};
    const bool categorical = !strcmp(o->shape, "categorical");
    if (o->drift || categorical) {
        const ss__ctr_drift_config dc = {.model_seed = (uint64_t)o->model_seed,
                                         .categorical = categorical,
                                         .turnover = o->drift ? o->turnover : 0.0,
                                         .rate = o->drift ? o->rate : 0.0};
        return ss__ctr_drift_create(&dc, &g->drift) == SS_OK ? 0 : 1;
    }
    return ss__ctr_truth_create((uint64_t)o->model_seed, &g->truth) == SS_OK ? 0 : 1;
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
