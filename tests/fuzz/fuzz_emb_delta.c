/* The embedding delta decoder (embedding-store/delta_file.c) a follower
 * runs on every delta it reads. The first byte's low bit says whether the
 * trailing checksum is checked: without it the fuzzer could rarely get
 * past the checksum into the record checks. What the parser accepts is
 * walked whole, every row read (ASan checks they are there). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "embedding-store/delta_file.h"

typedef struct sink {
    size_t row_floats;
    volatile float sum;
} sink;

static ss_status on_table(void *ctx, const ss__emb_spec *spec) {
    ((sink *)ctx)->row_floats = ss__emb_row_floats(spec);
    return SS_OK;
}

static ss_status on_rows(void *ctx, const uint64_t *ids, const float *rows, size_t n) {
    sink *s = ctx;
    for (size_t i = 0; i < n; i++) {
        s->sum += (float)(ids[i] & 1);
        if (rows)
            s->sum += rows[(i + 1) * s->row_floats - 1];
    }
    return SS_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    unsigned char *buf = malloc(size - 1 ? size - 1 : 1);
    if (!buf)
        return 0;
    memcpy(buf, data + 1, size - 1);
    ss__emb_delta_file *f = NULL;
    char why[128];
    if (ss__emb_delta_parse(buf, size - 1, data[0] & 1, &f, why, sizeof why) == SS_OK) {
        sink s = {0};
        const ss__emb_delta_visitor v = {on_table, on_rows, &s};
        ss__emb_delta_walk(f, &v);
        ss__emb_delta_close(f);
    }
    return 0;
}
