/* The PS's dense checkpoint parser (shadow/dense_checkpoint.c). The first
 * byte's low bit says whether the trailing hash is checked: without it the
 * fuzzer could rarely get past the hash into the layout checks. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shadow/dense_checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    uint8_t *buf = malloc(size - 1 ? size - 1 : 1);
    if (!buf)
        return 0;
    memcpy(buf, data + 1, size - 1);
    ss__dense_ckpt_file *f = NULL;
    if (ss__dense_ckpt_parse(buf, size - 1, data[0] & 1, &f) == SS_OK) {
        size_t n = ss__dense_ckpt_count(f);
        volatile float sink = 0;
        for (size_t i = 0; i < n; i++) {
            const ss__dense_ckpt_group *g = ss__dense_ckpt_group_at(f, i);
            float last;
            /* Every float the parser promises is there (ASan checks). */
            if (g->central && g->n) {
                memcpy(&last, (const char *)g->central + (g->n - 1) * sizeof last, sizeof last);
                sink += last;
            }
            if (g->mean && g->n) {
                memcpy(&last, (const char *)g->mean + (g->n - 1) * sizeof last, sizeof last);
                sink += last;
            }
            sink += (float)strlen(g->name);
        }
        (void)sink;
        ss__dense_ckpt_close(f);
    }
    return 0;
}
