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

typedef struct ss__metrics ss__metrics;
typedef struct ss__counter ss__counter;
typedef struct ss__gauge ss__gauge;
typedef struct ss__histogram ss__histogram;

ss_status ss__metrics_create(ss__metrics **out, char *why, size_t whylen);
void ss__metrics_destroy(ss__metrics *reg);

/* labels: NULL, or a NULL-terminated list of key, value, key, value, ...
 * Registering the same name and labels twice returns the same series;
 * the same name with another type or help is SS_ERR_EXISTS. */
ss_status ss__metrics_counter(ss__metrics *reg, const char *name, const char *help,
                              const char *const *labels, ss__counter **out);
/* A counter of a non-integer total (CPU seconds): set to the total with
 * ss__gauge_set (it must only grow), rendered with the type counter. */
ss_status ss__metrics_float_counter(ss__metrics *reg, const char *name, const char *help,
                                    const char *const *labels, ss__gauge **out);
ss_status ss__metrics_gauge(ss__metrics *reg, const char *name, const char *help,
                            const char *const *labels, ss__gauge **out);
/* bounds: strictly increasing upper bounds; +Inf is implicit. */
ss_status ss__metrics_histogram(ss__metrics *reg, const char *name, const char *help,
                                const char *const *labels, const double *bounds, size_t nbounds,
                                ss__histogram **out);

/* Series that belong to someone who leaves (a trainer of the agent): each
 * owner of label key="value" holds it; when the last hold is dropped every
 * series carrying that label is removed (its pointers must no longer be
 * used: only the holders used them), so departed trainers leave no stale
 * series behind. */
ss_status ss__metrics_hold(ss__metrics *reg, const char *key, const char *value);
void ss__metrics_drop(ss__metrics *reg, const char *key, const char *value);

/* Adds n to the series of counter `name` whose one label is key=value,
 * creating it when new (n = 0 only creates it, so that rate() sees the
 * first event). A refusal of the registry is ignored: counting never
 * fails the caller's request. */
void ss__metrics_count(ss__metrics *reg, const char *name, const char *help, const char *key,
                       const char *value, uint64_t n);

void ss__counter_add(ss__counter *c, uint64_t v);
uint64_t ss__counter_value(const ss__counter *c);
void ss__gauge_set(ss__gauge *g, double v);
void ss__gauge_add(ss__gauge *g, double v);
double ss__gauge_value(const ss__gauge *g);
void ss__histogram_observe(ss__histogram *h, double v);
uint64_t ss__histogram_count(const ss__histogram *h);
double ss__histogram_sum(const ss__histogram *h);

/* shadowsync_build_info{version="X.Y.Z"} 1: which build serves. */
ss_status ss__metrics_build_info(ss__metrics *reg);

/* Renders every family. *out is malloc'd, NUL-terminated; caller frees. */
ss_status ss__metrics_render(ss__metrics *reg, char **out, size_t *len);

/* True if name matches [a-zA-Z_:][a-zA-Z0-9_:]*. */
int ss__metrics_name_valid(const char *name);

#endif
