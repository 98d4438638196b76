/* A non-stationary ground truth for online training (ctr-gen --drift):
 * the logistic truth of truth.h, made to change with the row index.
 *
 * - Id turnover: each field's Zipf rank r is a slot whose id is renewed
 *   once every 1e6 / turnover rows, at a phase of its own (so a fraction
 *   `turnover` of every field's ids, popular and rare alike, is replaced
 *   per million rows): the old id stops appearing, a new id with new
 *   hidden weights takes its place. A model must learn new ids forever
 *   and the old ones go cold.
 * - Weight drift: every hidden weight (first-order, embedding, integer) is
 *   w(i) = cos(theta) a + sin(theta) b with theta = i * rate / 1e6 rad and
 *   a, b independent normals of the id, so each weight wanders while its
 *   spread stays the same: a model trained on old rows measurably loses NE
 *   on new ones.
 * - Shape: criteo (13 integer and 26 categorical fields, cardinalities
 *   like Criteo's, as truth.h) or categorical (no integer fields, the 26
 *   categorical fields with 20k to 200k values each, as in mobile-ads logs).
 *
 * Rows are a pure function of the model seed and the rng. Sampling is O(1)
 * per field (alias tables) and each slot's weights are computed once per
 * id, so a row costs about a microsecond. */
#ifndef SS_CTR_DRIFT_H
#define SS_CTR_DRIFT_H

#include <stdbool.h>
#include <stdint.h>

#include "shadowsync/status.h"
#include "tools/ctr/truth.h"

typedef struct ss__ctr_drift ss__ctr_drift;

typedef struct ss__ctr_drift_config {
    uint64_t model_seed;
    bool categorical; /* the categorical shape; false: criteo */
    double turnover;  /* fraction of each field's ids renewed per million rows (0 to 1e6) */
    double rate;      /* radians the weights turn per million rows (0: fixed) */
} ss__ctr_drift_config;

/* SS_ERR_INVALID_ARGUMENT: a negative or non-finite turnover or rate. */
ss_status ss__ctr_drift_create(const ss__ctr_drift_config *cfg, ss__ctr_drift **out, char *why,
                               size_t whylen);
void ss__ctr_drift_destroy(ss__ctr_drift *d);

/* Draws row number index of the stream; *p is its true click
 * probability. Not thread-safe (the slot cache). */
void ss__ctr_drift_sample(ss__ctr_drift *d, ss__rng *rng, uint64_t index, ss__ctr_raw_row *row,
                          double *p);

/* The same in two steps, so that rows can be made on several threads:
 * ss__ctr_drift_draw takes a row's random numbers from the rng, in the
 * stream's order (cheap: run it in order, on one thread);
 * ss__ctr_drift_make turns them into the row (the costly part: table
 * lookups, the slots' weights, exp and log), a pure function of the
 * draws, the index and the model. Each thread that makes rows has a slot
 * cache of its own (a field's ranks' current ids and weights; up to
 * 52 bytes a value of every field's vocabulary). */
typedef struct ss__ctr_drift_draws {
    uint32_t cat_missing;                              /* bit f: field f missing */
    uint16_t int_missing;                              /* bit j: integer field j missing */
    double u[SS_CTR_NUM_CAT];                          /* uniform x the field's vocabulary */
    double z1[SS_CTR_NUM_DENSE], z2[SS_CTR_NUM_DENSE]; /* Box-Muller's uniforms */
    double label_u;
} ss__ctr_drift_draws;

typedef struct ss__ctr_drift_cache ss__ctr_drift_cache;
ss_status ss__ctr_drift_cache_create(const ss__ctr_drift *d, ss__ctr_drift_cache **out, char *why,
                                     size_t whylen);
void ss__ctr_drift_cache_destroy(ss__ctr_drift_cache *c);

void ss__ctr_drift_draw(const ss__ctr_drift *d, ss__rng *rng, ss__ctr_drift_draws *out);
void ss__ctr_drift_make(const ss__ctr_drift *d, ss__ctr_drift_cache *c,
                        const ss__ctr_drift_draws *dr, uint64_t index, ss__ctr_raw_row *row,
                        double *p);

/* Formats a row as ss__ctr_raw_row_write does, into buf (at least
 * SS_CTR_ROW_MAX bytes); returns its length. */
#define SS_CTR_ROW_MAX 512
size_t ss__ctr_raw_row_format(const ss__ctr_raw_row *row, char *buf);

#endif
