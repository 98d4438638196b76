/* An array that grows as items are appended (grow.h). */
#include "common/grow.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

bool ss__grow(void *items, size_t *cap, size_t n, size_t size, size_t first) {
    if (n < *cap)
        return true;
    if (first == 0)
        first = 1;
    if (size == 0 || *cap > SIZE_MAX / 2 / size || first > SIZE_MAX / size)
        return false;
    const size_t ncap = *cap ? 2 * *cap : first;
    void *old, *grown;
    /* Through memcpy: items is a T **, which a void ** may not alias. */
    memcpy(&old, items, sizeof old);
    if (!(grown = realloc(old, ncap * size)))
        return false;
    memcpy(items, &grown, sizeof grown);
    *cap = ncap;
    return true;
}
