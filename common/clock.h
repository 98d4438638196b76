/* Clocks: monotonic nanoseconds for durations and deadlines. */
#ifndef SHADOWSYNC_CLOCK_H
#define SHADOWSYNC_CLOCK_H

#include <stdint.h>

/* Monotonic time in nanoseconds (CLOCK_MONOTONIC). */
uint64_t ss__now_ns(void);

/* Monotonic time in seconds as a double, for rates and logs. */
double ss__now_s(void);

/* Sleep for the given number of nanoseconds (restarts on EINTR). */
void ss__sleep_ns(uint64_t ns);

#endif
