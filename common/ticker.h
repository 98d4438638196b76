/* A thread that calls a function every period until stopped: the
 * daemons' background chores (publishing deltas, following them). */
#ifndef SS_COMMON_TICKER_H
#define SS_COMMON_TICKER_H

#include <stddef.h>
#include <stdint.h>

#include "shadowsync/status.h"

typedef struct ss__ticker ss__ticker;

/* tick(ctx) runs every period_ns (the first one period_ns from now), in
 * the ticker's thread. SS_ERR_NO_MEMORY: no thread. */
ss_status ss__ticker_start(uint64_t period_ns, void (*tick)(void *ctx), void *ctx, ss__ticker **out,
                           char *why, size_t whylen);
/* A ticker whose tick says how long to wait before the next one (0: 1 ns,
 * at once); its first tick runs first_ns from now. The row mover paces
 * itself this way: soon after a step that moved rows, later when idle. */
ss_status ss__ticker_start_paced(uint64_t first_ns, uint64_t (*tick)(void *ctx), void *ctx,
                                 ss__ticker **out, char *why, size_t whylen);
/* Stops it: a tick running now finishes first; no tick after. NULL: nothing. */
void ss__ticker_stop(ss__ticker *t);

#endif
