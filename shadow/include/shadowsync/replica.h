/* A replica: one trainer's copy of a dense parameter group (a float32
 * region) plus an atomic iteration counter that workers tick per step.
 * Workers write the region lock-free; the shadow pool reads and updates
 * it only through the ss_kernel_live_* kernels. */
#ifndef SHADOWSYNC_REPLICA_H
#define SHADOWSYNC_REPLICA_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "shadowsync/status.h"

typedef struct ss_replica ss_replica;

/* Allocates n zeroed floats, 64-byte aligned. */
ss_status ss_replica_create(size_t n, ss_replica **out);
/* Wraps caller-owned memory (e.g. a shared mapping); destroy leaves it alone. */
ss_status ss_replica_wrap(float *data, size_t n, ss_replica **out);
/* Like ss_replica_wrap, with the iteration counter at `iterations` too
 * (NULL: a private one): both may live in a mapping shared with another
 * process, which ticks the counter. */
ss_status ss_replica_wrap_shared(float *data, size_t n, _Atomic uint64_t *iterations,
                                 ss_replica **out);
void ss_replica_destroy(ss_replica *r);

float *ss_replica_data(ss_replica *r);
size_t ss_replica_size(const ss_replica *r);

/* Adds n trainer iterations (called by workers after each step). */
void ss_replica_tick(ss_replica *r, uint64_t n);
uint64_t ss_replica_iterations(const ss_replica *r);

#endif
