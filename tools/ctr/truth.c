#include "tools/ctr/truth.h"

#include <math.h>
#include <stdlib.h>

#include "common/strbuf.h"

/* Cardinalities shaped like Criteo's fields, capped so tables stay small. */
static const uint32_t vocab[SS_CTR_NUM_CAT] = {
    1460, 583,   20000, 20000, 305,  24,   12517, 633,   3,  20000, 5683,  20000, 3194,
    27,   14992, 20000, 10,    5652, 2173, 4,     20000, 18, 15,    20000, 105,   20000};

#define HIDDEN_DIM 4
#define ZIPF_S     1.1
#define SIGMA_U    0.22 /* first-order weight per field */
#define SIGMA_E    0.15 /* hidden embedding entries */
#define BIAS       (-2.0)

struct ss__ctr_truth {
    uint64_t seed;
    double *cdf[SS_CTR_NUM_CAT]; /* Zipf CDF per field */
    double cat_missing_p[SS_CTR_NUM_CAT];
    double int_mu[SS_CTR_NUM_DENSE], int_sigma[SS_CTR_NUM_DENSE];
    double int_missing_p[SS_CTR_NUM_DENSE], int_weight[SS_CTR_NUM_DENSE];
};

ss_status ss__ctr_truth_create(uint64_t model_seed, ss__ctr_truth **out, char *why, size_t whylen) {
    if (!out)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "no place for the true model");
    ss__ctr_truth *t = calloc(1, sizeof *t);
    if (!t)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the true model");
    t->seed = model_seed;
    for (int f = 0; f < SS_CTR_NUM_CAT; f++) {
        t->cdf[f] = malloc(vocab[f] * sizeof(double));
        if (!t->cdf[f]) {
            ss__ctr_truth_destroy(t);
            return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the true model");
        }
        double acc = 0.0;
        for (uint32_t v = 0; v < vocab[f]; v++)
            t->cdf[f][v] = (acc += pow((double)(v + 1), -ZIPF_S));
        for (uint32_t v = 0; v < vocab[f]; v++)
            t->cdf[f][v] /= acc;
        t->cat_missing_p[f] = f >= 19 ? 0.3 : 0.01;
    }
    ss__rng rng;
    ss__rng_seed(&rng, model_seed ^ 0x1d8e4e27c47d124full);
    for (int j = 0; j < SS_CTR_NUM_DENSE; j++) {
        t->int_mu[j] = 0.5 + 3.0 * ss__rng_uniform(&rng);
        t->int_sigma[j] = 0.5 + 1.0 * ss__rng_uniform(&rng);
        t->int_missing_p[j] = (j % 4 == 1) ? 0.4 : 0.05;
        t->int_weight[j] = 0.15 * ss__rng_normal(&rng);
    }
    *out = t;
    return SS_OK;
}

void ss__ctr_truth_destroy(ss__ctr_truth *t) {
    if (!t)
        return;
    for (int f = 0; f < SS_CTR_NUM_CAT; f++)
        free(t->cdf[f]);
    free(t);
}

static uint32_t zipf_draw(const double *cdf, uint32_t n, double u) {
    uint32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void ss__ctr_truth_sample(const ss__ctr_truth *t, ss__rng *rng, ss__ctr_raw_row *row, double *p) {
    double logit = BIAS;
    uint32_t value[SS_CTR_NUM_CAT];
    double e[SS_CTR_NUM_CAT][HIDDEN_DIM];
    for (int f = 0; f < SS_CTR_NUM_CAT; f++) {
        row->cat_missing[f] = ss__rng_uniform(rng) < t->cat_missing_p[f];
        if (row->cat_missing[f]) {
            row->cats[f] = 0;
            for (int k = 0; k < HIDDEN_DIM; k++)
                e[f][k] = 0.0;
            continue;
        }
        value[f] = zipf_draw(t->cdf[f], vocab[f], ss__rng_uniform(rng));
        uint64_t h = ss__hash3(t->seed, (uint64_t)f, value[f]);
        row->cats[f] = (uint32_t)(h >> 32);
        logit += SIGMA_U * ss__hash_normal(h ^ 0x75);
        for (int k = 0; k < HIDDEN_DIM; k++)
            e[f][k] = SIGMA_E * ss__hash_normal(h + 0x1000u * (uint64_t)(k + 1));
    }
    for (int f = 0; f < SS_CTR_NUM_CAT; f++)
        for (int g = f + 1; g < SS_CTR_NUM_CAT; g++)
            for (int k = 0; k < HIDDEN_DIM; k++)
                logit += e[f][k] * e[g][k];
    for (int j = 0; j < SS_CTR_NUM_DENSE; j++) {
        row->int_missing[j] = ss__rng_uniform(rng) < t->int_missing_p[j];
        if (row->int_missing[j]) {
            row->ints[j] = 0;
            continue;
        }
        double z = ss__rng_normal(rng);
        double v = floor(exp(t->int_mu[j] + t->int_sigma[j] * z)) - 1.0;
        row->ints[j] = v < 0.0 ? 0 : (int64_t)v;
        logit += t->int_weight[j] * z;
    }
    *p = 1.0 / (1.0 + exp(-logit));
    row->label = ss__rng_uniform(rng) < *p;
}

int ss__ctr_raw_row_write(FILE *out, const ss__ctr_raw_row *row) {
    if (fprintf(out, "%d", row->label) < 0)
        return -1;
    for (int j = 0; j < SS_CTR_NUM_DENSE; j++) {
        if (row->int_missing[j])
            fputc('\t', out);
        else
            fprintf(out, "\t%lld", (long long)row->ints[j]);
    }
    for (int f = 0; f < SS_CTR_NUM_CAT; f++) {
        if (row->cat_missing[f])
            fputc('\t', out);
        else
            fprintf(out, "\t%08x", row->cats[f]);
    }
    return fputc('\n', out) == EOF ? -1 : 0;
}
