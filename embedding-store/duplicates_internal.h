/* The duplicate-id check every row request gets (store.c's
 * check_request). Private to embedding-store/. */
#ifndef SS_EMB_DUPLICATES_INTERNAL_H
#define SS_EMB_DUPLICATES_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* An id that ids holds twice, found in O(n): 1 and *dup, 0 when every id
 * is distinct, -1 out of memory. */
int ss__emb_find_duplicate(const uint64_t *ids, size_t n, uint64_t *dup);

#endif
