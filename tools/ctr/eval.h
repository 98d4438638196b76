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
/* Area under the ROC curve, ties counted half. Needs both classes. */
ss_status ss__ctr_auc(const float *pred, const float *label, size_t n, double *out);

#endif
