/* Clocks: monotonic nanoseconds for durations and deadlines. */
#ifndef SHADOWSYNC_CLOCK_H
#define SHADOWSYNC_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Monotonic time in nanoseconds (CLOCK_MONOTONIC). */
uint64_t ss__now_ns(void);

/* Monotonic time in seconds as a double, for rates and logs. */
double ss__now_s(void);
/* Wall-clock time, milliseconds since the epoch (CLOCK_REALTIME): for
 * stamps other processes read (deltas) and row ages that outlive a
 * process; never for measuring durations (ss__now_ns). */
uint64_t ss__unix_ms(void);

/* A condition variable whose timed waits use CLOCK_MONOTONIC, so that a
 * step of the wall clock neither stalls nor hurries them. Every timed
 * wait of the project uses one, with a deadline from ss__deadline_in. */
void ss__cond_init_monotonic(pthread_cond_t *c);
/* CLOCK_MONOTONIC now + ns, for pthread_cond_timedwait on such a cond. */
struct timespec ss__deadline_in(uint64_t ns);

/* Sleep for the given number of nanoseconds (restarts on EINTR). */
void ss__sleep_ns(uint64_t ns);

#endif
