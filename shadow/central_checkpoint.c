/* The dense centre's checkpoints (the file format:
 * shadow/dense_checkpoint.c) and its description for /status. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shadow/central_internal.h"
#include "shadow/dense_checkpoint.h"

/* A group's count of changes: what a delta compares. */
static uint64_t changes_of(const group *g) {
    return g->exchanges + g->rounds_done;
}

/* The groups to write as they are now (a group, once made, lives as long
 * as the transport): all, or for a delta those changed since the last
 * delta (each marked written as it is chosen). */
static group **choose_groups(ss__central *c, bool changed_only, uint32_t *count) {
    pthread_mutex_lock(&c->lock);
    uint32_t n = 0;
    for (group *g = c->groups; g; g = g->next)
        n++;
    group **chosen = malloc((n ? n : 1) * sizeof *chosen);
    uint32_t k = 0;
    for (group *g = c->groups; chosen && g; g = g->next) {
        pthread_mutex_lock(&g->lock);
        bool take = !changed_only || changes_of(g) != g->delta_changes;
        if (changed_only)
            g->delta_changes = changes_of(g);
        g->pins += take; /* its floats stay while it is written, even if retired */
        pthread_mutex_unlock(&g->lock);
        if (take)
            chosen[k++] = g;
    }
    pthread_mutex_unlock(&c->lock);
    *count = k;
    return chosen;
}

/* Each chosen group is written under its own lock only: a join of a new
 * group does not wait for the file. */
static ss_status save(ss__central *c, const char *path, bool changed_only, size_t *groups) {
    if (!c || !path || !*path || !groups)
        return SS_ERR_INVALID_ARGUMENT;
    uint32_t count;
    group **all = choose_groups(c, changed_only, &count);
    if (!all)
        return SS_ERR_NO_MEMORY;
    ss__dense_ckpt_writer *w;
    ss_status st = ss__dense_ckpt_begin(path, count, &w);
    if (st != SS_OK) {
        free(all);
        return st;
    }
    for (uint32_t i = 0; i < count; i++) {
        group *g = all[i];
        pthread_mutex_lock(&g->lock);
        bool has_mean = g->result_round != NO_ROUND, has_bmuf = g->bmuf_started;
        ss__dense_ckpt_put(w, &(ss__dense_ckpt_group){
                                  .name = g->name,
                                  .n = g->n,
                                  .central = g->central_init ? g->central : NULL,
                                  .mean = has_mean ? g->result : NULL,
                                  .mean_round = g->result_round,
                                  .bmuf_w = has_bmuf ? g->bmuf_w : NULL,
                                  .bmuf_m = has_bmuf ? g->bmuf_m : NULL,
                                  .bmuf_eta = g->bmuf.eta,
                                  .bmuf_zeta = g->bmuf.zeta,
                                  .bmuf_nesterov = g->bmuf.nesterov,
                              });
        pthread_mutex_unlock(&g->lock);
    }
    for (uint32_t i = 0; i < count; i++)
        ss__central_unpin(all[i]);
    free(all);
    st = ss__dense_ckpt_commit(w);
    *groups = st == SS_OK ? count : 0;
    return st;
}

ss_status ss__central_save(ss__central *c, const char *path, size_t *groups) {
    return save(c, path, false, groups);
}

ss_status ss__central_save_delta(ss__central *c, const char *path, bool base, size_t *groups) {
    if (base) {
        uint32_t count;
        free(choose_groups(c, true, &count)); /* every group marked written: a base has all */
    }
    return save(c, path, !base, groups);
}

/* Whether every group of a checked file fits the centre: an existing
 * group of the same size and rounds kind, each group once. centre->lock
 * held. */
static ss_status groups_fit(ss__central *centre, const ss__dense_ckpt_file *f) {
    const size_t count = ss__dense_ckpt_count(f);
    for (size_t i = 0; i < count; i++) {
        const ss__dense_ckpt_group *c = ss__dense_ckpt_group_at(f, i);
        group *g = ss__central_lookup(centre, c->name);
        if (g && g->n != c->n)
            return SS_ERR_SIZE_MISMATCH;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(ss__dense_ckpt_group_at(f, j)->name, c->name))
                return SS_ERR_PARSE; /* a group twice: not a file this code wrote */
        if (c->bmuf_w &&
            !ss__bmuf_params_valid(&(ss__bmuf_params){
                .eta = c->bmuf_eta, .zeta = c->bmuf_zeta, .nesterov = c->bmuf_nesterov}))
            return SS_ERR_PARSE;
        if (c->bmuf_w && g && g->rounds_kind == ROUNDS_MEAN)
            return SS_ERR_INVALID_ARGUMENT; /* rounds of a live group are already S-MA */
    }
    return SS_OK;
}

/* Every group of a checked file first gets its place, then its values: a
 * file that does not fit changes nothing. */
static ss_status restore_groups(ss__central *centre, const ss__dense_ckpt_file *f) {
    const size_t count = ss__dense_ckpt_count(f);
    ss_status st = groups_fit(centre, f);
    for (size_t i = 0; st == SS_OK && i < count; i++) {
        const ss__dense_ckpt_group *c = ss__dense_ckpt_group_at(f, i);
        group *g = ss__central_lookup(centre, c->name);
        if (!g) {
            if (!(g = ss__central_group_new(c->name, c->n)))
                return SS_ERR_NO_MEMORY;
            /* A restore is not refused by the limits, but counted in them. */
            atomic_fetch_add(&centre->used_floats, SS_CENTRAL_GROUP_FLOATS(c->n));
            ss__central_add_group(centre, g);
        }
        pthread_mutex_lock(&g->lock);
        if (c->central) {
            memcpy(g->central, c->central, c->n * sizeof(float));
            g->central_init = true;
        }
        if (c->mean) {
            memcpy(g->result, c->mean, c->n * sizeof(float));
            g->result_round = c->mean_round;
            g->open_round = c->mean_round + 1;
        }
        if (c->bmuf_w) {
            /* The block momentum goes on where it was: the same w and m,
             * the parameters the group's members must keep sending. */
            if (!g->bmuf_w) {
                if (!(g->bmuf_w = calloc(2 * g->n, sizeof(float)))) {
                    pthread_mutex_unlock(&g->lock);
                    return SS_ERR_NO_MEMORY;
                }
                atomic_fetch_add(&centre->used_floats, 2 * (uint64_t)g->n);
            }
            g->bmuf_m = g->bmuf_w + g->n;
            memcpy(g->bmuf_w, c->bmuf_w, c->n * sizeof(float));
            memcpy(g->bmuf_m, c->bmuf_m, c->n * sizeof(float));
            g->bmuf = (ss__bmuf_params){
                .eta = c->bmuf_eta, .zeta = c->bmuf_zeta, .nesterov = c->bmuf_nesterov};
            g->rounds_kind = ROUNDS_BMUF;
            g->bmuf_started = true;
        }
        pthread_mutex_unlock(&g->lock);
    }
    return st;
}

ss_status ss__central_check_file(ss__central *c, const ss__dense_ckpt_file *f) {
    if (!c || !f)
        return SS_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&c->lock);
    const ss_status st = groups_fit(c, f);
    pthread_mutex_unlock(&c->lock);
    return st;
}

ss_status ss__central_load_file(ss__central *c, const ss__dense_ckpt_file *f, size_t *groups) {
    if (!c || !f || !groups)
        return SS_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&c->lock);
    ss_status st = restore_groups(c, f);
    pthread_mutex_unlock(&c->lock);
    *groups = st == SS_OK ? ss__dense_ckpt_count(f) : 0;
    return st;
}

ss_status ss__central_load(ss__central *c, const char *path, size_t *groups) {
    if (!c || !path || !groups)
        return SS_ERR_INVALID_ARGUMENT;
    *groups = 0;
    ss__dense_ckpt_file *f;
    ss_status st = ss__dense_ckpt_read(path, &f);
    if (st != SS_OK)
        return st;
    st = ss__central_load_file(c, f, groups);
    ss__dense_ckpt_close(f);
    return st;
}

ss_status ss__central_describe(ss__central *c, ss__central_group_info *out, size_t max,
                               size_t *count) {
    if (!c || !count || (max && !out))
        return SS_ERR_INVALID_ARGUMENT;
    size_t k = 0, total = 0;
    pthread_mutex_lock(&c->lock);
    for (group *g = c->groups; g; g = g->next, total++) {
        if (k == max)
            continue;
        pthread_mutex_lock(&g->lock);
        ss__central_group_info *o = &out[k++];
        snprintf(o->name, sizeof o->name, "%s", g->name);
        o->n = g->n;
        o->members = (uint32_t)g->nmembers;
        o->contributors = g->contributors;
        o->exchanges = g->exchanges;
        o->rounds = g->rounds_done;
        o->last_done_ns = g->last_done_ns;
        pthread_mutex_unlock(&g->lock);
    }
    pthread_mutex_unlock(&c->lock);
    *count = k;
    return total > max ? SS_ERR_TOO_LARGE : SS_OK;
}
