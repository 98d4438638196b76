/* The training PS's side of deltas (deltas.h): a thread that publishes a
 * delta directory every every_s and prunes old ones. */
#include "ps/deltas.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/grow.h"
#include "common/log.h"
#include "common/private_files.h"
#include "common/ticker.h"
#include "embedding-store/delta_file.h"

struct ss__ps_deltas {
    ss__ps_deltas_config cfg;
    ss__ticker *ticker;
    uint64_t seq;         /* the last published */
    uint32_t since_base;  /* deltas since the last base; 0: the next is a base */
    ss__gauge *seq_gauge; /* shadowsync_delta_seq */
    ss__counter *written; /* shadowsync_deltas_written_total{kind} x2 */
    ss__counter *base_written, *failed, *rows, *deletions;
    ss__histogram *seconds;
};

/* Removes a delta directory and what is in it. */
static void remove_dir(const char *path) {
    if (ss__remove_tree(path) != 0)
        SS_LOG_WARNF("deltas", "event=remove_failed path=%s error=\"%s\"", path, strerror(errno));
}

void ss__ps_delta_path(const char *dir, uint64_t seq, bool base, const char *file, char *out,
                       size_t outlen) {
    snprintf(out, outlen, "%s/%020" PRIu64 "-%s%s%s", dir, seq, base ? "base" : "delta",
             file ? "/" : "", file ? file : "");
}

bool ss__ps_delta_name_parse(const char *name, uint64_t *seq, bool *base) {
    char kind[8];
    int used = 0;
    if (strlen(name) != 20 + 5 && strlen(name) != 20 + 6)
        return false;
    for (int i = 0; i < 20; i++)
        if (name[i] < '0' || name[i] > '9')
            return false;
    if (sscanf(name, "%20" SCNu64 "-%7[a-z]%n", seq, kind, &used) != 2 || name[used] != '\0')
        return false;
    if (!strcmp(kind, "base"))
        *base = true;
    else if (!strcmp(kind, "delta"))
        *base = false;
    else
        return false;
    return *seq > 0;
}

/* The newest sequence number in dir (0: none); removes leftover hidden
 * temporary directories of a killed writer. */
static uint64_t newest_seq(const char *dir) {
    uint64_t newest = 0, seq;
    bool base;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strncmp(e->d_name, ".tmp-", 5)) {
            char path[4200];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            remove_dir(path);
        } else if (ss__ps_delta_name_parse(e->d_name, &seq, &base) && seq > newest) {
            newest = seq;
        }
    }
    closedir(d);
    return newest;
}

static void remove_entry(const char *dir, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    remove_dir(path);
}

static int newest_first(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Keeps the newest keep_bases bases and everything after the oldest of
 * them (every base counted, however many a restart left behind). */
static void prune(const ss__ps_deltas *d) {
    uint64_t *bases = NULL, seq;
    size_t nb = 0, cap = 0;
    bool base;
    DIR *dh = opendir(d->cfg.dir);
    if (!dh)
        return;
    struct dirent *e;
    while ((e = readdir(dh))) {
        if (!ss__ps_delta_name_parse(e->d_name, &seq, &base) || !base)
            continue;
        if (!SS_GROW(bases, cap, nb, 16)) { /* keep everything: pruning is a chore, not a duty */
            free(bases);
            closedir(dh);
            return;
        }
        bases[nb++] = seq;
    }
    if (nb > d->cfg.keep_bases) {
        qsort(bases, nb, sizeof *bases, newest_first);
        const uint64_t oldest_kept = bases[d->cfg.keep_bases - 1];
        rewinddir(dh);
        while ((e = readdir(dh)))
            if (ss__ps_delta_name_parse(e->d_name, &seq, &base) && seq < oldest_kept)
                remove_entry(d->cfg.dir, e->d_name);
    }
    free(bases);
    closedir(dh);
}

/* Writes both parts into a hidden directory, then renames it into place. */
static ss_status write_entry(ss__ps_deltas *d, uint64_t seq, bool base, ss__emb_delta_info *info,
                             char *final, size_t finallen) {
    char tmp[4200], path[4300];
    snprintf(tmp, sizeof tmp, "%s/.tmp-%020" PRIu64 "-XXXXXX", d->cfg.dir, seq);
    if (!mkdtemp(tmp))
        return SS_ERR_IO;
    snprintf(path, sizeof path, "%s/emb.delta", tmp);
    ss_status st = ss__emb_store_write_delta(d->cfg.store, path, seq, base, info);
    size_t groups = 0;
    snprintf(path, sizeof path, "%s/dense.ckpt", tmp);
    if (st == SS_OK)
        st = ss__central_save_delta(d->cfg.centre, path, base, &groups);
    if (st == SS_OK) /* both files' names in the hidden directory */
        st = ss__fsync_parent_dir(path);
    ss__ps_delta_path(d->cfg.dir, seq, base, NULL, final, finallen);
    if (st == SS_OK && rename(tmp, final) != 0)
        st = SS_ERR_IO;
    if (st == SS_OK) /* the rename */
        st = ss__fsync_parent_dir(final);
    if (st != SS_OK)
        remove_dir(tmp);
    return st;
}

static void publish(ss__ps_deltas *d) {
    const uint64_t t0 = ss__now_ns(), seq = d->seq + 1;
    const bool base = d->since_base == 0 || d->since_base >= d->cfg.base_every;
    ss__emb_delta_info info = {0};
    char final[4300];
    ss_status st = write_entry(d, seq, base, &info, final, sizeof final);
    if (st != SS_OK) {
        /* what the store handed out is gone from its marks: a base next */
        d->since_base = 0;
        ss__counter_add(d->failed, 1);
        SS_LOG_ERRORF("deltas", "event=delta_failed seq=%" PRIu64 " dir=%s status=%s", seq,
                      d->cfg.dir, ss_status_name(st));
        return;
    }
    d->seq = seq;
    d->since_base = base ? 1 : d->since_base + 1;
    ss__gauge_set(d->seq_gauge, (double)seq);
    ss__counter_add(base ? d->base_written : d->written, 1);
    ss__counter_add(d->rows, info.rows);
    ss__counter_add(d->deletions, info.deletions);
    ss__histogram_observe(d->seconds, (double)(ss__now_ns() - t0) * 1e-9);
    SS_LOG_DEBUGF("deltas", "event=delta_written path=%s rows=%" PRIu64 " deletions=%" PRIu64,
                  final, info.rows, info.deletions);
    prune(d);
}

static void publish_tick(void *arg) {
    publish(arg);
}

static void register_series(ss__ps_deltas *d) {
    static const double secs[] = {0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120};
    const char *delta[] = {"kind", "delta", NULL}, *base[] = {"kind", "base", NULL};
    const char *help = "Deltas published into --delta-dir, by kind.";
    ss__metrics *m = d->cfg.metrics;
    ss__metrics_gauge(m, "shadowsync_delta_seq", "Sequence number of the newest delta.", NULL,
                      &d->seq_gauge);
    ss__metrics_counter(m, "shadowsync_deltas_written_total", help, delta, &d->written);
    ss__metrics_counter(m, "shadowsync_deltas_written_total", help, base, &d->base_written);
    ss__metrics_counter(m, "shadowsync_deltas_failed_total",
                        "Deltas that could not be written (the next is a base).", NULL, &d->failed);
    ss__metrics_counter(m, "shadowsync_delta_rows_total", "Embedding rows written in deltas.", NULL,
                        &d->rows);
    ss__metrics_counter(m, "shadowsync_delta_deletions_total",
                        "Tombstones (deleted embedding rows) written in deltas.", NULL,
                        &d->deletions);
    ss__metrics_histogram(m, "shadowsync_delta_seconds", "Time to write and publish one delta.",
                          NULL, secs, sizeof secs / sizeof *secs, &d->seconds);
}

ss_status ss__ps_deltas_start(const ss__ps_deltas_config *cfg, ss__ps_deltas **out, char *why,
                              size_t whylen) {
    if (!cfg || !out || !cfg->dir || !*cfg->dir || !cfg->every_s || !cfg->base_every ||
        !cfg->keep_bases || !cfg->store || !cfg->centre || !cfg->metrics)
        return SS_ERR_INVALID_ARGUMENT;
    ss_status st = ss__private_dir(cfg->dir, "--delta-dir", why, whylen);
    if (st != SS_OK)
        return st;
    ss__ps_deltas *d = calloc(1, sizeof *d);
    if (!d)
        return SS_ERR_NO_MEMORY;
    d->cfg = *cfg;
    d->seq = newest_seq(cfg->dir); /* numbers go on across restarts; a base first */
    register_series(d);
    ss__emb_store_track_changes(cfg->store);
    if ((st = ss__ticker_start((uint64_t)cfg->every_s * 1000000000ull, publish_tick, d, &d->ticker,
                               NULL, 0)) != SS_OK) {
        free(d);
        return st;
    }
    *out = d;
    return SS_OK;
}

void ss__ps_deltas_stop(ss__ps_deltas *d) {
    if (!d)
        return;
    ss__ticker_stop(d->ticker);
    publish(d); /* what changed since the last one */
    free(d);
}
