/* Admission of new embedding ids (a bounded table's "feature filter"): an
 * id not stored anywhere gets a row only on its K-th push. Pushes of ids
 * are counted in a count-min sketch (4 rows of 2^18 16-bit counters, 2 MiB
 * a table, whatever the number of ids), so the memory spent on ids that
 * never come back is bounded. Like TinyLFU, all counts are halved once
 * the sketch has taken 8 increments per counter: an id must come back K
 * times within a recent span, not K times ever. A count-min sketch never
 * undercounts, so an id is admitted no later than its K-th push (earlier
 * only when its counters collide with busier ids'). Thread-safe. */
#ifndef SS_EMB_ADMISSION_INTERNAL_H
#define SS_EMB_ADMISSION_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shadowsync/status.h"

typedef struct ss__emb_admission ss__emb_admission;

/* k: pushes an id needs (2..65535; 1 admits everything: no sketch). */
ss_status ss__emb_admission_create(uint32_t k, ss__emb_admission **out, char *why, size_t whylen);
void ss__emb_admission_destroy(ss__emb_admission *a);

/* Counts one push of id; true when that makes its count reach k. */
bool ss__emb_admission_count(ss__emb_admission *a, uint64_t table_id, uint64_t id);

#endif
