/* Compressed sync: how bulk floats are encoded on the wire, and the mirrors
 * that make compression of parameters (not gradients) work.
 *
 * Encodings: float32 (raw, little-endian), fp16 (IEEE half), bf16 (the top
 * half of a float32, rounded to nearest even) and int8 (BAGUA's ByteGrad
 * idea: min-max quantization by blocks of SS_CODEC_INT8_BLOCK floats; each
 * block is its min and max as float32, then one byte per float; stochastic
 * rounding is not used, so encoding is deterministic).
 *
 * Quantizing a replica itself would lose the small differences that sync
 * is about (8 bits over a block's range of weights is coarse). So a member
 * and the other side each keep a mirror: the other side's copy of the
 * member's replica, identical on both because both build it from the same
 * decoded bytes with the same arithmetic. An upload sends q(s - mirror) and
 * both add its decoding to the mirror: whatever the quantization lost stays
 * in s - mirror and goes out with the next upload (error feedback, with the
 * residual kept implicitly, per replica). Replies are encoded too:
 *   S-EASGD: q(d), d = alpha (mirror - c); the server moves c by the
 *            decoded d and both move the mirror by minus it, so the
 *            member's x + c is conserved exactly as with float32.
 *   S-MA/BMUF: q(r - mirror), r the round's result; both set the mirror to
 *            mirror + decoded, which is what the member takes as r.
 * A mirror is valid while both sides have seen the same exchanges: the
 * member counts them (seq) and sends the count; any failure, a rejoin or a
 * count that disagrees makes the member start over with a reset upload (its
 * snapshot in float32). */
#ifndef SS_SHADOW_CODEC_H
#define SS_SHADOW_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shadowsync/status.h"

typedef enum ss__encoding {
    SS_ENC_F32 = 0,
    SS_ENC_FP16 = 1,
    SS_ENC_BF16 = 2,
    SS_ENC_INT8 = 3,
} ss__encoding;
#define SS_ENC_COUNT 4

#define SS_CODEC_INT8_BLOCK 256

/* "f32", "fp16", "bf16", "int8"; NULL for an unknown value. */
const char *ss__encoding_name(ss__encoding e);
/* Parses a name (also "float32", "none" for f32); false when unknown. */
bool ss__encoding_parse(const char *s, ss__encoding *out);

/* Bytes that n floats take in encoding e (0 for an unknown e). */
size_t ss__codec_size(ss__encoding e, size_t n);
/* Encodes n floats (finite) into out (ss__codec_size(e, n) bytes). */
void ss__codec_encode(ss__encoding e, const float *in, size_t n, uint8_t *out);
/* Decodes len bytes of n floats into out. SS_ERR_INVALID_ARGUMENT when
 * len is not ss__codec_size(e, n) or a value is not finite (NaN/Inf
 * halves, or an int8 block whose min or max is not finite or min > max):
 * a decoder fed by the network checks everything. */
ss_status ss__codec_decode(ss__encoding e, const uint8_t *in, size_t len, size_t n, float *out);

/* Encodes x (n finite floats) into out and rewrites x to the decoding of
 * out: what a receiver of out gets. ctx: a const ss__encoding *. false
 * (x zeroed, out the zeros' encoding) when out would not decode. (The
 * shape of an embedding store's ss__emb_delta_encoder.) */
bool ss__codec_round_trip(void *ctx, float *x, size_t n, uint8_t *out);

/* One side's mirror of one member's replica (of one chunk). */
typedef struct ss__codec_mirror {
    ss__encoding enc;
    size_t n;
    float *m;     /* the mirror */
    float *tmp;   /* n floats of scratch */
    uint64_t seq; /* exchanges completed on it */
    bool valid;   /* false: the next upload is a reset */
    /* An ablation, for benchmarks only (both sides must agree): forget the
     * mirror before each upload, so an upload is q(s) itself and what the
     * quantization lost is never sent again (no error feedback). */
    bool no_feedback;
} ss__codec_mirror;

/* What an upload carries besides its payload. */
typedef struct ss__codec_upload {
    ss__encoding enc;
    bool reset;   /* payload: the snapshot in float32; the mirror starts over */
    uint64_t seq; /* the member's count of completed exchanges */
    const uint8_t *payload;
    size_t len;
} ss__codec_upload;

ss_status ss__codec_mirror_init(ss__codec_mirror *cm, ss__encoding e, size_t n);
void ss__codec_mirror_free(ss__codec_mirror *cm);
/* Bytes of the largest upload: a reset's float32. */
size_t ss__codec_upload_max(const ss__codec_mirror *cm);

/* ---- the member's side ---- */

/* Encodes snapshot s into buf (ss__codec_upload_max bytes) and fills up;
 * the mirror moves as the other side's will. */
void ss__codec_member_upload(ss__codec_mirror *cm, const float *s, uint8_t *buf,
                             ss__codec_upload *up);
/* An S-EASGD reply: d = its decoding; the mirror moves by -d. */
ss_status ss__codec_member_easgd_reply(ss__codec_mirror *cm, const uint8_t *reply, size_t len,
                                       float *d);
/* An MA/BMUF reply: out = mirror + its decoding, which the mirror becomes. */
ss_status ss__codec_member_round_reply(ss__codec_mirror *cm, const uint8_t *reply, size_t len,
                                       float *out);
/* A call failed or its reply was lost: start over with a reset. */
void ss__codec_member_invalidate(ss__codec_mirror *cm);

/* ---- the aggregating side ---- */

/* Applies an upload to the member's mirror (which then holds what the
 * server takes as the member's snapshot). SS_ERR_STATE when the mirror is
 * out of step (no reset and the counts differ, or never reset), with
 * nothing changed; SS_ERR_INVALID_ARGUMENT for a bad payload. */
ss_status ss__codec_server_accept(ss__codec_mirror *cm, const ss__codec_upload *up);
/* S-EASGD on an accepted upload: d = alpha (mirror - c) encoded into
 * reply; c and the mirror move by the decoded d (+ and -). false when d,
 * c or the mirror would not be finite: nothing moved (reply unspecified). */
bool ss__codec_server_easgd(ss__codec_mirror *cm, float *c, float alpha, uint8_t *reply);
/* MA/BMUF: encodes r - mirror into reply; the mirror becomes its decoding
 * plus the mirror. */
void ss__codec_server_round_reply(ss__codec_mirror *cm, const float *r, uint8_t *reply);

#endif
