#include "common/malloc_tune.h"

#include <malloc.h>

void ss__malloc_keep_large_buffers(void) {
#ifdef M_MMAP_THRESHOLD
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}
