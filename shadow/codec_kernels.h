/* The encoding side of shadow/codec.c as loops GCC vectorizes: these
 * run over every float of every upload and reply, and a scalar loop per
 * float made an int8 encode 16x slower than memcpy. Private to codec.c.
 * Inputs are finite (the codec's callers check), which is what lets
 * codec_kernels.c be built with -ffinite-math-only: the decoders, which
 * must check what the network sends, stay in codec.c without it. */
#ifndef SS_SHADOW_CODEC_KERNELS_H
#define SS_SHADOW_CODEC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* *lo, *hi = min and max of x[0..n), n >= 1. */
void ss__codec_minmax(const float *x, size_t n, float *lo, float *hi);
/* q[i] = nearest of 0..255 to (x[i] - lo) * inv (inv = 255 / (hi - lo),
 * or 0 for a constant block). */
void ss__codec_quantize_u8(const float *x, size_t n, float lo, float inv, uint8_t *q);
/* IEEE binary16 bits of x[i], round to nearest even, saturating at
 * +-65504, into out[2i..2i+1] (any alignment; the host is little-endian,
 * so these are the wire's bytes). */
void ss__codec_to_f16(const float *x, size_t n, uint8_t *out);
/* bfloat16 bits of x[i] (the top half, round to nearest even),
 * saturating at bf16's largest finite value; out as ss__codec_to_f16. */
void ss__codec_to_bf16(const float *x, size_t n, uint8_t *out);

#endif
