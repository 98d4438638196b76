/* Encodings of bulk floats and the mirrors of compressed sync (codec.h).
 * Both sides of a mirror must compute bit-identical floats from the same
 * bytes, so this file is built with -ffp-contract=off (no fused
 * multiply-adds that one build would use and another not). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/finite.h"
#include "common/names.h"
#include "shadow/codec.h"
#include "shadow/codec_kernels.h"
#include "shadow/kernels.h"

static const char *const enc_names[SS_ENC_COUNT] = {"f32", "fp16", "bf16", "int8"};

const char *ss__encoding_name(ss__encoding e) {
    return (unsigned)e < SS_ENC_COUNT ? enc_names[e] : NULL;
}

bool ss__encoding_parse(const char *s, ss__encoding *out) {
    if (!s)
        return false;
    const int i = ss__name_index(s, enc_names, SS_ENC_COUNT);
    if (i >= 0) {
        *out = (ss__encoding)i;
        return true;
    }
    if (!strcmp(s, "float32") || !strcmp(s, "none")) {
        *out = SS_ENC_F32;
        return true;
    }
    return false;
}

size_t ss__codec_size(ss__encoding e, size_t n) {
    switch (e) {
    case SS_ENC_F32:
        return n * 4;
    case SS_ENC_FP16:
    case SS_ENC_BF16:
        return n * 2;
    case SS_ENC_INT8:
        return n + 8 * ((n + SS_CODEC_INT8_BLOCK - 1) / SS_CODEC_INT8_BLOCK);
    }
    return 0;
}

/* ---- scalar conversions ---- */

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float from_half(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    /* Zero or subnormal: m * 2^-24; normal: rebias the exponent. Both,
     * then a mask picks one (no branch: the decode loop vectorizes). */
    uint32_t sub = bits_of((float)m * (1.0f / 16777216.0f));
    uint32_t nrm = ((e + 112u) << 23) | (m << 13);
    uint32_t is_sub = 0u - (uint32_t)(e == 0);
    return float_of(sign | (sub & is_sub) | (nrm & ~is_sub));
}

static float from_bf16(uint16_t b) {
    return float_of((uint32_t)b << 16);
}

static void put_f32(uint8_t *p, float f) {
    uint32_t u = bits_of(f);
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(u >> (8 * i));
}

static float get_f32(const uint8_t *p) {
    return float_of((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                    (uint32_t)p[3] << 24);
}

/* The step of an int8 block, computed the same way by both sides. A
 * range past FLT_MAX (hi - lo overflows: -3e38 .. 3e38) takes each end
 * apart, so the step is finite for any finite lo <= hi. */
static float int8_step(float lo, float hi) {
    float step = (hi - lo) / 255.0f;
    return isfinite(step) ? step : hi / 255.0f - lo / 255.0f;
}

/* ---- whole arrays ---- */

void ss__codec_encode(ss__encoding e, const float *in, size_t n, uint8_t *out) {
    switch (e) {
    case SS_ENC_F32:
        memcpy(out, in, n * sizeof(float)); /* little-endian host: the wire's bytes */
        return;
    case SS_ENC_FP16:
        ss__codec_to_f16(in, n, out); /* codec_kernels.c: loops GCC vectorizes */
        return;
    case SS_ENC_BF16:
        ss__codec_to_bf16(in, n, out);
        return;
    case SS_ENC_INT8:
        for (size_t b = 0; b < n; b += SS_CODEC_INT8_BLOCK) {
            size_t k = n - b < SS_CODEC_INT8_BLOCK ? n - b : SS_CODEC_INT8_BLOCK;
            float lo, hi;
            ss__codec_minmax(in + b, k, &lo, &hi);
            put_f32(out, lo);
            put_f32(out + 4, hi);
            out += 8;
            float step = int8_step(lo, hi);
            /* A subnormal step has no finite inverse: the values, all
             * within 255 such steps of lo, then round to lo. */
            float inv = step > 0 ? 1.0f / step : 0.0f;
            ss__codec_quantize_u8(in + b, k, lo, inv <= FLT_MAX ? inv : FLT_MAX, out);
            out += k;
        }
        return;
    }
}

ss_status ss__codec_decode(ss__encoding e, const uint8_t *in, size_t len, size_t n, float *out) {
    if ((unsigned)e >= SS_ENC_COUNT || len != ss__codec_size(e, n))
        return SS_ERR_INVALID_ARGUMENT;
    /* The loops below look at every value's bits and say at the end
     * whether one was NaN or Inf: no branch per value, so GCC vectorizes
     * them (the host is little-endian, codec_kernels.c checks). */
    uint32_t bad = 0;
    switch (e) {
    case SS_ENC_F32:
        memcpy(out, in, len);
        return ss__all_finite(out, n) ? SS_OK : SS_ERR_INVALID_ARGUMENT;
    case SS_ENC_FP16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, in + 2 * i, 2);
            bad |= (h & 0x7c00u) == 0x7c00u; /* Inf or NaN */
            out[i] = from_half(h);
        }
        return bad ? SS_ERR_INVALID_ARGUMENT : SS_OK;
    case SS_ENC_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t b;
            memcpy(&b, in + 2 * i, 2);
            bad |= (b & 0x7f80u) == 0x7f80u;
            out[i] = from_bf16(b);
        }
        return bad ? SS_ERR_INVALID_ARGUMENT : SS_OK;
    case SS_ENC_INT8:
        for (size_t b = 0; b < n; b += SS_CODEC_INT8_BLOCK) {
            size_t k = n - b < SS_CODEC_INT8_BLOCK ? n - b : SS_CODEC_INT8_BLOCK;
            float lo = get_f32(in), hi = get_f32(in + 4);
            if (!isfinite(lo) || !isfinite(hi) || lo > hi)
                return SS_ERR_INVALID_ARGUMENT;
            in += 8;
            /* lo + q step, by halves: q step alone can pass FLT_MAX when
             * the range does. Halving is exact (barring subnormals), so
             * the result is lo + q step's, rounded the same. A step taken
             * end by end can round up, so the top code is held to hi (a
             * compare GCC vectorizes, unlike fminf). */
            float half = int8_step(lo, hi) * 0.5f;
            for (size_t i = 0; i < k; i++) {
                float v = 2.0f * (lo * 0.5f + (float)in[i] * half);
                out[b + i] = v < hi ? v : hi;
            }
            in += k;
        }
        return SS_OK;
    }
    return SS_ERR_INVALID_ARGUMENT;
}

/* ---- mirrors ---- */

ss_status ss__codec_mirror_init(ss__codec_mirror *cm, ss__encoding e, size_t n) {
    memset(cm, 0, sizeof *cm);
    if ((unsigned)e >= SS_ENC_COUNT || n == 0 || n > SIZE_MAX / 8)
        return SS_ERR_INVALID_ARGUMENT;
    cm->m = calloc(2 * n, sizeof(float));
    if (!cm->m)
        return SS_ERR_NO_MEMORY;
    cm->tmp = cm->m + n;
    cm->enc = e;
    cm->n = n;
    return SS_OK;
}

void ss__codec_mirror_free(ss__codec_mirror *cm) {
    if (cm) {
        free(cm->m);
        memset(cm, 0, sizeof *cm);
    }
}

size_t ss__codec_upload_max(const ss__codec_mirror *cm) {
    return ss__codec_size(SS_ENC_F32, cm->n);
}

/* The mirror += decode(bytes); the bytes were just encoded or checked. */
static void mirror_add_decoded(ss__codec_mirror *cm, const uint8_t *bytes) {
    (void)ss__codec_decode(cm->enc, bytes, ss__codec_size(cm->enc, cm->n), cm->n, cm->tmp);
    for (size_t i = 0; i < cm->n; i++)
        cm->m[i] += cm->tmp[i];
}

void ss__codec_member_upload(ss__codec_mirror *cm, const float *s, uint8_t *buf,
                             ss__codec_upload *up) {
    *up = (ss__codec_upload){.enc = cm->enc, .seq = cm->seq, .payload = buf};
    if (!cm->valid) {
        up->reset = true;
        up->len = ss__codec_size(SS_ENC_F32, cm->n);
        ss__codec_encode(SS_ENC_F32, s, cm->n, buf);
        memcpy(cm->m, s, cm->n * sizeof(float));
        return;
    }
    if (cm->no_feedback)
        memset(cm->m, 0, cm->n * sizeof(float));
    uint32_t bad = 0;
    for (size_t i = 0; i < cm->n; i++) {
        cm->tmp[i] = s[i] - cm->m[i];
        bad |= (bits_of(cm->tmp[i]) & 0x7f800000u) == 0x7f800000u;
    }
    if (bad) { /* s - mirror overflowed: start the mirror over */
        cm->valid = false;
        ss__codec_member_upload(cm, s, buf, up);
        return;
    }
    up->len = ss__codec_size(cm->enc, cm->n);
    ss__codec_encode(cm->enc, cm->tmp, cm->n, buf);
    mirror_add_decoded(cm, buf);
}

ss_status ss__codec_member_easgd_reply(ss__codec_mirror *cm, const uint8_t *reply, size_t len,
                                       float *d) {
    ss_status st = ss__codec_decode(cm->enc, reply, len, cm->n, d);
    if (st != SS_OK) {
        cm->valid = false;
        return st;
    }
    for (size_t i = 0; i < cm->n; i++)
        cm->m[i] -= d[i];
    cm->seq++;
    cm->valid = true;
    return SS_OK;
}

ss_status ss__codec_member_round_reply(ss__codec_mirror *cm, const uint8_t *reply, size_t len,
                                       float *out) {
    ss_status st = ss__codec_decode(cm->enc, reply, len, cm->n, cm->tmp);
    if (st != SS_OK) {
        cm->valid = false;
        return st;
    }
    for (size_t i = 0; i < cm->n; i++)
        out[i] = cm->m[i] += cm->tmp[i];
    cm->seq++;
    cm->valid = true;
    return SS_OK;
}

void ss__codec_member_invalidate(ss__codec_mirror *cm) {
    cm->valid = false;
}

ss_status ss__codec_server_accept(ss__codec_mirror *cm, const ss__codec_upload *up) {
    if (up->enc != cm->enc)
        return SS_ERR_INVALID_ARGUMENT;
    if (up->reset) {
        ss_status st = ss__codec_decode(SS_ENC_F32, up->payload, up->len, cm->n, cm->tmp);
        if (st != SS_OK)
            return st;
        memcpy(cm->m, cm->tmp, cm->n * sizeof(float));
        cm->seq = up->seq;
        cm->valid = true;
        return SS_OK;
    }
    if (!cm->valid || up->seq != cm->seq)
        return SS_ERR_STATE;
    ss_status st = ss__codec_decode(cm->enc, up->payload, up->len, cm->n, cm->tmp);
    if (st != SS_OK)
        return st;
    if (cm->no_feedback)
        memset(cm->m, 0, cm->n * sizeof(float));
    for (size_t i = 0; i < cm->n; i++)
        cm->m[i] += cm->tmp[i];
    return SS_OK;
}

bool ss__codec_server_easgd(ss__codec_mirror *cm, float *c, float alpha, uint8_t *reply) {
    int bad = 0;
    for (size_t i = 0; i < cm->n; i++) {
        cm->tmp[i] = alpha * (cm->m[i] - c[i]);
        bad |= !isfinite(cm->tmp[i]);
    }
    if (bad)
        return false;
    ss__codec_encode(cm->enc, cm->tmp, cm->n, reply);
    if (ss__codec_decode(cm->enc, reply, ss__codec_size(cm->enc, cm->n), cm->n, cm->tmp) != SS_OK)
        return false;
    /* Checked before anything is stored: c and the mirror move together
     * or not at all. */
    for (size_t i = 0; i < cm->n; i++)
        bad |= !isfinite(c[i] + cm->tmp[i]) | !isfinite(cm->m[i] - cm->tmp[i]);
    if (bad)
        return false;
    for (size_t i = 0; i < cm->n; i++) {
        c[i] += cm->tmp[i];
        cm->m[i] -= cm->tmp[i];
    }
    cm->seq++;
    return true;
}

void ss__codec_server_round_reply(ss__codec_mirror *cm, const float *r, uint8_t *reply) {
    for (size_t i = 0; i < cm->n; i++)
        cm->tmp[i] = r[i] - cm->m[i];
    ss__codec_encode(cm->enc, cm->tmp, cm->n, reply);
    mirror_add_decoded(cm, reply);
    cm->seq++;
}

bool ss__codec_round_trip(void *ctx, float *x, size_t n, uint8_t *out) {
    const ss__encoding e = *(const ss__encoding *)ctx;
    ss__codec_encode(e, x, n, out);
    if (ss__codec_decode(e, out, ss__codec_size(e, n), n, x) == SS_OK)
        return true;
    memset(x, 0, n * sizeof *x);
    ss__codec_encode(e, x, n, out);
    return false;
}
