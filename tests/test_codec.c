/* shadow/codec: the encodings against hand-computed bits, and the mirrors
 * of compressed sync (error feedback, conservation, falling out of step). */
#include <check.h>

#include "check_run.h"
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "shadow/codec.h"

static uint16_t u16_at(const uint8_t *p, size_t i) {
    return (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
}

/* Encodes n floats of in with a 16-bit encoding, at an aligned buffer
 * (buf, 2n bytes) and at an odd address, and checks both against want. */
static void check_u16_bits(ss__encoding enc, const float *in, const uint16_t *want, size_t n,
                           uint8_t *buf) {
    uint8_t unaligned[2 * 8 + 1];
    ck_assert_uint_le(n, 8);
    ss__codec_encode(enc, in, n, buf);
    ss__codec_encode(enc, in, n, unaligned + 1);
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(u16_at(buf, i) == want[i], "element %zu: 0x%04x, want 0x%04x", i,
                      u16_at(buf, i), want[i]);
        ck_assert_msg(u16_at(unaligned + 1, i) == want[i], "odd address, element %zu: 0x%04x", i,
                      u16_at(unaligned + 1, i));
    }
}

START_TEST(test_sizes_and_names) {
    ck_assert_uint_eq(ss__codec_size(SS_ENC_F32, 10), 40);
    ck_assert_uint_eq(ss__codec_size(SS_ENC_FP16, 10), 20);
    ck_assert_uint_eq(ss__codec_size(SS_ENC_BF16, 10), 20);
    /* 300 floats: two blocks (256 + 44), each with its min and max. */
    ck_assert_uint_eq(ss__codec_size(SS_ENC_INT8, 300), 300 + 2 * 8);
    ck_assert_uint_eq(ss__codec_size(SS_ENC_INT8, 256), 256 + 8);
    ck_assert_uint_eq(ss__codec_size((ss__encoding)7, 10), 0);
    ss__encoding e;
    ck_assert(ss__encoding_parse("int8", &e) && e == SS_ENC_INT8);
    ck_assert(ss__encoding_parse("float32", &e) && e == SS_ENC_F32);
    ck_assert(!ss__encoding_parse("int4", &e));
    ck_assert_str_eq(ss__encoding_name(SS_ENC_BF16), "bf16");
    ck_assert_ptr_null(ss__encoding_name((ss__encoding)9));
}
END_TEST

START_TEST(test_fp16_bits) {
    /* 1, -2, the largest half, a value past it (saturates), 0.1 (nearest
     * half 0x2E66 = 0.0999755859375), the smallest subnormal 2^-24, and
     * 2^-25 * 1.5 (rounds to 2^-24). */
    const float in[] = {1.0f, -2.0f, 65504.0f, 1e6f, 0.1f, 5.9604644775390625e-8f, 8.940697e-8f};
    const uint16_t want[] = {0x3C00, 0xC000, 0x7BFF, 0x7BFF, 0x2E66, 0x0001, 0x0002};
    /* Any alignment: an aligned buffer and an odd address. */
    uint16_t aligned[7];
    uint8_t *buf = (uint8_t *)aligned;
    check_u16_bits(SS_ENC_FP16, in, want, 7, buf);
    float out[7];
    ck_assert_int_eq(ss__codec_decode(SS_ENC_FP16, buf, 14, 7, out), SS_OK);
    ck_assert_float_eq(out[0], 1.0f);
    ck_assert_float_eq(out[1], -2.0f);
    ck_assert_float_eq(out[3], 65504.0f);
    ck_assert_float_eq(out[4], 0.0999755859375f);
    ck_assert_float_eq(out[5], 5.9604644775390625e-8f);
    /* 1 + 2^-11 is halfway between 1 and 1 + 2^-10: to the even one, 1. */
    const float tie = 1.00048828125f;
    ss__codec_encode(SS_ENC_FP16, &tie, 1, buf);
    ck_assert_uint_eq(u16_at(buf, 0), 0x3C00);
}
END_TEST

START_TEST(test_bf16_bits) {
    /* 1; 1 + 2^-8 (a tie, to even: 1); 1 + 3 2^-8 (a tie, to even:
     * 0x3F82); -0.5; 3.0e38 (beyond bf16's largest finite: saturates). */
    const float in[] = {1.0f, 1.00390625f, 1.01171875f, -0.5f, 3.4e38f};
    const uint16_t want[] = {0x3F80, 0x3F80, 0x3F82, 0xBF00, 0x7F7F};
    uint16_t aligned[5];
    uint8_t *buf = (uint8_t *)aligned;
    check_u16_bits(SS_ENC_BF16, in, want, 5, buf);
    float out[5];
    ck_assert_int_eq(ss__codec_decode(SS_ENC_BF16, buf, 10, 5, out), SS_OK);
    ck_assert_float_eq(out[2], 1.015625f); /* 1 + 2/128 */
}
END_TEST

START_TEST(test_int8_blocks) {
    /* One block: min 0, max 255, step 1. 127.5 -> 128 (a tie, to even),
     * 63.25 -> 63. */
    const float in[] = {0.0f, 255.0f, 127.5f, 63.25f};
    uint8_t buf[12];
    ss__codec_encode(SS_ENC_INT8, in, 4, buf);
    float lo, hi;
    memcpy(&lo, buf, 4);
    memcpy(&hi, buf + 4, 4);
    ck_assert_float_eq(lo, 0.0f);
    ck_assert_float_eq(hi, 255.0f);
    ck_assert_uint_eq(buf[8], 0);
    ck_assert_uint_eq(buf[9], 255);
    ck_assert_uint_eq(buf[10], 128);
    ck_assert_uint_eq(buf[11], 63);
    float out[4];
    ck_assert_int_eq(ss__codec_decode(SS_ENC_INT8, buf, 12, 4, out), SS_OK);
    ck_assert_float_eq(out[2], 128.0f);
    ck_assert_float_eq(out[3], 63.0f);
    /* A constant block: step 0, every value exact. */
    const float flat[] = {-3.0f, -3.0f};
    uint8_t fb[10];
    ss__codec_encode(SS_ENC_INT8, flat, 2, fb);
    ck_assert_int_eq(ss__codec_decode(SS_ENC_INT8, fb, 10, 2, out), SS_OK);
    ck_assert_float_eq(out[1], -3.0f);
    /* Two blocks: each has its own range; the error of each value is at
     * most half its block's step. */
    float big[300], back[300];
    for (int i = 0; i < 300; i++)
        big[i] = i < 256 ? (float)i * 0.01f : 1000.0f + (float)i;
    uint8_t bb[316];
    ss__codec_encode(SS_ENC_INT8, big, 300, bb);
    ck_assert_int_eq(ss__codec_decode(SS_ENC_INT8, bb, 316, 300, back), SS_OK);
    for (int i = 0; i < 300; i++) {
        float half_step = i < 256 ? 2.55f / 255 / 2 : 43.0f / 255 / 2;
        ck_assert_msg(fabsf(back[i] - big[i]) <= half_step * 1.001f, "element %d: %g for %g", i,
                      (double)back[i], (double)big[i]);
    }
}
END_TEST

/* Blocks at the ends of the float range (a fuzzer found the first: its
 * q was a NaN converted to int). A range past FLT_MAX: the ends stay
 * exact and the middle is within half a step; a subnormal step: every
 * value rounds to lo. Both decode. */
START_TEST(test_int8_extreme_ranges) {
    const float wide[] = {-3e38f, 3e38f, 0.0f, 1.5e38f};
    uint8_t buf[12];
    float out[4];
    ss__codec_encode(SS_ENC_INT8, wide, 4, buf);
    ck_assert_uint_eq(buf[8], 0);
    ck_assert_uint_eq(buf[9], 255);
    ck_assert_uint_eq(buf[11], 191); /* 4.5e38 / (6e38 / 255) = 191.25 */
    ck_assert_int_eq(ss__codec_decode(SS_ENC_INT8, buf, 12, 4, out), SS_OK);
    const float step = 3e38f / 255.0f * 2.0f;
    for (int i = 0; i < 4; i++)
        ck_assert_msg(isfinite(out[i]) && fabsf(out[i] - wide[i]) <= step * 0.501f,
                      "element %d: %g for %g", i, (double)out[i], (double)wide[i]);
    ck_assert_float_eq(out[0], -3e38f);
    const float tiny[] = {0.0f, 1e-40f, 5e-41f};
    uint8_t tb[11];
    ss__codec_encode(SS_ENC_INT8, tiny, 3, tb);
    ck_assert_uint_eq(tb[8] | tb[9] | tb[10], 0);
    ck_assert_int_eq(ss__codec_decode(SS_ENC_INT8, tb, 11, 3, out), SS_OK);
    for (int i = 0; i < 3; i++)
        ck_assert_float_eq(out[i], 0.0f);
    /* A range past FLT_MAX whose top is FLT_MAX: the step, taken end by
     * end, rounds up, so lo + 255 steps passed FLT_MAX and decoded to
     * +Inf (fuzz_codec found it in CI). The top code decodes to hi. */
    uint8_t top[12] = {0x00, 0x00, 0x3b, 0xfe, 0xff, 0xff, 0x7f, 0x7f, 0x43, 0x00, 0xff, 0x80};
    ck_assert_int_eq(ss__codec_decode(SS_ENC_INT8, top, 12, 4, out), SS_OK);
    ck_assert_float_eq(out[2], FLT_MAX);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(isfinite(out[i]), "element %d: %g", i, (double)out[i]);
}
END_TEST

START_TEST(test_decode_refuses_bad_payloads) {
    float out[4];
    uint8_t h[4] = {0x00, 0x7C, 0x00, 0x3C}; /* +Inf, 1 */
    ck_assert_int_eq(ss__codec_decode(SS_ENC_FP16, h, 4, 2, out), SS_ERR_INVALID_ARGUMENT);
    h[1] = 0x3C;
    ck_assert_int_eq(ss__codec_decode(SS_ENC_FP16, h, 4, 2, out), SS_OK);
    ck_assert_int_eq(ss__codec_decode(SS_ENC_FP16, h, 3, 2, out), SS_ERR_INVALID_ARGUMENT);
    uint8_t b[4] = {0x80, 0x7F, 0xC0, 0x7F}; /* bf16 +Inf, NaN */
    ck_assert_int_eq(ss__codec_decode(SS_ENC_BF16, b, 4, 2, out), SS_ERR_INVALID_ARGUMENT);
    /* int8 with min > max, and with a NaN min. */
    uint8_t q[10];
    const float lo = 2.0f, hi = 1.0f, nan = NAN;
    memcpy(q, &lo, 4);
    memcpy(q + 4, &hi, 4);
    q[8] = q[9] = 0;
    ck_assert_int_eq(ss__codec_decode(SS_ENC_INT8, q, 10, 2, out), SS_ERR_INVALID_ARGUMENT);
    memcpy(q, &nan, 4);
    ck_assert_int_eq(ss__codec_decode(SS_ENC_INT8, q, 10, 2, out), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss__codec_decode((ss__encoding)5, q, 10, 2, out), SS_ERR_INVALID_ARGUMENT);
}
END_TEST

/* A member and its server, each with a mirror. */
typedef struct pair {
    ss__codec_mirror member, server;
    uint8_t *up, *reply;
} pair;

static void pair_init(pair *p, ss__encoding e, size_t n) {
    ck_assert_int_eq(ss__codec_mirror_init(&p->member, e, n), SS_OK);
    ck_assert_int_eq(ss__codec_mirror_init(&p->server, e, n), SS_OK);
    p->up = malloc(ss__codec_upload_max(&p->member));
    p->reply = malloc(ss__codec_size(e, n));
}

static void pair_free(pair *p) {
    ss__codec_mirror_free(&p->member);
    ss__codec_mirror_free(&p->server);
    free(p->up);
    free(p->reply);
}

static void assert_mirrors_equal(const pair *p) {
    ck_assert_msg(memcmp(p->member.m, p->server.m, p->member.n * sizeof(float)) == 0,
                  "the two mirrors differ");
    ck_assert_uint_eq(p->member.seq, p->server.seq);
}

/* The member starts over: its next upload is a reset the server takes,
 * and after a round both mirrors agree. up keeps that upload. */
static void start_over(pair *p, const float *s, ss__codec_upload *up, float *out) {
    ss__codec_member_invalidate(&p->member);
    ss__codec_member_upload(&p->member, s, p->up, up);
    ck_assert(up->reset);
    ck_assert_int_eq(ss__codec_server_accept(&p->server, up), SS_OK);
    ss__codec_server_round_reply(&p->server, s, p->reply);
    ck_assert_int_eq(ss__codec_member_round_reply(&p->member, p->reply,
                                                  ss__codec_size(p->member.enc, p->member.n), out),
                     SS_OK);
    assert_mirrors_equal(p);
}

/* The worst error of the server's view of a snapshot that moves every
 * round (int8, 20 rounds), with or without error feedback. */
static double moving_snapshot_view_error(bool no_feedback) {
    enum { N = 512 };
    float s[N];
    for (int i = 0; i < N; i++)
        s[i] = sinf((float)i) * (i < 256 ? 1.0f : 0.01f);
    pair p;
    pair_init(&p, SS_ENC_INT8, N);
    p.member.no_feedback = p.server.no_feedback = no_feedback;
    double worst = 0;
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < N; i++)
            s[i] += 0.01f * cosf((float)(i + round));
        ss__codec_upload up;
        ss__codec_member_upload(&p.member, s, p.up, &up);
        ck_assert_int_eq(ss__codec_server_accept(&p.server, &up), SS_OK);
        ss__codec_server_round_reply(&p.server, p.server.m, p.reply);
        float out[N];
        ck_assert_int_eq(
            ss__codec_member_round_reply(&p.member, p.reply, ss__codec_size(SS_ENC_INT8, N), out),
            SS_OK);
        assert_mirrors_equal(&p);
        if (round > 0)
            for (int i = 0; i < N; i++)
                worst = fmax(worst, fabs((double)p.server.m[i] - s[i]));
    }
    pair_free(&p);
    return worst;
}

/* MA rounds whose result is the member's own mirror: the upload's
 * quantization error goes out with the next upload, so the server's view
 * of a fixed snapshot converges on it (by ~255x per round for int8). */
START_TEST(test_error_feedback_converges) {
    enum { N = 512 };
    float s[N], r[N];
    for (int i = 0; i < N; i++)
        s[i] = sinf((float)i) * (i < 256 ? 1.0f : 0.01f);
    for (ss__encoding e = SS_ENC_FP16; e <= SS_ENC_INT8; e++) {
        pair p;
        pair_init(&p, e, N);
        double err[5];
        for (int round = 0; round < 5; round++) {
            ss__codec_upload up;
            ss__codec_member_upload(&p.member, s, p.up, &up);
            ck_assert(up.reset == (round == 0)); /* the first one starts the mirror */
            ck_assert_uint_eq(up.len, round == 0 ? 4 * N : ss__codec_size(e, N));
            ck_assert_int_eq(ss__codec_server_accept(&p.server, &up), SS_OK);
            memcpy(r, p.server.m, sizeof r); /* a round of one */
            ss__codec_server_round_reply(&p.server, r, p.reply);
            float out[N];
            ck_assert_int_eq(
                ss__codec_member_round_reply(&p.member, p.reply, ss__codec_size(e, N), out), SS_OK);
            assert_mirrors_equal(&p);
            err[round] = 0;
            for (int i = 0; i < N; i++)
                err[round] = fmax(err[round], fabs((double)p.server.m[i] - s[i]));
        }
        ck_assert_msg(err[0] == 0, "%s: a reset carries the snapshot exactly",
                      ss__encoding_name(e));
        /* Later rounds upload s - mirror = 0: exact too. A moving s is next. */
        pair_free(&p);
    }
    /* A snapshot that moves every round, for int8: with the feedback the
     * server's view trails it by a quantization of one round's move (its
     * range ~0.02 per block: steps of ~8e-5); without it, by a quantization
     * of the weights themselves (range ~2 in the first block: steps of
     * ~8e-3). */
    double with = moving_snapshot_view_error(false), without = moving_snapshot_view_error(true);
    ck_assert_msg(with < 1e-4, "server's view off by %g", with);
    ck_assert_msg(without > 1e-3, "without feedback the view is off by only %g", without);
}
END_TEST

/* S-EASGD through mirrors: the member applies x -= d and the server c +=
 * d with the same decoded d, so x + c is conserved as with float32. */
START_TEST(test_easgd_conserves_and_converges) {
    enum { N = 300 };
    float x[N], c[N], d[N];
    double sum0 = 0;
    for (int i = 0; i < N; i++) {
        x[i] = (float)i * 0.001f;
        c[i] = 0;
    }
    pair p;
    pair_init(&p, SS_ENC_INT8, N);
    for (int round = 0; round < 40; round++) {
        ss__codec_upload up;
        ss__codec_member_upload(&p.member, x, p.up, &up);
        ck_assert_int_eq(ss__codec_server_accept(&p.server, &up), SS_OK);
        if (round == 0)
            memcpy(c, p.server.m, sizeof c); /* c starts as the first snapshot */
        if (round == 0)
            for (int i = 0; i < N; i++)
                sum0 += (double)x[i] + c[i];
        ss__codec_server_easgd(&p.server, c, 0.5f, p.reply);
        ck_assert_int_eq(
            ss__codec_member_easgd_reply(&p.member, p.reply, ss__codec_size(SS_ENC_INT8, N), d),
            SS_OK);
        for (int i = 0; i < N; i++)
            x[i] -= d[i];
        assert_mirrors_equal(&p);
        if (round == 1) /* the trainer moved its replica away */
            for (int i = 0; i < N; i++)
                x[i] += 0.05f;
    }
    double sum = 0, gap = 0;
    for (int i = 0; i < N; i++) {
        sum += (double)x[i] + c[i];
        gap = fmax(gap, fabs((double)x[i] - c[i]));
    }
    /* x + c moved only by the trainer's own +0.05 per element. */
    ck_assert_msg(fabs(sum - sum0 - 0.05 * N) < 1e-3, "x + c drifted by %g", sum - sum0 - 0.05 * N);
    ck_assert_msg(gap < 1e-4, "x and c still %g apart", gap);
    pair_free(&p);
}
END_TEST

START_TEST(test_out_of_step_mirror_is_refused_then_reset) {
    enum { N = 8 };
    float s[N] = {1, 2, 3, 4, 5, 6, 7, 8}, out[N];
    pair p;
    pair_init(&p, SS_ENC_FP16, N);
    ss__codec_upload up;
    /* A server that never saw a reset refuses a delta upload. */
    p.member.valid = true;
    ss__codec_member_upload(&p.member, s, p.up, &up);
    ck_assert(!up.reset);
    ck_assert_int_eq(ss__codec_server_accept(&p.server, &up), SS_ERR_STATE);
    /* The member starts over. */
    start_over(&p, s, &up, out);
    /* The next exchange is served but its reply never arrives, and the
     * request is sent again: the server counted the first, so the copy
     * carries an old count and is refused (a mirror must not take the
     * same delta twice). */
    s[0] += 1.0f;
    ss__codec_member_upload(&p.member, s, p.up, &up);
    ck_assert(!up.reset);
    ck_assert_int_eq(ss__codec_server_accept(&p.server, &up), SS_OK);
    ss__codec_server_round_reply(&p.server, s, p.reply);
    ck_assert_int_eq(ss__codec_server_accept(&p.server, &up), SS_ERR_STATE);
    start_over(&p, s, &up, out);
    /* Another encoding than the mirror's, and a bad payload. */
    up.enc = SS_ENC_INT8;
    ck_assert_int_eq(ss__codec_server_accept(&p.server, &up), SS_ERR_INVALID_ARGUMENT);
    ss__codec_member_upload(&p.member, s, p.up, &up);
    up.len--;
    ck_assert_int_eq(ss__codec_server_accept(&p.server, &up), SS_ERR_INVALID_ARGUMENT);
    /* A reply that does not decode invalidates the member's mirror. */
    memset(p.reply, 0xFF, 2 * N);
    ck_assert_int_eq(ss__codec_member_round_reply(&p.member, p.reply, 2 * N, out),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert(!p.member.valid);
    pair_free(&p);
}
END_TEST

SS_CHECK_MAIN("codec", 0, NULL, NULL, test_sizes_and_names, test_fp16_bits, test_bf16_bits,
              test_int8_blocks, test_int8_extreme_ranges, test_decode_refuses_bad_payloads,
              test_error_feedback_converges, test_easgd_conserves_and_converges,
              test_out_of_step_mirror_is_refused_then_reset)
