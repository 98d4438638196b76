/* Compressed sync's decoder and a server-side mirror from raw bytes: the
 * first byte picks the encoding and whether the upload is a reset, the next
 * two the float count; the rest is the payload. Whatever the bytes, decode
 * either refuses them or writes n finite floats, and a mirror that took an
 * upload stays finite. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "shadow/codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3)
        return 0;
    ss__encoding enc = (ss__encoding)(data[0] & 3);
    bool reset = data[0] & 4;
    size_t n = 1 + ((size_t)data[1] | (size_t)data[2] << 8) % 2048;
    const uint8_t *payload = data + 3;
    size_t len = size - 3;
    float *out = malloc(n * sizeof *out);
    if (!out)
        abort();
    if (ss__codec_decode(enc, payload, len, n, out) == SS_OK)
        for (size_t i = 0; i < n; i++)
            if (!isfinite(out[i]))
                abort();
    free(out);
    if (enc == SS_ENC_F32)
        return 0;
    ss__codec_mirror cm;
    if (ss__codec_mirror_init(&cm, enc, n) != SS_OK)
        abort();
    /* Start the mirror at zeros, then take the input as the next upload. */
    cm.valid = true;
    ss__codec_upload up = {.enc = enc, .reset = reset, .seq = 0, .payload = payload, .len = len};
    if (ss__codec_server_accept(&cm, &up) == SS_OK) {
        uint8_t *reply = malloc(ss__codec_size(enc, n));
        if (!reply)
            abort();
        ss__codec_server_round_reply(&cm, cm.m, reply); /* r = the mirror: a zero delta */
        free(reply);
        for (size_t i = 0; i < n; i++)
            if (!isfinite(cm.m[i]))
                abort();
    }
    ss__codec_mirror_free(&cm);
    return 0;
}
