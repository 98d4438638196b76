/* What the agent tells about itself: /status JSON and replica checkpoints. */
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent_internal.h"
#include "common/clock.h"
#include "common/fd_io.h"
#include "common/flags.h"
#include "common/json.h"
#include "common/private_files.h"

/* One group replica, as a JSON object (json-c escapes every string). */
static json_object *group_json(const agent_session *s, const agent_group *g, uint64_t now) {
    ss__group_stats st = {0};
    if (g->eg)
        ss__engine_group_stats(g->eg, &st);
    ss__shm_header *h = g->shm.hdr;
    double age = st.last_done_ns ? (double)(now - st.last_done_ns) / 1e9 : -1.0;
    json_object *o = json_object_new_object();
    json_object_object_add(o, "group", json_object_new_string(g->name));
    json_object_object_add(o, "trainer", json_object_new_string(s->trainer));
    json_object_object_add(o, "session", json_object_new_uint64(s->id));
    json_object_object_add(o, "algo", json_object_new_string(ss__algo_name(g->algo)));
    json_object_object_add(o, "floats", json_object_new_uint64(g->shm.n));
    json_object_object_add(o, "syncing", json_object_new_boolean(g->eg != NULL));
    json_object_object_add(o, "iterations", json_object_new_uint64(atomic_load(&h->iterations)));
    json_object_object_add(o, "rounds", json_object_new_uint64(atomic_load(&h->rounds)));
    json_object_object_add(o, "failed_rounds",
                           json_object_new_uint64(atomic_load(&h->failed_rounds)));
    json_object_object_add(o, "last_round_age_seconds", json_object_new_double(age));
    json_object_object_add(o, "last_round_seconds",
                           json_object_new_double((double)st.last_round_ns / 1e9));
    json_object_object_add(o, "sync_gap_mean",
                           json_object_new_double(ss__shm_load_double(&h->gap_mean_bits)));
    json_object_object_add(o, "sync_gap_p99", json_object_new_uint64(atomic_load(&h->gap_p99)));
    json_object_object_add(o, "divergence",
                           json_object_new_double(ss__shm_load_double(&h->divergence_bits)));
    return o;
}

static const char *session_state(const agent_session *s) {
    if (!s->hello)
        return "connecting";
    if (s->finished)
        return "finished";
    return atomic_load(&s->done) ? "leaving" : "training";
}

static json_object *session_json(const agent_session *s) {
    json_object *o = json_object_new_object();
    json_object_object_add(o, "session", json_object_new_uint64(s->id));
    json_object_object_add(o, "trainer", json_object_new_string(s->hello ? s->trainer : ""));
    json_object_object_add(o, "pid", json_object_new_int(s->peer_pid));
    json_object_object_add(o, "uid", json_object_new_int64(s->peer_uid));
    json_object_object_add(o, "state", json_object_new_string(session_state(s)));
    json_object_object_add(o, "groups", json_object_new_uint64(s->ngroups));
    return o;
}

ss_status ss__agent_status_json(ss__agent *a, bool detail, char **out, size_t *len) {
    if (!a || !out)
        return SS_ERR_INVALID_ARGUMENT;
    uint64_t now = ss__now_ns();
    json_object *root = json_object_new_object();
    json_object *members = json_object_new_array();
    json_object *groups = json_object_new_array();
    json_object_object_add(root, "role", json_object_new_string("agent"));
    json_object_object_add(root, "version", json_object_new_string(ss__version()));
    json_object_object_add(root, "socket", json_object_new_string(a->socket_path));
    json_object_object_add(root, "uptime_seconds",
                           json_object_new_double((double)(now - a->start_ns) / 1e9));
    json_object_object_add(root, "rounds_total", json_object_new_uint64(ss__agent_rounds(a)));
    pthread_mutex_lock(&a->lock);
    json_object *failure = NULL; /* the last group the PS shards could not take */
    if (a->join_failure_ns) {
        failure = json_object_new_object();
        if (detail) /* it names the group */
            json_object_object_add(failure, "message", json_object_new_string(a->join_failure));
        json_object_object_add(failure, "age_seconds",
                               json_object_new_double((double)(now - a->join_failure_ns) / 1e9));
    }
    json_object_object_add(root, "last_join_failure", failure);
    size_t nmembers = 0, ngroups = 0;
    for (agent_session *s = a->sessions; s; s = s->next, nmembers++) {
        pthread_mutex_lock(&s->lock);
        ngroups += s->ngroups;
        if (detail)
            json_object_array_add(members, session_json(s));
        for (size_t i = 0; detail && i < s->ngroups; i++)
            json_object_array_add(groups, group_json(s, &s->groups[i], now));
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&a->lock);
    json_object_object_add(root, "member_count", json_object_new_uint64(nmembers));
    json_object_object_add(root, "group_count", json_object_new_uint64(ngroups));
    if (detail) { /* trainers, uids, group names and sizes: the token's holders */
        json_object_object_add(root, "members", members);
        json_object_object_add(root, "groups", groups);
    } else {
        json_object_put(members);
        json_object_put(groups);
    }
    return ss__json_take(root, out, len);
}

/* dir/name.f32 via a temporary file, fsync, rename and a directory
 * fsync (without it the rename may not survive a power cut). */
static ss_status write_atomic(const char *dir, const char *name, const float *x, size_t n) {
    char path[4096], tmp[4200];
    if (snprintf(path, sizeof path, "%s/%s.f32", dir, name) >= (int)sizeof path)
        return SS_ERR_INVALID_ARGUMENT;
    int fd = ss__private_tmp_open(path, tmp, sizeof tmp); /* new, 0600, never a planted link */
    if (fd < 0)
        return SS_ERR_IO;
    ss_status st = ss__write_all(fd, x, n * sizeof *x) ? SS_OK : SS_ERR_IO;
    if (st == SS_OK && fsync(fd) != 0)
        st = SS_ERR_IO;
    close(fd);
    if (st == SS_OK && rename(tmp, path) != 0)
        st = SS_ERR_IO;
    if (st != SS_OK) {
        unlink(tmp);
        return st;
    }
    return ss__fsync_parent_dir(path);
}

typedef struct replica_copy {
    char name[AGENT_NAME_MAX];
    float *x;
    size_t n;
} replica_copy;

ss_status ss__agent_checkpoint(ss__agent *a, const char *dir, size_t *groups) {
    if (!a || !dir || !*dir || !groups)
        return SS_ERR_INVALID_ARGUMENT;
    *groups = 0;
    /* Under the locks only copies (a torn read is fine, as in any Hogwild
     * snapshot: each file gets one consistent buffer); the disk work runs
     * after, so a checkpoint never holds up registrations or /status. */
    enum { MAX_COPIES = AGENT_MAX_GROUPS * 4 };
    replica_copy *copies = calloc(MAX_COPIES, sizeof *copies);
    if (!copies)
        return SS_ERR_NO_MEMORY;
    size_t ncopies = 0;
    ss_status st = SS_OK;
    pthread_mutex_lock(&a->lock);
    for (agent_session *s = a->sessions; s && st == SS_OK; s = s->next) {
        pthread_mutex_lock(&s->lock);
        for (size_t i = 0; i < s->ngroups && st == SS_OK; i++) {
            const agent_group *g = &s->groups[i];
            bool seen = false;
            for (size_t k = 0; k < ncopies; k++)
                seen = seen || !strcmp(copies[k].name, g->name);
            if (seen || ncopies == MAX_COPIES)
                continue;
            replica_copy *c = &copies[ncopies];
            if (!(c->x = malloc(g->shm.n * sizeof *c->x))) {
                st = SS_ERR_NO_MEMORY;
                break;
            }
            /* A device group's floats are in the trainer's GPU memory. */
            if ((st = ss__replica_snapshot(g->replica, c->x)) != SS_OK) {
                free(c->x);
                break;
            }
            c->n = g->shm.n;
            snprintf(c->name, sizeof c->name, "%s", g->name);
            ncopies++;
        }
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&a->lock);
    for (size_t k = 0; k < ncopies; k++) {
        if (st == SS_OK)
            st = write_atomic(dir, copies[k].name, copies[k].x, copies[k].n);
        free(copies[k].x);
    }
    free(copies);
    *groups = st == SS_OK ? ncopies : 0;
    return st;
}
