/* A replica: one trainer's copy of a dense parameter group (a float32
 * region) plus an atomic iteration counter that workers tick per step.
 * Workers write the region lock-free; the shadow pool reads and updates
 * it only through ss__replica_snapshot/add_scaled: the ss__kernel_live_*
 * kernels for host memory, the device group's stream and kernels for a
 * replica in GPU memory (shadow/device.h). */
#ifndef SHADOWSYNC_REPLICA_H
#define SHADOWSYNC_REPLICA_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "shadow/device.h"
#include "shadowsync/status.h"

typedef struct ss__replica ss__replica;

/* Allocates n zeroed floats, 64-byte aligned. */
ss_status ss__replica_create(size_t n, ss__replica **out, char *why, size_t whylen);
/* Wraps caller-owned memory (e.g. a shared mapping); destroy leaves it alone. */
ss_status ss__replica_wrap(float *data, size_t n, ss__replica **out);
/* Like ss__replica_wrap, with the iteration counter at `iterations` too
 * (NULL: a private one): both may live in a mapping shared with another
 * process, which ticks the counter. */
ss_status ss__replica_wrap_shared(float *data, size_t n, _Atomic uint64_t *iterations,
                                  ss__replica **out);
/* n zeroed floats on CUDA device `ordinal` (shadow/device.h), the
 * iteration counter at `iterations` (NULL: a private one, as for
 * ss__replica_wrap_shared); why says what failed (no device, which call). */
ss_status ss__replica_create_device(int ordinal, size_t n, _Atomic uint64_t *iterations,
                                    ss__replica **out, char *why, size_t whylen);
/* The agent's side of a trainer's device group: its memory opened from a
 * CUDA IPC handle, its counter in the shared header. */
ss_status ss__replica_open_device_ipc(int ordinal,
                                      const unsigned char handle[SS_DEVICE_IPC_HANDLE_BYTES],
                                      size_t n, _Atomic uint64_t *iterations, ss__replica **out,
                                      char *why, size_t whylen);
void ss__replica_destroy(ss__replica *r);

/* Host memory; NULL for a device replica. */
float *ss__replica_data(ss__replica *r);
/* The device group of a device replica; NULL for host memory. */
ss__device_group *ss__replica_device(ss__replica *r);
/* dst (n floats) = the live replica, as the shadow pool reads it. */
ss_status ss__replica_snapshot(ss__replica *r, float *dst);
/* live += scale * d (n host floats), keeping concurrent worker updates. */
ss_status ss__replica_add_scaled(ss__replica *r, const float *d, float scale);
/* The whole replica <- src (n host floats), before training. */
ss_status ss__replica_load(ss__replica *r, const float *src);
size_t ss__replica_size(const ss__replica *r);

/* Adds n trainer iterations (called by workers after each step). */
void ss__replica_tick(ss__replica *r, uint64_t n);
uint64_t ss__replica_iterations(const ss__replica *r);

#endif
