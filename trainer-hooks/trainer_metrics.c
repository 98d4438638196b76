/* A trainer's metrics (ss_trainer_metrics) and, when its http_listen setting
 * names an address, its own HTTP endpoint: /metrics (the same series, by
 * the same names, as an agent's trainers), /status (JSON: the groups'
 * rounds and sync gap) and /healthz, so that a trainer without an agent
 * (PyTorch in one process) is scraped and alerted on like the others. */
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/flags.h"
#include "common/json.h"
#include "common/log.h"
#include "common/names.h"
#include "common/strbuf.h"
#include "rpc/http/http.h"
#include "trainer-hooks/errors_internal.h"
#include "trainer-hooks/trainer_internal.h"

ss_status ss__trainer_metrics_create(ss_trainer *t, char *why, size_t whylen) {
    const char *labels[] = {"trainer", t->name, NULL};
    ss_status st = ss__metrics_create(&t->metrics, why, whylen);
    if (st == SS_OK)
        st = ss__metrics_build_info(t->metrics);
    if (st == SS_OK)
        st = ss__metrics_counter(t->metrics, "shadowsync_trainer_steps_total",
                                 "ss_trainer_step() calls of this trainer", labels,
                                 &t->steps_metric);
    return st;
}

static void refresh_metrics(void *ctx) {
    ss_trainer *t = ctx;
    uint64_t steps = atomic_load(&t->steps), seen = ss__counter_value(t->steps_metric);
    if (steps > seen)
        ss__counter_add(t->steps_metric, steps - seen);
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->nattached; i++)
        if (t->attached[i].export_metrics)
            t->attached[i].export_metrics(t->attached[i].obj, t->metrics, t->name);
    pthread_mutex_unlock(&t->lock);
}

static ss_status render(ss_trainer *t, char **text, size_t *len) {
    pthread_mutex_lock(&t->render_lock);
    refresh_metrics(t);
    ss_status st = ss__metrics_render(t->metrics, text, len);
    pthread_mutex_unlock(&t->render_lock);
    return st;
}

ss_status ss_trainer_metrics(ss_trainer *t, char *buf, size_t cap, size_t *len) {
    ss__err_begin();
    if (!t || (!buf && cap))
        return ss__err_end(ss__err_set(SS_ERR_INVALID_ARGUMENT, "trainer or buf: NULL"));
    char *text;
    size_t n;
    ss_status st = render(t, &text, &n);
    if (st != SS_OK)
        return ss__err_end(st);
    if (len)
        *len = n;
    if (n + 1 > cap) {
        st = ss__err_set(SS_ERR_TOO_LARGE, "buf: %zu bytes, the metrics need %zu", cap, n + 1);
        if (cap)
            buf[0] = '\0';
    } else {
        memcpy(buf, text, n + 1);
    }
    free(text);
    return ss__err_end(st);
}

/* One group as /status tells it. */
static json_object *group_json(ss_dense *g, bool detail) {
    ss_dense_stats s = {0};
    ss_dense_get_stats(g, &s);
    json_object *o = json_object_new_object();
    if (detail) /* names and sizes: the token's holders */
        json_object_object_add(o, "group", json_object_new_string(g->name));
    if (detail)
        json_object_object_add(o, "floats", json_object_new_uint64(ss_dense_size(g)));
    json_object_object_add(o, "syncing", json_object_new_boolean(g->group != NULL));
    json_object_object_add(o, "iterations", json_object_new_uint64(s.iterations));
    json_object_object_add(o, "rounds", json_object_new_uint64(s.rounds));
    json_object_object_add(o, "failed_rounds", json_object_new_uint64(s.failed_rounds));
    json_object_object_add(o, "sync_gap_mean", json_object_new_double(s.gap_mean));
    json_object_object_add(o, "sync_gap_p99", json_object_new_uint64(s.gap_p99));
    json_object_object_add(o, "divergence", json_object_new_double(s.divergence));
    return o;
}

static ss_status status_json(void *ctx, bool detail, char **out, size_t *len) {
    ss_trainer *t = ctx;
    json_object *root = json_object_new_object();
    json_object_object_add(root, "role", json_object_new_string("trainer"));
    json_object_object_add(root, "version", json_object_new_string(ss__version()));
    if (detail)
        json_object_object_add(root, "trainer", json_object_new_string(t->name));
    json_object_object_add(root, "uptime_seconds",
                           json_object_new_double((double)(ss__now_ns() - t->start_ns) / 1e9));
    json_object_object_add(root, "steps", json_object_new_uint64(atomic_load(&t->steps)));
    json_object *groups = json_object_new_array();
    size_t k = atomic_load(&t->ngroups);
    for (size_t i = 0; i < k; i++)
        json_object_array_add(groups, group_json(t->groups[i], detail));
    json_object_object_add(root, "group_count", json_object_new_uint64(k));
    json_object_object_add(root, "groups", groups);
    return ss__json_take(root, out, len);
}

static void before_metrics(void *ctx) {
    ss_trainer *t = ctx;
    pthread_mutex_lock(&t->render_lock);
    refresh_metrics(t);
    pthread_mutex_unlock(&t->render_lock);
}

ss_status ss__trainer_http_start(ss_trainer *t, char *why, size_t whylen) {
    t->start_ns = ss__now_ns();
    if (!t->cfg.http_listen || !*t->cfg.http_listen)
        return SS_OK;
    const ss__http_config hcfg = {.bind = t->cfg.http_listen,
                                  .metrics = t->metrics,
                                  .status_json = status_json,
                                  .before_metrics = before_metrics,
                                  .ctx = t};
    char reason[300] = "";
    ss_status st = ss__http_server_start(&hcfg, &t->http, reason, sizeof reason);
    if (st != SS_OK) {
        ss__why(why, whylen, "http_listen=%s: cannot serve /metrics there (%s)", t->cfg.http_listen,
                reason);
        return ss__err_set(st, "http_listen=%s: cannot serve /metrics there (%s)",
                           t->cfg.http_listen, reason);
    }
    char at[300];
    ss__http_server_address(t->http, at, sizeof at);
    ss__log(SS_LOG_INFO, "trainer", "event=http trainer=%s address=%s", t->name, at);
    return SS_OK;
}

void ss__trainer_http_stop(ss_trainer *t) {
    ss__http_server_stop(t->http);
    t->http = NULL;
}

ss_status ss_trainer_http_address(ss_trainer *t, char *buf, size_t cap) {
    ss__err_begin();
    if (!t || !buf || !cap)
        return ss__err_end(ss__err_set(SS_ERR_INVALID_ARGUMENT, "trainer or buf: NULL"));
    if (!t->http)
        return ss__err_end(ss__err_set(SS_ERR_STATE, "this trainer serves no HTTP (its "
                                                     "http_listen setting is unset)"));
    ss__http_server_address(t->http, buf, cap);
    return ss__err_end(SS_OK);
}
