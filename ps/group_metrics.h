/* The centre's per-group counts on the PS's /metrics: shadowsync_ps_*
 * series mirrored from ss__central_describe before every scrape. A group
 * the centre no longer holds (a re-cut's chunk retired once its last
 * member left, on a PS the shard map left) loses its series, rather than
 * showing its last members and rounds for ever. */
#ifndef SS_PS_GROUP_METRICS_H
#define SS_PS_GROUP_METRICS_H

#include <stddef.h>

#include "common/metrics.h"
#include "shadow/central.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ss__ps_group_metrics ss__ps_group_metrics;

/* Mirrors at most max_groups of c's groups into m. */
ss_status ss__ps_group_metrics_create(ss__metrics *m, ss__central *c, size_t max_groups,
                                      ss__ps_group_metrics **out, char *why, size_t whylen);
/* One refresh (one at a time: callers may race): shadowsync_ps_dense_floats,
 * shadowsync_ps_rounds_total{group}, shadowsync_ps_members{group} and
 * shadowsync_ps_limit_refusals_total{limit}. */
void ss__ps_group_metrics_refresh(ss__ps_group_metrics *gm);
void ss__ps_group_metrics_destroy(ss__ps_group_metrics *gm);

#ifdef __cplusplus
}
#endif

#endif
