/* See finite.h. */
#include "common/finite.h"

#include <stdint.h>
#include <string.h>

int ss__all_finite(const float *restrict x, size_t n) {
    /* Bit test instead of isfinite(), and no early exit, so the loop
     * vectorizes: an exponent of all ones means Inf or NaN. */
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        bad |= ((bits & 0x7f800000u) == 0x7f800000u);
    }
    return bad == 0;
}
