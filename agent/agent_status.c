/* What the agent tells about itself: /status JSON and replica checkpoints. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent_internal.h"
#include "common/clock.h"
#include "common/strbuf.h"

/* Names are checked to [A-Za-z0-9_.-] at the socket: they need no JSON
 * escaping. */
static void group_json(ss__strbuf *b, const agent_session *s, const agent_group *g, uint64_t now,
                       bool *first) {
    ss__group_stats st = {0};
    if (g->eg)
        ss__engine_group_stats(g->eg, &st);
    ss__shm_header *h = g->shm.hdr;
    double age = st.last_done_ns ? (double)(now - st.last_done_ns) / 1e9 : -1.0;
    ss__strbuf_printf(
        b,
        "%s\n    {\"group\":\"%s\",\"trainer\":\"%s\",\"session\":%llu,"
        "\"algo\":\"%s\",\"floats\":%zu,\"syncing\":%s,\"iterations\":%llu,"
        "\"rounds\":%llu,\"failed_rounds\":%llu,\"last_round_age_seconds\":%.3f,"
        "\"last_round_seconds\":%.6f,\"sync_gap_mean\":%.2f,\"sync_gap_p99\":%llu,"
        "\"divergence\":%.6g}",
        *first ? "" : ",", g->name, s->trainer, (unsigned long long)s->id, ss__algo_name(g->algo),
        g->shm.n, g->eg ? "true" : "false", (unsigned long long)atomic_load(&h->iterations),
        (unsigned long long)atomic_load(&h->rounds),
        (unsigned long long)atomic_load(&h->failed_rounds), age, (double)st.last_round_ns / 1e9,
        ss__shm_load_double(&h->gap_mean_bits), (unsigned long long)atomic_load(&h->gap_p99),
        ss__shm_load_double(&h->divergence_bits));
    *first = false;
}

ss_status ss__agent_status_json(ss__agent *a, char **out, size_t *len) {
    if (!a || !out)
        return SS_ERR_INVALID_ARGUMENT;
    uint64_t now = ss__now_ns();
    uint64_t rounds = ss__agent_rounds(a);
    ss__strbuf b = {0};
    ss__strbuf_printf(&b,
                      "{\"role\":\"agent\",\"socket\":\"%s\",\"uptime_seconds\":%.1f,"
                      "\"rounds_total\":%llu,\n  \"members\":[",
                      a->socket_path, (double)(now - a->start_ns) / 1e9,
                      (unsigned long long)rounds);
    pthread_mutex_lock(&a->lock);
    bool first = true;
    for (agent_session *s = a->sessions; s; s = s->next) {
        pthread_mutex_lock(&s->lock);
        ss__strbuf_printf(&b,
                          "%s\n    {\"session\":%llu,\"trainer\":\"%s\",\"pid\":%d,\"uid\":%d,"
                          "\"state\":\"%s\",\"groups\":%zu}",
                          first ? "" : ",", (unsigned long long)s->id, s->hello ? s->trainer : "",
                          (int)s->peer_pid, (int)s->peer_uid,
                          !s->hello               ? "connecting"
                          : s->finished           ? "finished"
                          : atomic_load(&s->done) ? "leaving"
                                                  : "training",
                          s->ngroups);
        first = false;
        pthread_mutex_unlock(&s->lock);
    }
    ss__strbuf_printf(&b, "],\n  \"groups\":[");
    first = true;
    for (agent_session *s = a->sessions; s; s = s->next) {
        pthread_mutex_lock(&s->lock);
        for (size_t i = 0; i < s->ngroups; i++)
            group_json(&b, s, &s->groups[i], now, &first);
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&a->lock);
    ss__strbuf_printf(&b, "]}\n");
    return ss__strbuf_take(&b, out, len);
}

/* dir/name.f32 via a temporary file, fsync and rename. */
static ss_status write_atomic(const char *dir, const char *name, const float *x, size_t n) {
    char path[4096], tmp[4200];
    if (snprintf(path, sizeof path, "%s/%s.f32", dir, name) >= (int)sizeof path)
        return SS_ERR_INVALID_ARGUMENT;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return SS_ERR_IO;
    /* A copy first: the trainer keeps writing (a torn read is fine, as in
     * any Hogwild snapshot), the file gets one consistent buffer. */
    float *copy = malloc(n * sizeof *copy);
    ss_status st = copy ? SS_OK : SS_ERR_NO_MEMORY;
    if (copy) {
        memcpy(copy, x, n * sizeof *copy);
        const char *p = (const char *)copy;
        size_t left = n * sizeof *copy;
        while (left && st == SS_OK) {
            ssize_t k = write(fd, p, left);
            if (k <= 0)
                st = SS_ERR_IO;
            else {
                p += k;
                left -= (size_t)k;
            }
        }
        free(copy);
    }
    if (st == SS_OK && fsync(fd) != 0)
        st = SS_ERR_IO;
    close(fd);
    if (st == SS_OK && rename(tmp, path) != 0)
        st = SS_ERR_IO;
    if (st != SS_OK)
        unlink(tmp);
    return st;
}

ss_status ss__agent_checkpoint(ss__agent *a, const char *dir, size_t *groups) {
    if (!a || !dir || !*dir || !groups)
        return SS_ERR_INVALID_ARGUMENT;
    *groups = 0;
    ss_status st = SS_OK;
    char done[AGENT_MAX_GROUPS * 4][AGENT_NAME_MAX];
    size_t ndone = 0;
    pthread_mutex_lock(&a->lock);
    for (agent_session *s = a->sessions; s && st == SS_OK; s = s->next) {
        pthread_mutex_lock(&s->lock);
        for (size_t i = 0; i < s->ngroups && st == SS_OK; i++) {
            const agent_group *g = &s->groups[i];
            bool seen = false;
            for (size_t k = 0; k < ndone; k++)
                seen = seen || !strcmp(done[k], g->name);
            if (seen || ndone == sizeof done / sizeof *done)
                continue;
            st = write_atomic(dir, g->name, g->shm.data, g->shm.n);
            snprintf(done[ndone++], AGENT_NAME_MAX, "%s", g->name);
        }
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&a->lock);
    *groups = ndone;
    return st;
}
