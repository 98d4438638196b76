/* A serving PS's side of deltas (deltas.h): apply the newest base and the
 * deltas after it, then follow the directory. */
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/ticker.h"
#include "embedding-store/delta_file.h"
#include "ps/deltas.h"
#include "shadow/dense_checkpoint.h"

struct ss__ps_follower {
    ss__ps_follower_config cfg;
    ss__ticker *ticker;
    uint64_t applied;     /* sequence number of the state served (0: none) */
    uint64_t applied_ms;  /* when the training PS wrote it */
    uint64_t refused_seq; /* the newest refused one (not tried again) */
    ss__gauge *applied_gauge, *newest_gauge, *lag_gauge, *behind_gauge;
    ss__counter *applied_count, *refused, *rebases;
};

/* What the directory holds past what is applied: the next delta in
 * sequence, the newest base, the newest sequence number. */
typedef struct listing {
    uint64_t next_delta; /* == applied + 1 when present (a base or a delta) */
    bool next_is_base;
    uint64_t newest_base, newest;
} listing;

static ss_status list(const ss__ps_follower *f, listing *l) {
    *l = (listing){0};
    DIR *d = opendir(f->cfg.dir);
    if (!d)
        return SS_ERR_IO;
    struct dirent *e;
    uint64_t seq;
    bool base;
    while ((e = readdir(d))) {
        if (!ss__ps_delta_name_parse(e->d_name, &seq, &base))
            continue;
        if (seq > l->newest)
            l->newest = seq;
        if (base && seq > l->newest_base && seq > f->refused_seq)
            l->newest_base = seq;
        if (seq == f->applied + 1 && seq > f->refused_seq) {
            l->next_delta = seq;
            l->next_is_base = base;
        }
    }
    closedir(d);
    return SS_OK;
}

/* Checks both parts of entry seq whole, then applies them: the state
 * moves only when both are good. */
static ss_status apply_entry(ss__ps_follower *f, uint64_t seq, bool base) {
    char dir[4200], path[4300], why[160] = "";
    snprintf(dir, sizeof dir, "%s/%020" PRIu64 "-%s", f->cfg.dir, seq, base ? "base" : "delta");
    snprintf(path, sizeof path, "%s/emb.delta", dir);
    ss__emb_delta_file *ef = NULL;
    ss__dense_ckpt_file *df = NULL;
    ss_status st = ss__emb_delta_read(path, &ef, why, sizeof why);
    if (st == SS_OK) {
        snprintf(path, sizeof path, "%s/dense.ckpt", dir);
        if ((st = ss__dense_ckpt_read(path, &df)) != SS_OK)
            snprintf(why, sizeof why, "dense.ckpt: %s", ss_strerror(st));
    }
    size_t groups = 0;
    if (st == SS_OK && (st = ss__emb_store_apply_delta(f->cfg.store, ef)) != SS_OK)
        snprintf(why, sizeof why, "cannot apply its rows: %s", ss_strerror(st));
    if (st == SS_OK && (st = ss__central_load(f->cfg.centre, path, &groups)) != SS_OK)
        snprintf(why, sizeof why, "cannot apply its dense groups: %s", ss_strerror(st));
    if (st == SS_OK) {
        ss__emb_delta_info info;
        ss__emb_delta_info_of(ef, &info);
        f->applied = seq;
        f->applied_ms = info.written_ms;
        ss__counter_add(f->applied_count, 1);
    } else {
        f->refused_seq = seq;
        ss__counter_add(f->refused, 1);
        SS_LOG_ERRORF("follower",
                      "event=delta_refused path=%s why=\"%s\" note=\"serving seq %" PRIu64
                      " until the next base\"",
                      dir, why, f->applied);
    }
    ss__emb_delta_close(ef);
    ss__dense_ckpt_close(df);
    return st;
}

/* Everything that can be applied now: the next in sequence, else (a gap,
 * or a refused one before it) the newest base. */
static void catch_up(ss__ps_follower *f) {
    listing l;
    while (list(f, &l) == SS_OK) {
        if (l.next_delta) {
            if (apply_entry(f, l.next_delta, l.next_is_base) != SS_OK)
                continue;
        } else if (l.newest_base > f->applied) {
            if (f->applied)
                ss__counter_add(f->rebases, 1);
            if (apply_entry(f, l.newest_base, true) != SS_OK)
                continue;
        } else {
            ss__gauge_set(f->newest_gauge, (double)l.newest);
            ss__gauge_set(f->behind_gauge, (double)(l.newest - f->applied));
            break;
        }
    }
    ss__gauge_set(f->applied_gauge, (double)f->applied);
    if (f->applied)
        ss__gauge_set(f->lag_gauge, (double)(ss__unix_ms() - f->applied_ms) * 1e-3);
}

static void catch_up_tick(void *arg) {
    catch_up(arg);
}

static void register_series(ss__ps_follower *f) {
    ss__metrics *m = f->cfg.metrics;
    ss__metrics_gauge(m, "shadowsync_follower_applied_seq",
                      "Sequence number of the delta whose state this follower serves.", NULL,
                      &f->applied_gauge);
    ss__metrics_gauge(m, "shadowsync_follower_newest_seq",
                      "Newest sequence number in the followed directory.", NULL, &f->newest_gauge);
    ss__metrics_gauge(m, "shadowsync_follower_behind_deltas",
                      "Deltas published but not applied (newest - applied).", NULL,
                      &f->behind_gauge);
    ss__metrics_gauge(m, "shadowsync_follower_lag_seconds",
                      "Age of the state served: now - when the training PS wrote it.", NULL,
                      &f->lag_gauge);
    ss__metrics_counter(m, "shadowsync_follower_applied_total", "Deltas and bases applied.", NULL,
                        &f->applied_count);
    ss__metrics_counter(m, "shadowsync_follower_refused_total",
                        "Deltas refused (torn, truncated, corrupted or not applicable).", NULL,
                        &f->refused);
    ss__metrics_counter(m, "shadowsync_follower_rebases_total",
                        "Times a gap or a refused delta was bridged by a newer base.", NULL,
                        &f->rebases);
}

ss_status ss__ps_follower_start(const ss__ps_follower_config *cfg, ss__ps_follower **out, char *why,
                                size_t whylen) {
    if (!cfg || !out || !cfg->dir || !*cfg->dir || cfg->poll_ms < 10 || !cfg->store ||
        !cfg->centre || !cfg->metrics)
        return SS_ERR_INVALID_ARGUMENT;
    ss__ps_follower *f = calloc(1, sizeof *f);
    if (!f)
        return SS_ERR_NO_MEMORY;
    f->cfg = *cfg;
    listing l;
    if (list(f, &l) != SS_OK) {
        snprintf(why, whylen, "--follow %s: cannot read the directory", cfg->dir);
        free(f);
        return SS_ERR_IO;
    }
    register_series(f);
    ss__emb_store_set_read_only(cfg->store);
    catch_up(f);
    ss_status st =
        ss__ticker_start((uint64_t)cfg->poll_ms * 1000000ull, catch_up_tick, f, &f->ticker);
    if (st != SS_OK) {
        free(f);
        return st;
    }
    *out = f;
    return SS_OK;
}

void ss__ps_follower_stop(ss__ps_follower *f) {
    if (!f)
        return;
    ss__ticker_stop(f->ticker);
    free(f);
}
