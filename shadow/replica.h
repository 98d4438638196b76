/* A replica: one trainer's copy of a dense parameter group (a float32
 * region) plus an atomic iteration counter that workers tick per step.
 * Workers write the region lock-free; the shadow pool reads and updates
 * it only through the ss__kernel_live_* kernels. */
#ifndef SHADOWSYNC_REPLICA_H
#define SHADOWSYNC_REPLICA_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "shadowsync/status.h"

typedef struct ss__replica ss__replica;

/* Allocates n zeroed floats, 64-byte aligned. */
ss_status ss__replica_create(size_t n, ss__replica **out);
/* Wraps caller-owned memory (e.g. a shared mapping); destroy leaves it alone. */
ss_status ss__replica_wrap(float *data, size_t n, ss__replica **out);
/* Like ss__replica_wrap, with the iteration counter at `iterations` too
 * (NULL: a private one): both may live in a mapping shared with another
 * process, which ticks the counter. */
ss_status ss__replica_wrap_shared(float *data, size_t n, _Atomic uint64_t *iterations,
                                  ss__replica **out);
void ss__replica_destroy(ss__replica *r);

float *ss__replica_data(ss__replica *r);
size_t ss__replica_size(const ss__replica *r);

/* Adds n trainer iterations (called by workers after each step). */
void ss__replica_tick(ss__replica *r, uint64_t n);
uint64_t ss__replica_iterations(const ss__replica *r);

#endif
