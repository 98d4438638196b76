/* An array that grows as items are appended: the one place that doubles
 * a capacity and refuses one whose bytes would not fit in a size_t, so
 * that each list (a PS's members, a store's dirty queue, a registry's
 * series) does not compute it again. */
#ifndef SS_COMMON_GROW_H
#define SS_COMMON_GROW_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Makes room for one more item in the array at *(T **)items, which holds
 * *cap items of size bytes, n of them in use: true at once when n < *cap;
 * else the array is reallocated to twice *cap (first when it has none).
 * false when out of memory or past SIZE_MAX bytes: the array and *cap are
 * then as they were. Called through SS_GROW, which takes the sizes from
 * the array's type. */
bool ss__grow(void *items, size_t *cap, size_t n, size_t size, size_t first);

#define SS_GROW(array, cap, n, first) ss__grow(&(array), &(cap), (n), sizeof *(array), (first))

#ifdef __cplusplus
}
#endif

#endif
