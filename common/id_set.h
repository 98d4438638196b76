/* Ids seen within one call: an open-addressing set of at least 2n slots,
 * kept per thread between calls, its slots stamped with the call's number
 * so that nothing is cleared per call. Every row request's duplicate
 * check (the store) and a trainer's deduplication of its lookups use it:
 * allocating and clearing a set per call (a 64 KiB malloc and an 8 KiB
 * calloc for 4,096 ids) cost 5-10% of a lookup's time in the store, and
 * a sort was 8% of a shard's CPU on small batches. */
#ifndef SS_COMMON_ID_SET_H
#define SS_COMMON_ID_SET_H

#include <stddef.h>
#include <stdint.h>

#include "shadowsync/status.h"

/* An id that ids holds twice, found in O(n): 1 and *dup, 0 when every id
 * is distinct, -1 out of memory. */
int ss__ids_find_duplicate(const uint64_t *ids, size_t n, uint64_t *dup);

/* The distinct ids of ids[0 .. n) into uniq (room for n), in order of
 * first appearance, *m of them; map[i] (room for n): the index in uniq of
 * ids[i]. SS_ERR_NO_MEMORY when the set could not grow. */
ss_status ss__ids_unique(const uint64_t *ids, size_t n, uint64_t *uniq, size_t *map, size_t *m);

#endif
