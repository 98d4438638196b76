/* Ground truth for synthetic CTR data: a seeded logistic model over
 * Criteo-shaped features. Categorical values are Zipf-distributed per
 * field; each value has a hidden scalar weight and a hidden embedding
 * (pure functions of (seed, field, value)), pairs of fields interact by
 * dot products, integer features enter linearly after a log transform.
 * click ~ Bernoulli(sigmoid(logit)), so every row's true probability is
 * known and the Bayes-optimal NE of a set can be computed. */
#ifndef SS_CTR_TRUTH_H
#define SS_CTR_TRUTH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "shadowsync/status.h"
#include "tools/ctr/criteo.h"
#include "tools/ctr/rng.h"

typedef struct ss__ctr_truth ss__ctr_truth;

typedef struct ss__ctr_raw_row {
    int label;
    int64_t ints[SS_CTR_NUM_DENSE];
    bool int_missing[SS_CTR_NUM_DENSE];
    uint32_t cats[SS_CTR_NUM_CAT]; /* hex hash of the value */
    bool cat_missing[SS_CTR_NUM_CAT];
} ss__ctr_raw_row;

ss_status ss__ctr_truth_create(uint64_t model_seed, ss__ctr_truth **out, char *why, size_t whylen);
void ss__ctr_truth_destroy(ss__ctr_truth *t);

/* Draws one row from rng; *p receives its true click probability. */
void ss__ctr_truth_sample(const ss__ctr_truth *t, ss__rng *rng, ss__ctr_raw_row *row, double *p);

/* Writes a row in Criteo TSV format with a trailing newline. */
int ss__ctr_raw_row_write(FILE *out, const ss__ctr_raw_row *row);

#endif
