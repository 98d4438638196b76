#include "tools/ctr/drift.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"
#include "tools/ctr/rng.h"

#define HIDDEN_DIM 4
#define NW         (1 + HIDDEN_DIM) /* a slot's weights: first-order, then embedding */
#define ZIPF_S     1.1
#define SIGMA_U    0.22
#define SIGMA_E    0.15
#define BIAS       (-2.0)

/* The criteo shape's cardinalities (truth.c's); the categorical shape's
 * cycle through 20k, 50k, 100k and 200k. */
static const uint32_t criteo_vocab[SS_CTR_NUM_CAT] = {
    1460, 583,   20000, 20000, 305,  24,   12517, 633,   3,  20000, 5683,  20000, 3194,
    27,   14992, 20000, 10,    5652, 2173, 4,     20000, 18, 15,    20000, 105,   20000};
static const uint32_t categorical_vocab[4] = {20000, 50000, 100000, 200000};

/* One slot (field, Zipf rank): its id's generation (+1; 0: not computed
 * yet), the id's hash as written, and its weights' two components. */
typedef struct slot {
    uint32_t gen1;
    uint32_t id;
    float phase; /* of its renewals, in [0, 1) */
    float a[NW], b[NW];
} slot;

/* An alias-table entry: one cache line fetch per draw. */
typedef struct alias_entry {
    float prob;
    uint32_t alias;
} alias_entry;

struct ss__ctr_drift_cache {
    slot *slots[SS_CTR_NUM_CAT];
};

struct ss__ctr_drift {
    ss__ctr_drift_config cfg;
    uint32_t vocab[SS_CTR_NUM_CAT];
    alias_entry *table[SS_CTR_NUM_CAT]; /* alias tables (Vose) of the Zipf ranks */
    ss__ctr_drift_cache *cache;         /* ss__ctr_drift_sample's */
    double cat_missing_p[SS_CTR_NUM_CAT];
    double int_mu[SS_CTR_NUM_DENSE], int_sigma[SS_CTR_NUM_DENSE], int_missing_p[SS_CTR_NUM_DENSE];
    double int_a[SS_CTR_NUM_DENSE], int_b[SS_CTR_NUM_DENSE];
};

/* Vose's alias method over Zipf(ZIPF_S) weights of ranks 0..n-1. */
static ss_status build_alias(uint32_t n, alias_entry *t) {
    double *w = malloc(n * sizeof *w);
    uint32_t *small = malloc(n * sizeof *small), *large = malloc(n * sizeof *large);
    if (!w || !small || !large) {
        free(w);
        free(small);
        free(large);
        return SS_ERR_NO_MEMORY;
    }
    double sum = 0.0;
    for (uint32_t v = 0; v < n; v++)
        sum += (w[v] = pow((double)(v + 1), -ZIPF_S));
    uint32_t ns = 0, nl = 0;
    for (uint32_t v = 0; v < n; v++) {
        w[v] *= (double)n / sum;
        if (w[v] < 1.0)
            small[ns++] = v;
        else
            large[nl++] = v;
    }
    while (ns && nl) {
        uint32_t s = small[--ns], l = large[--nl];
        t[s] = (alias_entry){(float)w[s], l};
        w[l] -= 1.0 - w[s];
        if (w[l] < 1.0)
            small[ns++] = l;
        else
            large[nl++] = l;
    }
    while (nl) { /* what is left has weight 1, up to rounding */
        uint32_t l = large[--nl];
        t[l] = (alias_entry){1.0f, l};
    }
    while (ns) {
        uint32_t s = small[--ns];
        t[s] = (alias_entry){1.0f, s};
    }
    free(w);
    free(small);
    free(large);
    return SS_OK;
}

ss_status ss__ctr_drift_create(const ss__ctr_drift_config *cfg, ss__ctr_drift **out, char *why,
                               size_t whylen) {
    if (!cfg || !out || !(cfg->turnover >= 0 && cfg->turnover <= 1e6) ||
        !(cfg->rate >= 0 && isfinite(cfg->rate)))
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                        "drift turnover must be 0 to 1e6 and its rate finite");
    ss__ctr_drift *d = calloc(1, sizeof *d);
    if (!d)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the drifting stream");
    d->cfg = *cfg;
    for (int f = 0; f < SS_CTR_NUM_CAT; f++) {
        d->vocab[f] = cfg->categorical ? categorical_vocab[f % 4] : criteo_vocab[f];
        d->table[f] = malloc(d->vocab[f] * sizeof(alias_entry));
        if (!d->table[f] || build_alias(d->vocab[f], d->table[f]) != SS_OK) {
            ss__ctr_drift_destroy(d);
            return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the drifting stream");
        }
        d->cat_missing_p[f] = cfg->categorical ? 0.02 : f >= 19 ? 0.3 : 0.01;
    }
    if (ss__ctr_drift_cache_create(d, &d->cache, why, whylen) != SS_OK) {
        ss__ctr_drift_destroy(d);
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the drifting stream");
    }
    ss__rng rng;
    ss__rng_seed(&rng, cfg->model_seed ^ 0x1d8e4e27c47d124full);
    for (int j = 0; j < SS_CTR_NUM_DENSE; j++) {
        d->int_mu[j] = 0.5 + 3.0 * ss__rng_uniform(&rng);
        d->int_sigma[j] = 0.5 + 1.0 * ss__rng_uniform(&rng);
        d->int_missing_p[j] = (j % 4 == 1) ? 0.4 : 0.05;
        d->int_a[j] = 0.15 * ss__rng_normal(&rng);
        d->int_b[j] = 0.15 * ss__rng_normal(&rng);
    }
    *out = d;
    return SS_OK;
}

void ss__ctr_drift_destroy(ss__ctr_drift *d) {
    if (!d)
        return;
    for (int f = 0; f < SS_CTR_NUM_CAT; f++)
        free(d->table[f]);
    ss__ctr_drift_cache_destroy(d->cache);
    free(d);
}

ss_status ss__ctr_drift_cache_create(const ss__ctr_drift *d, ss__ctr_drift_cache **out, char *why,
                                     size_t whylen) {
    ss__ctr_drift_cache *c = calloc(1, sizeof *c);
    if (!c)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the drift cache");
    for (int f = 0; f < SS_CTR_NUM_CAT; f++) {
        if (!(c->slots[f] = calloc(d->vocab[f], sizeof(slot)))) {
            ss__ctr_drift_cache_destroy(c);
            return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the drift cache");
        }
    }
    *out = c;
    return SS_OK;
}

void ss__ctr_drift_cache_destroy(ss__ctr_drift_cache *c) {
    if (!c)
        return;
    for (int f = 0; f < SS_CTR_NUM_CAT; f++)
        free(c->slots[f]);
    free(c);
}

/* The slot's id at row index: renewed once per 1e6 / turnover rows, at a
 * phase of the slot's own. */
static const slot *slot_at(const ss__ctr_drift *d, ss__ctr_drift_cache *c, int f, uint32_t v,
                           uint64_t index) {
    const uint64_t seed = d->cfg.model_seed;
    slot *s = &c->slots[f][v];
    if (!s->gen1)
        s->phase = (float)ss__u01(ss__hash3(seed ^ 0x5eedfaceull, (uint64_t)f, v));
    const uint32_t gen = (uint32_t)floor((double)index * d->cfg.turnover * 1e-6 + s->phase);
    if (s->gen1 == gen + 1)
        return s;
    const uint64_t h = ss__hash3(seed + (uint64_t)gen * 0x9e3779b97f4a7c15ull, (uint64_t)f, v);
    s->gen1 = gen + 1;
    s->id = (uint32_t)(h >> 32);
    s->a[0] = (float)(SIGMA_U * ss__hash_normal(h ^ 0x75));
    s->b[0] = (float)(SIGMA_U * ss__hash_normal(h ^ 0xb075));
    for (int k = 0; k < HIDDEN_DIM; k++) {
        s->a[1 + k] = (float)(SIGMA_E * ss__hash_normal(h + 0x1000u * (uint64_t)(k + 1)));
        s->b[1 + k] =
            (float)(SIGMA_E * ss__hash_normal((h ^ 0xb0b0) + 0x1000u * (uint64_t)(k + 1)));
    }
    return s;
}

void ss__ctr_drift_draw(const ss__ctr_drift *d, ss__rng *rng, ss__ctr_drift_draws *out) {
    out->cat_missing = 0;
    for (int f = 0; f < SS_CTR_NUM_CAT; f++) {
        if (ss__rng_uniform(rng) < d->cat_missing_p[f])
            out->cat_missing |= 1u << f;
        else
            out->u[f] = ss__rng_uniform(rng) * d->vocab[f];
    }
    out->int_missing = 0;
    for (int j = 0; j < SS_CTR_NUM_DENSE; j++) {
        if (d->cfg.categorical || ss__rng_uniform(rng) < d->int_missing_p[j]) {
            out->int_missing |= (uint16_t)(1u << j);
            continue;
        }
        out->z1[j] = ss__rng_uniform(rng);
        out->z2[j] = ss__rng_uniform(rng);
    }
    out->label_u = ss__rng_uniform(rng);
}

/* The categorical fields' part of the logit. Three passes over the
 * fields, so that the table lookups of all 26 are in flight at once: a
 * draw reads a random alias entry and then a random slot, each a cache
 * miss (perf: two thirds of the time went to those two loads, one field
 * after the other). */
static double make_fields(const ss__ctr_drift *d, ss__ctr_drift_cache *c,
                          const ss__ctr_drift_draws *dr, uint64_t index, double cs, double sn,
                          ss__ctr_raw_row *row) {
    uint32_t v[SS_CTR_NUM_CAT];
    for (int f = 0; f < SS_CTR_NUM_CAT; f++) { /* the alias entries on their way */
        row->cat_missing[f] = (dr->cat_missing >> f) & 1;
        if (row->cat_missing[f])
            continue;
        v[f] = (uint32_t)dr->u[f];
        if (v[f] >= d->vocab[f])
            v[f] = d->vocab[f] - 1;
        __builtin_prefetch(&d->table[f][v[f]]);
    }
    for (int f = 0; f < SS_CTR_NUM_CAT; f++) { /* ranks; their slots on their way */
        if (row->cat_missing[f])
            continue;
        const alias_entry a = d->table[f][v[f]];
        if (dr->u[f] - v[f] >= a.prob)
            v[f] = a.alias;
        __builtin_prefetch(&c->slots[f][v[f]]);
    }
    double logit = 0.0, sum[HIDDEN_DIM] = {0}, sq = 0.0;
    for (int f = 0; f < SS_CTR_NUM_CAT; f++) {
        if (row->cat_missing[f]) {
            row->cats[f] = 0;
            continue;
        }
        const slot *s = slot_at(d, c, f, v[f], index);
        row->cats[f] = s->id;
        logit += cs * s->a[0] + sn * s->b[0];
        for (int k = 0; k < HIDDEN_DIM; k++) {
            const double e = cs * s->a[1 + k] + sn * s->b[1 + k];
            sum[k] += e;
            sq += e * e;
        }
    }
    /* sum over pairs f < g of e_f . e_g = (|sum e|^2 - sum |e|^2) / 2 */
    for (int k = 0; k < HIDDEN_DIM; k++)
        logit += 0.5 * sum[k] * sum[k];
    return logit - 0.5 * sq;
}

void ss__ctr_drift_make(const ss__ctr_drift *d, ss__ctr_drift_cache *c,
                        const ss__ctr_drift_draws *dr, uint64_t index, ss__ctr_raw_row *row,
                        double *p) {
    const double theta = (double)index * d->cfg.rate * 1e-6, cs = cos(theta), sn = sin(theta);
    double logit = BIAS + make_fields(d, c, dr, index, cs, sn, row);
    for (int j = 0; j < SS_CTR_NUM_DENSE; j++) {
        row->int_missing[j] = (dr->int_missing >> j) & 1;
        if (row->int_missing[j]) {
            row->ints[j] = 0;
            continue;
        }
        double z = ss__normal_of(dr->z1[j], dr->z2[j]);
        double v = floor(exp(d->int_mu[j] + d->int_sigma[j] * z)) - 1.0;
        row->ints[j] = v < 0.0 ? 0 : (int64_t)v;
        logit += (cs * d->int_a[j] + sn * d->int_b[j]) * z;
    }
    *p = 1.0 / (1.0 + exp(-logit));
    row->label = dr->label_u < *p;
}

void ss__ctr_drift_sample(ss__ctr_drift *d, ss__rng *rng, uint64_t index, ss__ctr_raw_row *row,
                          double *p) {
    ss__ctr_drift_draws dr;
    ss__ctr_drift_draw(d, rng, &dr);
    ss__ctr_drift_make(d, d->cache, &dr, index, row, p);
}

size_t ss__ctr_raw_row_format(const ss__ctr_raw_row *row, char *buf) {
    static const char hex[] = "0123456789abcdef";
    char *o = buf;
    *o++ = row->label ? '1' : '0';
    for (int j = 0; j < SS_CTR_NUM_DENSE; j++) {
        *o++ = '\t';
        if (row->int_missing[j])
            continue;
        int64_t v = row->ints[j];
        uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
        if (v < 0)
            *o++ = '-';
        char tmp[24];
        int n = 0;
        do {
            tmp[n++] = (char)('0' + m % 10);
            m /= 10;
        } while (m);
        while (n)
            *o++ = tmp[--n];
    }
    for (int f = 0; f < SS_CTR_NUM_CAT; f++) {
        *o++ = '\t';
        if (row->cat_missing[f])
            continue;
        for (int k = 7; k >= 0; k--)
            *o++ = hex[(row->cats[f] >> (4 * k)) & 15];
    }
    *o++ = '\n';
    return (size_t)(o - buf);
}
