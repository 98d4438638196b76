/* Compressed sync's CPU cost: encode and decode speed of each encoding
 * (shadow/codec.h) and one member upload (difference from the mirror,
 * encode, decode back into the mirror), in input GB/s of float32, as a
 * ratio to memcpy of the same floats measured in the same run.
 *   shadowsync-bench-codec [--floats N] [--reps R] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/flags.h"
#include "shadow/codec.h"

static double gbps(size_t bytes, uint64_t ns) {
    return (double)bytes / (double)ns;
}

/* What --help and --version say. */
static const ss__program program = {
    "shadowsync-bench-codec",
    "Compressed sync's CPU cost: encode and decode speed of each encoding and of one\n"
    "member upload (difference from the mirror, encode, decode into the mirror), in GB/s\n"
    "of float32 input, each as a ratio to memcpy of the same floats in the same run."};

int main(int argc, char **argv) {
    int64_t floats = 1 << 22, reps = 20;
    ss__flag flags[] = {
        {"floats", SS_FLAG_INT, &floats, "floats per array", NULL, 1, 1 << 28},
        {"reps", SS_FLAG_INT, &reps, "timed repetitions (the best is kept)", NULL, 1, 1e6},
    };
    int exit_code = ss__flags_cli(&program, flags, sizeof flags / sizeof *flags, argc, argv);
    if (exit_code >= 0)
        return exit_code;
    const size_t n = (size_t)floats;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    uint8_t *buf = malloc(n * sizeof(float));
    if (!x || !y || !buf)
        return 1;
    for (size_t i = 0; i < n; i++)
        x[i] = 0.01f * sinf((float)i);
    const size_t bytes = n * sizeof(float);
    uint64_t best = UINT64_MAX;
    for (int64_t r = 0; r < reps; r++) {
        uint64_t t0 = ss__now_ns();
        memcpy(y, x, bytes);
        uint64_t t = ss__now_ns() - t0;
        best = t < best ? t : best;
    }
    double base = gbps(bytes, best);
    printf("codec: %zu floats, best of %lld; memcpy %.2f GB/s\n", n, (long long)reps, base);
    printf("%-6s %12s %10s %12s %10s %12s %10s\n", "enc", "encode_GB/s", "÷memcpy", "decode_GB/s",
           "÷memcpy", "upload_GB/s", "÷memcpy");
    for (ss__encoding e = SS_ENC_F32; e < SS_ENC_COUNT; e++) {
        uint64_t be = UINT64_MAX, bd = UINT64_MAX, bu = UINT64_MAX;
        ss__codec_mirror cm;
        if (ss__codec_mirror_init(&cm, e, n) != SS_OK)
            return 1;
        ss__codec_upload up;
        ss__codec_member_upload(&cm, x, buf, &up); /* the reset */
        cm.valid = true;
        for (int64_t r = 0; r < reps; r++) {
            uint64_t t0 = ss__now_ns();
            ss__codec_encode(e, x, n, buf);
            uint64_t t1 = ss__now_ns();
            if (ss__codec_decode(e, buf, ss__codec_size(e, n), n, y) != SS_OK)
                return 1;
            uint64_t t2 = ss__now_ns();
            for (size_t i = 0; i < n; i += 97)
                x[i] += 1e-4f; /* the replica moves */
            ss__codec_member_upload(&cm, x, buf, &up);
            uint64_t t3 = ss__now_ns();
            be = t1 - t0 < be ? t1 - t0 : be;
            bd = t2 - t1 < bd ? t2 - t1 : bd;
            bu = t3 - t2 < bu ? t3 - t2 : bu;
        }
        printf("%-6s %12.2f %10.3f %12.2f %10.3f %12.2f %10.3f\n", ss__encoding_name(e),
               gbps(bytes, be), gbps(bytes, be) / base, gbps(bytes, bd), gbps(bytes, bd) / base,
               gbps(bytes, bu), gbps(bytes, bu) / base);
        ss__codec_mirror_free(&cm);
    }
    free(x);
    free(y);
    free(buf);
    return 0;
}
