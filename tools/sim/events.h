/* A small discrete-event engine for the cluster simulator: a clock, a
 * queue of timed callbacks, and processor-sharing pools.
 *
 * A pool is c servers shared equally by the jobs in it (egalitarian
 * processor sharing: each of n jobs gets min(1, c/n) of a server). It
 * stands for a machine's cores under a fair scheduler (c = cores, work in
 * CPU-seconds) and for a network link under fair TCP flows (c = 1, work in
 * seconds at the link's rate). Jobs finish in the order of their finish
 * tags in virtual time, so every arrival and departure is O(log n). */
#ifndef SS_SIM_EVENTS_H
#define SS_SIM_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ss_sim ss_sim;
typedef struct ss__sim_pool ss__sim_pool;
typedef void (*ss__sim_fn)(ss_sim *sim, void *arg);

/* NULL when out of memory. */
ss_sim *ss__sim_create(void);
void ss__sim_destroy(ss_sim *sim);

/* The clock, seconds since the start. */
double ss__sim_now(const ss_sim *sim);

/* Calls fn(sim, arg) after delay seconds (>= 0). Events at one time run in
 * the order they were scheduled. Returns 0, or -1 out of memory. */
int ss__sim_at(ss_sim *sim, double delay, ss__sim_fn fn, void *arg);

/* The same with a tag, which the callback reads with ss__sim_tag (e.g. the
 * round a deadline was set for, to see whether it still stands). */
int ss__sim_at_tagged(ss_sim *sim, double delay, ss__sim_fn fn, void *arg, uint64_t tag);
uint64_t ss__sim_tag(const ss_sim *sim);

/* Runs events until none is left or the clock would pass until. Returns
 * the number of events run. */
uint64_t ss__sim_run(ss_sim *sim, double until);

/* A pool of servers (> 0), destroyed with its simulator. NULL when out of
 * memory or servers <= 0. */
ss__sim_pool *ss__sim_pool_create(ss_sim *sim, double servers);

/* Adds a job of work (server-seconds, >= 0); fn(sim, arg) is called when
 * it is done. Returns 0, or -1 out of memory. */
int ss__sim_pool_submit(ss__sim_pool *p, double work, ss__sim_fn fn, void *arg);

/* Server-seconds of work done so far (for utilization), and jobs in it. */
double ss__sim_pool_busy(const ss__sim_pool *p);
size_t ss__sim_pool_jobs(const ss__sim_pool *p);

/* A gate: k slots taken first come, first served (a server's request
 * threads). acquire calls fn(sim, arg) once a slot is free (at once if one
 * is); release hands the slot to the next waiter. NULL / -1: out of
 * memory or slots == 0. */
typedef struct ss__sim_gate ss__sim_gate;
ss__sim_gate *ss__sim_gate_create(ss_sim *sim, uint32_t slots);
int ss__sim_gate_acquire(ss__sim_gate *g, ss__sim_fn fn, void *arg);
int ss__sim_gate_release(ss__sim_gate *g);

#ifdef __cplusplus
}
#endif

#endif
