/* The Criteo TSV line reader of the reference trainer. */
#include <stdint.h>

#include "tools/ctr/criteo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ss__ctr_example ex;
    char err[160];
    ss__criteo_parse_line((const char *)data, size, &ex, err, sizeof err);
    return 0;
}
