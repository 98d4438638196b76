/* ctr-gen: synthetic CTR data in the Criteo TSV format from a seeded
 * ground-truth model, with every row's true click probability. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/flags.h"
#include "tools/ctr/truth.h"

/* What --help and --version say. */
static const ss__program program = {
    "ctr-gen", "Writes synthetic click data (label, 13 integer, 26 categorical hex "
               "fields)\nfrom a seeded logistic ground truth, and prints the "
               "Bayes-optimal NE of the set."};

int main(int argc, char **argv) {
    int64_t rows = 100000, model_seed = 42, data_seed = 1;
    const char *out_path = NULL, *probs_path = NULL;
    bool quiet = false;
    ss__flag flags[] = {
        {"rows", SS_FLAG_INT, &rows, "rows to write", NULL, 1, 1e10},
        {"model-seed", SS_FLAG_INT, &model_seed, "seed of the ground-truth model", NULL, 0, 0},
        {"data-seed", SS_FLAG_INT, &data_seed,
         "seed of the row sampler (train and test sets: same model seed, other data seeds)", NULL,
         0, 0},
        {"out", SS_FLAG_STRING, &out_path, "output TSV path (required)", NULL, 0, 0},
        {"probs", SS_FLAG_STRING, &probs_path,
         "side file: the true click probability of every row, one per line", NULL, 0, 0},
        {"quiet", SS_FLAG_BOOL, &quiet, "no progress lines", NULL, 0, 0},
    };
    int exit_code = ss__flags_cli(&program, flags, sizeof flags / sizeof *flags, argc, argv);
    if (exit_code >= 0)
        return exit_code;
    if (!out_path) {
        fprintf(stderr, "ctr-gen: --out is required (see --help)\n");
        return 2;
    }
    ss__ctr_truth *truth;
    if (ss__ctr_truth_create((uint64_t)model_seed, &truth) != SS_OK) {
        fprintf(stderr, "ctr-gen: out of memory\n");
        return 1;
    }
    FILE *out = fopen(out_path, "w");
    FILE *probs = probs_path ? fopen(probs_path, "w") : NULL;
    if (!out || (probs_path && !probs)) {
        fprintf(stderr, "ctr-gen: cannot open %s: %s\n", !out ? out_path : probs_path,
                strerror(errno));
        if (out)
            fclose(out);
        if (probs)
            fclose(probs);
        ss__ctr_truth_destroy(truth);
        return 1;
    }
    ss__rng rng;
    ss__rng_seed(&rng, (uint64_t)data_seed * 0x9e3779b97f4a7c15ull + (uint64_t)model_seed);
    double ll = 0.0, clicks = 0.0;
    int rc = 0;
    for (int64_t i = 0; i < rows; i++) {
        ss__ctr_raw_row row;
        double p;
        ss__ctr_truth_sample(truth, &rng, &row, &p);
        if (ss__ctr_raw_row_write(out, &row) != 0 || (probs && fprintf(probs, "%.9g\n", p) < 0)) {
            rc = 1;
            break;
        }
        clicks += row.label;
        ll -= row.label ? log(p) : log1p(-p);
        if (!quiet && (i + 1) % 1000000 == 0)
            fprintf(stderr, "ctr-gen: %lld/%lld rows\n", (long long)(i + 1), (long long)rows);
    }
    if (fclose(out) != 0 || (probs && fclose(probs) != 0))
        rc = 1;
    ss__ctr_truth_destroy(truth);
    if (rc) {
        fprintf(stderr, "ctr-gen: write failed: %s\n", strerror(errno));
        return 1;
    }
    double ctr = clicks / (double)rows;
    double h = (ctr > 0 && ctr < 1) ? -(ctr * log(ctr) + (1 - ctr) * log(1 - ctr)) : NAN;
    printf("ctr-gen: rows=%lld ctr=%.4f bayes_ne=%.4f model_seed=%lld data_seed=%lld out=%s\n",
           (long long)rows, ctr, (ll / (double)rows) / h, (long long)model_seed,
           (long long)data_seed, out_path);
    return 0;
}
