/* The embedding math as pure functions: spec checks, deterministic row
 * initialization, the optimizers, the per-row elastic step and shard
 * routing. No locks, no memory of their own. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/hash.h"
#include "embedding-store/emb_table.h"

ss_status ss__emb_spec_init(ss__emb_spec *spec, const char *name, uint32_t dim) {
    if (!spec || !name || strlen(name) >= SS_EMB_NAME_MAX)
        return SS_ERR_INVALID_ARGUMENT;
    memset(spec, 0, sizeof *spec);
    snprintf(spec->name, sizeof spec->name, "%s", name);
    spec->dim = dim;
    spec->optimizer = SS_EMB_SGD;
    spec->lr = 0.05f;
    spec->eps = 1e-8f;
    spec->init_scale = 0.01f;
    return ss__emb_spec_check(spec, NULL, 0);
}

ss_status ss__emb_spec_check(const ss__emb_spec *spec, char *why, size_t whylen) {
    const char *bad = NULL;
    if (!spec)
        bad = "no spec";
    else if (!ss__name_valid(spec->name))
        bad = "table name must be " SS_NAME_RULE;
    else if (ss__emb_table_id(spec->name) == 0xFFFFFFFFu)
        bad = "table name hashes to the reserved id; pick another name";
    else if (spec->dim == 0 || spec->dim > SS_EMB_MAX_DIM)
        bad = "dim must be 1..4096";
    else if (spec->optimizer != SS_EMB_SGD && spec->optimizer != SS_EMB_ADAGRAD)
        bad = "unknown optimizer";
    else if (!(spec->lr >= 0.0f) || !isfinite(spec->lr))
        bad = "lr must be finite and >= 0";
    else if (!(spec->eps > 0.0f) || !isfinite(spec->eps))
        bad = "eps must be finite and > 0";
    else if (!(spec->init_scale >= 0.0f) || !isfinite(spec->init_scale))
        bad = "init_scale must be finite and >= 0";
    if (bad && why && whylen)
        snprintf(why, whylen, "%s", bad);
    return bad ? SS_ERR_INVALID_ARGUMENT : SS_OK;
}

bool ss__emb_spec_same(const ss__emb_spec *a, const ss__emb_spec *b) {
    return a->dim == b->dim && a->optimizer == b->optimizer && a->lr == b->lr && a->eps == b->eps &&
           a->init_scale == b->init_scale;
}

size_t ss__emb_state_floats(ss__emb_optimizer opt) {
    return opt == SS_EMB_ADAGRAD ? 1 : 0;
}

size_t ss__emb_row_floats(const ss__emb_spec *spec) {
    return spec->dim + ss__emb_state_floats(spec->optimizer);
}

uint32_t ss__emb_table_id(const char *name) {
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h;
}

static uint64_t row_key(uint32_t table_id, uint64_t id) {
    return ss__splitmix64(ss__splitmix64(id) ^ ((uint64_t)table_id * 0xD6E8FEB86659FD93ull));
}

void ss__emb_row_init(uint32_t table_id, uint64_t id, float scale, float *row, size_t dim,
                      size_t state_floats) {
    uint64_t h = row_key(table_id, id);
    for (size_t j = 0; j < dim; j++) {
        /* 24 random bits -> [0, 1) exactly representable in a float */
        float u = (float)(ss__splitmix64(h + j) >> 40) * (1.0f / 16777216.0f);
        row[j] = scale * (2.0f * u - 1.0f);
    }
    for (size_t j = 0; j < state_floats; j++)
        row[dim + j] = 0.0f;
}

/* The sum of x[j]^2 in 8 lanes: one serial float sum waits on each add
 * and may not be reordered into vectors; 8 chains vectorize. */
static float sum_squares(const float *x, size_t dim) {
    float lane[8] = {0};
    size_t j = 0;
    for (; j + 8 <= dim; j += 8)
        for (int k = 0; k < 8; k++)
            lane[k] += x[j + k] * x[j + k];
    for (; j < dim; j++)
        lane[0] += x[j] * x[j];
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
           ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

/* out[j] = row[j] - step * grad[j] for every j; false when one of them
 * is not finite. One pass: x * 0 is 0 for every finite x and NaN for an
 * infinite or NaN one, so 8 lanes of such products summed say whether
 * all were finite (a separate isfinite pass before the update cost pushes
 * a fifth of their time). */
static bool step_into(float *restrict out, const float *restrict row, float step,
                      const float *restrict grad, size_t dim) {
    float zero[8] = {0};
    size_t j = 0;
    for (; j + 8 <= dim; j += 8)
        for (int k = 0; k < 8; k++) {
            out[j + k] = row[j + k] - step * grad[j + k];
            zero[k] += out[j + k] * 0.0f;
        }
    for (; j < dim; j++) {
        out[j] = row[j] - step * grad[j];
        zero[0] += out[j] * 0.0f;
    }
    return isfinite(((zero[0] + zero[1]) + (zero[2] + zero[3])) +
                    ((zero[4] + zero[5]) + (zero[6] + zero[7])));
}

bool ss__emb_apply_gradient(const ss__emb_spec *spec, float *row, const float *grad) {
    const size_t dim = spec->dim;
    float next[SS_EMB_MAX_DIM]; /* the row's new values: written only when all are finite */
    float step = spec->lr, acc = 0.0f;
    if (spec->optimizer == SS_EMB_ADAGRAD) {
        acc = row[dim] + sum_squares(grad, dim) / (float)dim;
        step = spec->lr / (sqrtf(acc) + spec->eps);
        if (!isfinite(acc))
            return false;
    }
    if (!step_into(next, row, step, grad, dim))
        return false;
    if (spec->optimizer == SS_EMB_ADAGRAD)
        row[dim] = acc;
    memcpy(row, next, dim * sizeof *row);
    return true;
}

bool ss__emb_elastic(float *center, const float *x, float alpha, float *delta, size_t dim) {
    int bad = 0;
    for (size_t j = 0; j < dim; j++) {
        delta[j] = alpha * (x[j] - center[j]);
        bad |= !isfinite(delta[j]) | !isfinite(center[j] + delta[j]);
    }
    if (bad) {
        memset(delta, 0, dim * sizeof *delta);
        return false;
    }
    for (size_t j = 0; j < dim; j++)
        center[j] += delta[j];
    return true;
}

bool ss__emb_elastic_encoded(float *center, const float *x, float alpha,
                             const ss__emb_delta_encoder *enc, uint8_t *out, size_t dim) {
    float d[SS_EMB_MAX_DIM];
    for (size_t j = 0; j < dim; j++)
        d[j] = alpha * (x[j] - center[j]);
    if (!enc->fn(enc->ctx, d, dim, out))
        return false; /* d and out are zeros */
    int bad = 0;
    for (size_t j = 0; j < dim; j++)
        bad |= !isfinite(center[j] + d[j]);
    if (bad) {
        memset(d, 0, dim * sizeof *d);
        (void)enc->fn(enc->ctx, d, dim, out); /* zeros, as for a delta not held */
        return false;
    }
    for (size_t j = 0; j < dim; j++)
        center[j] += d[j];
    return true;
}

uint32_t ss__emb_shard_of(uint32_t table_id, uint64_t id, uint32_t shards) {
    if (shards <= 1)
        return 0;
    uint64_t key = row_key(table_id, id);
    int64_t b = -1, j = 0;
    while (j < (int64_t)shards) {
        b = j;
        key = key * 2862933555777941757ull + 1;
        j = (int64_t)((double)(b + 1) * ((double)(1ll << 31) / (double)((key >> 33) + 1)));
    }
    return (uint32_t)b;
}
