#include "tools/ctr/eval.h"

#include <math.h>
#include <stdlib.h>

static double clip(double p) {
    return p < 1e-7 ? 1e-7 : (p > 1.0 - 1e-7 ? 1.0 - 1e-7 : p);
}

ss_status ss__ctr_logloss(const float *pred, const float *label, size_t n, double *out) {
    if (!pred || !label || n == 0 || !out)
        return SS_ERR_INVALID_ARGUMENT;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        double p = clip(pred[i]);
        sum -= label[i] > 0.5f ? log(p) : log(1.0 - p);
    }
    *out = sum / (double)n;
    return SS_OK;
}

static double entropy(double ctr) {
    return -(ctr * log(ctr) + (1.0 - ctr) * log(1.0 - ctr));
}

double ss__ctr_ne_of(double logloss_sum, double n, double clicks) {
    if (!(n > 0) || !(clicks > 0) || !(clicks < n))
        return NAN;
    return logloss_sum / n / entropy(clicks / n);
}

ss_status ss__ctr_ne(const float *pred, const float *label, size_t n, double *out) {
    if (!pred || !label || n == 0 || !out)
        return SS_ERR_INVALID_ARGUMENT;
    double pos = 0.0;
    for (size_t i = 0; i < n; i++)
        pos += label[i] > 0.5f;
    double ctr = pos / (double)n;
    if (ctr <= 0.0 || ctr >= 1.0)
        return SS_ERR_INVALID_ARGUMENT;
    double ll;
    ss_status st = ss__ctr_logloss(pred, label, n, &ll);
    if (st != SS_OK)
        return st;
    *out = ll / entropy(ctr);
    return SS_OK;
}

typedef struct scored {
    float p;
    float y;
} scored;

static int cmp_scored(const void *a, const void *b) {
    float x = ((const scored *)a)->p, y = ((const scored *)b)->p;
    return (x > y) - (x < y);
}

ss_status ss__ctr_auc(const float *pred, const float *label, size_t n, double *out) {
    if (!pred || !label || n == 0 || !out)
        return SS_ERR_INVALID_ARGUMENT;
    scored *v = malloc(n * sizeof *v);
    if (!v)
        return SS_ERR_NO_MEMORY;
    for (size_t i = 0; i < n; i++) {
        v[i].p = pred[i];
        v[i].y = label[i];
    }
    qsort(v, n, sizeof *v, cmp_scored);
    /* Mann-Whitney U: sum of positive ranks, tied scores get their mean rank. */
    double rank_sum = 0.0, npos = 0.0;
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && v[j].p == v[i].p)
            j++;
        double mean_rank = 0.5 * (double)(i + 1 + j); /* ranks i+1 .. j */
        for (size_t k = i; k < j; k++) {
            if (v[k].y > 0.5f) {
                rank_sum += mean_rank;
                npos += 1.0;
            }
        }
        i = j;
    }
    free(v);
    double nneg = (double)n - npos;
    if (npos == 0.0 || nneg == 0.0)
        return SS_ERR_INVALID_ARGUMENT;
    *out = (rank_sum - npos * (npos + 1.0) / 2.0) / (npos * nneg);
    return SS_OK;
}

ss_status ss__ctr_score(const float *pred, const float *label, size_t n, double train_ctr,
                        ss__ctr_quality *out) {
    if (!pred || !label || n == 0 || !out || !(train_ctr > 0.0 && train_ctr < 1.0))
        return SS_ERR_INVALID_ARGUMENT;
    *out = (ss__ctr_quality){.n = n, .train_ctr = train_ctr, .one_class = -1};
    double pos = 0.0, psum = 0.0;
    for (size_t i = 0; i < n; i++) {
        pos += label[i] > 0.5f;
        psum += pred[i];
    }
    out->ctr = pos / (double)n;
    out->mean_pred = psum / (double)n;
    ss_status st = ss__ctr_logloss(pred, label, n, &out->logloss);
    if (st != SS_OK)
        return st;
    out->ne = out->logloss / entropy(train_ctr);
    if (pos == 0.0 || pos == (double)n) {
        out->one_class = pos == 0.0 ? 0 : 1;
        out->ne_own_ctr = out->auc = NAN;
        return SS_OK;
    }
    out->ne_own_ctr = out->logloss / entropy(out->ctr);
    return ss__ctr_auc(pred, label, n, &out->auc);
}
