/* Model quality: log loss, normalized entropy (He et al. 2014) and AUC. */
#ifndef SS_CTR_EVAL_H
#define SS_CTR_EVAL_H

#include <stddef.h>

#include "shadowsync/status.h"

/* Mean log loss; predictions are clipped to [1e-7, 1 - 1e-7]. */
ss_status ss__ctr_logloss(const float *pred, const float *label, size_t n, double *out);
/* NE = mean log loss / entropy of the mean label of the same set. A set
 * with only one class has zero entropy: SS_ERR_INVALID_ARGUMENT. */
ss_status ss__ctr_ne(const float *pred, const float *label, size_t n, double *out);
/* NE from sums: summed log loss over n examples of which clicks were
 * clicks; NAN for no examples or one class. */
double ss__ctr_ne_of(double logloss_sum, double n, double clicks);
/* Area under the ROC curve, ties counted half. Needs both classes. */
ss_status ss__ctr_auc(const float *pred, const float *label, size_t n, double *out);

/* A model's scores on a labelled set. NE is given both ways: normalized by
 * the training set's click rate (He et al. 2014, "ne") and by the scored
 * set's own ("ne_own_ctr"). What a set with one class cannot define (AUC,
 * ne_own_ctr) is NAN and one_class says which label it holds (-1: both). */
typedef struct ss__ctr_quality {
    size_t n;
    double logloss, ne, ne_own_ctr, auc;
    double mean_pred, ctr, train_ctr;
    int one_class;
} ss__ctr_quality;

/* train_ctr in (0, 1): the training set's click rate. */
ss_status ss__ctr_score(const float *pred, const float *label, size_t n, double train_ctr,
                        ss__ctr_quality *out);

#endif
