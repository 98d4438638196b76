/* Metrics registry: counters, gauges and histograms, rendered in the
 * Prometheus text exposition format 0.0.4.
 *
 * Registration takes a lock; updates are lock-free atomics so hot paths
 * (shadow rounds, trainer steps) can record without contention. A metric
 * is a (name, labels) series inside a family that shares HELP and TYPE. */
#ifndef SHADOWSYNC_METRICS_H
#define SHADOWSYNC_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "shadowsync/status.h"

typedef struct ss_metrics ss_metrics;
typedef struct ss_counter ss_counter;
typedef struct ss_gauge ss_gauge;
typedef struct ss_histogram ss_histogram;

ss_status ss_metrics_create(ss_metrics **out);
void ss_metrics_destroy(ss_metrics *reg);

/* labels: NULL, or a NULL-terminated list of key, value, key, value, ...
 * Registering the same name and labels twice returns the same series;
 * the same name with another type or help is SS_ERR_EXISTS. */
ss_status ss_metrics_counter(ss_metrics *reg, const char *name, const char *help,
                             const char *const *labels, ss_counter **out);
ss_status ss_metrics_gauge(ss_metrics *reg, const char *name, const char *help,
                           const char *const *labels, ss_gauge **out);
/* bounds: strictly increasing upper bounds; +Inf is implicit. */
ss_status ss_metrics_histogram(ss_metrics *reg, const char *name, const char *help,
                               const char *const *labels, const double *bounds, size_t nbounds,
                               ss_histogram **out);

void ss_counter_add(ss_counter *c, uint64_t v);
uint64_t ss_counter_value(const ss_counter *c);
void ss_gauge_set(ss_gauge *g, double v);
void ss_gauge_add(ss_gauge *g, double v);
double ss_gauge_value(const ss_gauge *g);
void ss_histogram_observe(ss_histogram *h, double v);
uint64_t ss_histogram_count(const ss_histogram *h);
double ss_histogram_sum(const ss_histogram *h);

/* Renders every family. *out is malloc'd, NUL-terminated; caller frees. */
ss_status ss_metrics_render(ss_metrics *reg, char **out, size_t *len);

/* True if name matches [a-zA-Z_:][a-zA-Z0-9_:]*. */
int ss_metrics_name_valid(const char *name);

#endif
