#include "shadow/algorithms.h"

#include <math.h>
#include <string.h>

#include "common/finite.h"
#include "common/names.h"
#include "shadow/kernels.h"

static const char *const algo_names[] = {"easgd", "ma", "bmuf"};

const char *ss__algo_name(ss__algo algo) {
    return (unsigned)algo < 3 ? algo_names[algo] : "unknown";
}

ss_status ss__algo_parse(const char *text, ss__algo *out) {
    if (!text || !out)
        return SS_ERR_INVALID_ARGUMENT;
    const int i = ss__name_index(text, algo_names, 3);
    if (i < 0)
        return SS_ERR_INVALID_ARGUMENT;
    *out = (ss__algo)i;
    return SS_OK;
}

/* Two passes instead of the fused kernel's one: the first writes d and
 * checks, the second applies, so that a refusal leaves c as it was. */
bool ss__elastic_exchange_finite(const float *restrict s, float *restrict c, float *restrict d,
                                 float alpha, size_t n) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        const float di = alpha * (s[i] - c[i]);
        d[i] = di;
        bad |= !isfinite(di) | !isfinite(c[i] + di);
    }
    if (bad)
        return false;
    ss__kernel_accumulate(c, d, n);
    return true;
}

ss_status ss__easgd_server(const float *s, float *c, float *d, float alpha, size_t n) {
    if (!s || !c || !d || n == 0 || !ss__alpha_valid(alpha))
        return SS_ERR_INVALID_ARGUMENT;
    return ss__elastic_exchange_finite(s, c, d, alpha, n) ? SS_OK : SS_ERR_NON_FINITE;
}

ss_status ss__ma_delta(const float *avg, const float *s, float *delta, size_t n) {
    if (!avg || !s || !delta || n == 0)
        return SS_ERR_INVALID_ARGUMENT;
    ss__kernel_sub(delta, avg, s, n);
    return SS_OK;
}

bool ss__bmuf_params_valid(const ss__bmuf_params *p) {
    return p && p->eta >= 0.0f && p->eta < 1.0f && p->zeta > 0.0f &&
           (double)p->zeta <= 1.0 / (1.0 - (double)p->eta);
}

ss_status ss__bmuf_step(const ss__bmuf_params *p, float *w, float *m, float *b, const float *avg,
                        size_t n, bool first) {
    if (!ss__bmuf_params_valid(p) || !w || !m || !b || !avg || n == 0)
        return SS_ERR_INVALID_ARGUMENT;
    if (first) {
        memcpy(w, avg, n * sizeof *w);
        memcpy(b, avg, n * sizeof *b);
        memset(m, 0, n * sizeof *m);
        return SS_OK;
    }
    const float eta = p->eta, zeta = p->zeta;
    /* The step once without storing it: any w, m or b (Nesterov's; the
     * classic b is w) that overflows refuses the whole step, the state
     * unchanged. */
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float mi = eta * m[i] + zeta * (avg[i] - b[i]);
        float wi = w[i] + mi;
        bad |= !isfinite(mi) | !isfinite(wi) | (p->nesterov && !isfinite(wi + eta * mi));
    }
    if (bad)
        return SS_ERR_NON_FINITE;
    for (size_t i = 0; i < n; i++) {
        float mi = eta * m[i] + zeta * (avg[i] - b[i]);
        float wi = w[i] + mi;
        m[i] = mi;
        w[i] = wi;
        b[i] = p->nesterov ? wi + eta * mi : wi;
    }
    return SS_OK;
}

void ss__mean_add(float *sum, const float *s, size_t n) {
    ss__kernel_accumulate(sum, s, n);
}

ss_status ss__mean_close(const float *sum, size_t k, float *avg, size_t n) {
    if (!sum || k == 0 || !avg || n == 0)
        return SS_ERR_INVALID_ARGUMENT;
    if (avg != sum)
        memcpy(avg, sum, n * sizeof *avg);
    ss__kernel_scale(avg, 1.0f / (float)k, n);
    return ss__all_finite(avg, n) ? SS_OK : SS_ERR_NON_FINITE;
}
