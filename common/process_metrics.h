/* The standard process_* series (Prometheus client libraries' names) of
 * the process itself, from /proc/self: CPU seconds, resident and virtual
 * memory, open descriptors, threads, start time. The HTTP endpoint of
 * every daemon calls it before each /metrics render. */
#ifndef SS_COMMON_PROCESS_METRICS_H
#define SS_COMMON_PROCESS_METRICS_H

#include "common/metrics.h"

/* Creates the series on first use, then sets them; silent when /proc is
 * not there. process_cpu_seconds_total is a counter of seconds, the rest
 * gauges. */
void ss__process_metrics_refresh(ss__metrics *m);

#endif
