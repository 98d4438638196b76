/* Vectorizable encoding loops (codec_kernels.h). Built with
 * -ffinite-math-only -fno-signed-zeros (shadow/CMakeLists.txt) so that the
 * min/max reductions vectorize: every input here is finite. Nothing in
 * this file checks for NaN or Inf; the decoders (codec.c) do. */
#include <string.h>

#include "shadow/codec_kernels.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the codec writes its 16-bit values in host order: a little-endian host is assumed"
#endif

static inline uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void ss__codec_minmax(const float *restrict x, size_t n, float *lo, float *hi) {
    float a = x[0], b = x[0];
    for (size_t i = 1; i < n; i++) {
        a = x[i] < a ? x[i] : a;
        b = x[i] > b ? x[i] : b;
    }
    *lo = a;
    *hi = b;
}

void ss__codec_quantize_u8(const float *restrict x, size_t n, float lo, float inv,
                           uint8_t *restrict q) {
    for (size_t i = 0; i < n; i++) {
        /* (x - lo) inv >= 0: adding 0.5 and truncating rounds to nearest
         * (ties up; any q the decoder reads back is as good). By halves,
         * as (x - lo) inv exactly (barring subnormals): x - lo itself
         * overflows when the block's range passes FLT_MAX, and inf times
         * a small inv would be inf, or NaN (whose conversion to int is
         * undefined) times 0. */
        float v = (x[i] * 0.5f - lo * 0.5f) * inv * 2.0f + 0.5f;
        v = v < 255.0f ? v : 255.0f;
        q[i] = (uint8_t)(int32_t)v;
    }
}

void ss__codec_to_f16(const float *restrict x, size_t n, uint8_t *restrict out) {
    /* After F. Giesen's float_to_half_fast3_rtne: subnormal halves through
     * a float add that rounds at the right bit, normal ones by rebiasing
     * the exponent and rounding the mantissa to nearest even. */
    const float magic = float_of((uint32_t)((127 - 15) + (23 - 10) + 1) << 23);
    for (size_t i = 0; i < n; i++) {
        float f = x[i];
        f = f > 65504.0f ? 65504.0f : f;
        f = f < -65504.0f ? -65504.0f : f;
        uint32_t u = bits_of(f);
        uint32_t sign = (u >> 16) & 0x8000u;
        u &= 0x7fffffffu;
        uint32_t sub = bits_of(float_of(u) + magic) - bits_of(magic);
        uint32_t nrm = (u + ((uint32_t)(15 - 127) << 23) + 0xfffu + ((u >> 13) & 1u)) >> 13;
        uint32_t is_sub = 0u - (uint32_t)(u < (113u << 23)); /* a mask: no branch */
        uint16_t h = (uint16_t)(sign | (sub & is_sub) | (nrm & ~is_sub));
        memcpy(out + 2 * i, &h, 2); /* any alignment */
    }
}

void ss__codec_to_bf16(const float *restrict x, size_t n, uint8_t *restrict out) {
    const float bf_max = float_of(0x7f7f0000u);
    for (size_t i = 0; i < n; i++) {
        float f = x[i];
        f = f > bf_max ? bf_max : f;
        f = f < -bf_max ? -bf_max : f;
        uint32_t u = bits_of(f);
        uint16_t b = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        memcpy(out + 2 * i, &b, 2);
    }
}
