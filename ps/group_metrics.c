/* The centre's per-group counts on the PS's /metrics (group_metrics.h). */
#include "ps/group_metrics.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "common/strbuf.h"

struct ss__ps_group_metrics {
    ss__metrics *m;
    ss__central *c;
    size_t max_groups;
    pthread_mutex_t lock; /* one refresh at a time */
    char **held;          /* the groups whose series are out (each held in m) */
    size_t nheld, capheld;
};

ss_status ss__ps_group_metrics_create(ss__metrics *m, ss__central *c, size_t max_groups,
                                      ss__ps_group_metrics **out, char *why, size_t whylen) {
    if (!m || !c || !max_groups || !out)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                        "group metrics need a registry, a centre and a group count");
    ss__ps_group_metrics *gm = calloc(1, sizeof *gm);
    if (!gm)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the group metrics");
    *gm = (ss__ps_group_metrics){.m = m, .c = c, .max_groups = max_groups};
    pthread_mutex_init(&gm->lock, NULL);
    *out = gm;
    return SS_OK;
}

void ss__ps_group_metrics_destroy(ss__ps_group_metrics *gm) {
    if (!gm)
        return;
    for (size_t i = 0; i < gm->nheld; i++)
        free(gm->held[i]);
    free(gm->held);
    pthread_mutex_destroy(&gm->lock);
    free(gm);
}

/* A counter that mirrors a count kept elsewhere: raised to total. */
static void mirror(ss__counter *c, uint64_t total) {
    uint64_t seen = ss__counter_value(c);
    if (total > seen)
        ss__counter_add(c, total - seen);
}

/* Joins refused by --max-groups, --max-members, --max-total-floats, per
 * limit (every limit's series exists from the start, at 0). */
static void mirror_limit_refusals(ss__ps_group_metrics *gm) {
    uint64_t n[SS_CENTRAL_LIMITS];
    ss__central_refusals(gm->c, n);
    for (int i = 0; i < SS_CENTRAL_LIMITS; i++) {
        const char *labels[] = {"limit", ss__central_limit_names[i], NULL};
        ss__counter *c;
        if (ss__metrics_counter(gm->m, "shadowsync_ps_limit_refusals_total",
                                "Dense Joins refused by a PS limit, by limit.", labels,
                                &c) == SS_OK)
            mirror(c, n[i]);
    }
}

static bool listed(const ss__central_group_info *info, size_t k, const char *name) {
    for (size_t i = 0; i < k; i++)
        if (!strcmp(info[i].name, name))
            return true;
    return false;
}

/* The series of the groups in info are held; when info is the whole list
 * (complete), those of the others, gone from the centre, are removed
 * (ss__metrics_drop). */
static void hold_listed(ss__ps_group_metrics *gm, const ss__central_group_info *info, size_t k,
                        bool complete) {
    size_t kept = 0;
    for (size_t j = 0; j < gm->nheld; j++) {
        if (!complete || listed(info, k, gm->held[j])) {
            gm->held[kept++] = gm->held[j];
        } else {
            ss__metrics_drop(gm->m, "group", gm->held[j]);
            free(gm->held[j]);
        }
    }
    gm->nheld = kept;
    for (size_t i = 0; i < k; i++) {
        bool held = false;
        for (size_t j = 0; j < gm->nheld && !held; j++)
            held = !strcmp(gm->held[j], info[i].name);
        if (held)
            continue;
        if (!SS_GROW(gm->held, gm->capheld, gm->nheld, 16))
            return; /* not held: its series stay when it goes */
        char *name = strdup(info[i].name);
        if (name && ss__metrics_hold(gm->m, "group", name) == SS_OK)
            gm->held[gm->nheld++] = name;
        else
            free(name);
    }
}

void ss__ps_group_metrics_refresh(ss__ps_group_metrics *gm) {
    ss__central_group_info *info = calloc(gm->max_groups, sizeof *info);
    size_t k = 0;
    if (!info)
        return;
    const bool complete = ss__central_describe(gm->c, info, gm->max_groups, &k) == SS_OK;
    pthread_mutex_lock(&gm->lock);
    uint64_t floats = 0;
    for (size_t i = 0; i < k; i++)
        floats += info[i].n;
    ss__gauge *held;
    if (ss__metrics_gauge(gm->m, "shadowsync_ps_dense_floats",
                          "Floats of the dense groups (chunks) this PS holds; a re-cut's retired "
                          "chunks are not counted.",
                          NULL, &held) == SS_OK)
        ss__gauge_set(held, (double)floats);
    hold_listed(gm, info, k, complete);
    for (size_t i = 0; i < k; i++) {
        const char *labels[] = {"group", info[i].name, NULL};
        ss__counter *rounds;
        ss__gauge *members;
        if (ss__metrics_counter(gm->m, "shadowsync_ps_rounds_total",
                                "S-EASGD exchanges and closed MA/BMUF rounds served, per group.",
                                labels, &rounds) != SS_OK ||
            ss__metrics_gauge(gm->m, "shadowsync_ps_members",
                              "Trainers (or agents) registered per group.", labels,
                              &members) != SS_OK)
            continue;
        mirror(rounds, info[i].exchanges + info[i].rounds);
        ss__gauge_set(members, info[i].members);
    }
    mirror_limit_refusals(gm);
    pthread_mutex_unlock(&gm->lock);
    free(info);
}
