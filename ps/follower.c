/* A serving PS's side of deltas (deltas.h): apply the newest base and the
 * deltas after it, then follow them: in a directory, or from a training
 * PS over the network (its Deltas service). */
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
    ss__rpc_channel *ch; /* to cfg.addr; NULL: cfg.dir */
    ss__ticker *ticker;
    uint64_t applied;     /* sequence number of the state served (0: none) */
    uint64_t applied_ms;  /* when the training PS wrote it */
    uint64_t refused_seq; /* the newest refused one (not tried again) */
    ss__gauge *applied_gauge, *newest_gauge, *lag_gauge, *behind_gauge;
    ss__counter *applied_count, *refused, *rebases;
};

ss_status ss__ps_delta_index(const char *dir, uint64_t after, uint64_t refused,
                             ss__delta_index *out) {
    *out = (ss__delta_index){0};
    DIR *d = opendir(dir);
    if (!d)
        return SS_ERR_IO;
    struct dirent *e;
    uint64_t seq;
    bool base;
    while ((e = readdir(d))) {
        if (!ss__ps_delta_name_parse(e->d_name, &seq, &base))
            continue;
        if (seq > out->newest)
            out->newest = seq;
        if (base && seq > out->newest_base && seq > refused)
            out->newest_base = seq;
        if (seq == after + 1 && seq > refused) {
            out->next = seq;
            out->next_is_base = base;
        }
    }
    closedir(d);
    return SS_OK;
}

/* What the source holds past what is applied (refused entries left out). */
static ss_status index_of(const ss__ps_follower *f, ss__delta_index *ix) {
    if (!f->ch)
        return ss__ps_delta_index(f->cfg.dir, f->applied, f->refused_seq, ix);
    ss_status st = ss__delta_client_index(f->ch, f->applied, f->cfg.timeout_ms, ix);
    if (st == SS_OK && ix->next && ix->next <= f->refused_seq)
        ix->next = 0;
    if (st == SS_OK && ix->newest_base <= f->refused_seq)
        ix->newest_base = 0;
    return st;
}

/* A follower takes files up to this size over the network (a base holds
 * every row of the shard). */
#define FETCH_MAX ((size_t)1 << 40)

/* Entry seq's two files, read and checked whole. SS_ERR_IO, SS_ERR_TIMEOUT
 * or SS_ERR_NOT_FOUND over the network: the source, not the entry, failed
 * (tried again at the next look). */
static ss_status load_entry(const ss__ps_follower *f, uint64_t seq, bool base,
                            ss__emb_delta_file **ef, ss__dense_ckpt_file **df, char *why,
                            size_t whylen) {
    ss_status st;
    if (!f->ch) {
        char path[4400];
        ss__ps_delta_path(f->cfg.dir, seq, base, "emb.delta", path, sizeof path);
        if ((st = ss__emb_delta_read(path, ef, why, whylen)) != SS_OK)
            return st;
        ss__ps_delta_path(f->cfg.dir, seq, base, "dense.ckpt", path, sizeof path);
        st = ss__dense_ckpt_read(path, df);
    } else {
        unsigned char *buf;
        size_t len;
        if ((st = ss__delta_client_fetch(f->ch, seq, base, SS_DELTA_EMB, f->cfg.timeout_ms,
                                         FETCH_MAX, &buf, &len, why, whylen)) != SS_OK ||
            (st = ss__emb_delta_parse(buf, len, true, ef, why, whylen)) != SS_OK)
            return st;
        if ((st = ss__delta_client_fetch(f->ch, seq, base, SS_DELTA_DENSE, f->cfg.timeout_ms,
                                         FETCH_MAX, &buf, &len, why, whylen)) != SS_OK)
            return st;
        st = ss__dense_ckpt_parse(buf, len, true, df);
    }
    if (st != SS_OK && !*why)
        snprintf(why, whylen, "dense.ckpt: %s", ss_strerror(st));
    return st;
}

/* Whether a failure was the network's (the entry is tried again), not the
 * entry's. */
static bool source_failed(const ss__ps_follower *f, ss_status st) {
    return f->ch && (st == SS_ERR_IO || st == SS_ERR_TIMEOUT || st == SS_ERR_NOT_FOUND ||
                     st == SS_ERR_PERMISSION);
}

/* Checks both parts of entry seq whole, then applies them: the state
 * moves only when both are good. */
static ss_status apply_entry(ss__ps_follower *f, uint64_t seq, bool base) {
    char why[200] = "";
    ss__emb_delta_file *ef = NULL;
    ss__dense_ckpt_file *df = NULL;
    size_t groups = 0;
    ss_status st = load_entry(f, seq, base, &ef, &df, why, sizeof why);
    if (st == SS_OK && (st = ss__emb_store_apply_delta(f->cfg.store, ef)) != SS_OK)
        snprintf(why, sizeof why, "cannot apply its rows: %s", ss_strerror(st));
    if (st == SS_OK && (st = ss__central_load_file(f->cfg.centre, df, &groups)) != SS_OK)
        snprintf(why, sizeof why, "cannot apply its dense groups: %s", ss_strerror(st));
    if (st == SS_OK) {
        ss__emb_delta_info info;
        ss__emb_delta_info_of(ef, &info);
        f->applied = seq;
        f->applied_ms = info.written_ms;
        ss__counter_add(f->applied_count, 1);
    } else if (source_failed(f, st)) {
        SS_LOG_WARNF("follower",
                     "event=fetch_failed from=%s seq=%" PRIu64 " status=%s why=\"%s\" "
                     "note=\"tried again at the next look\"",
                     f->cfg.addr, seq, ss_status_name(st), why);
    } else {
        f->refused_seq = seq;
        ss__counter_add(f->refused, 1);
        SS_LOG_ERRORF("follower",
                      "event=delta_refused from=%s seq=%" PRIu64 " kind=%s why=\"%s\" "
                      "note=\"serving seq %" PRIu64 " until the next base\"",
                      f->ch ? f->cfg.addr : f->cfg.dir, seq, base ? "base" : "delta", why,
                      f->applied);
    }
    ss__emb_delta_close(ef);
    ss__dense_ckpt_close(df);
    return st;
}

/* Everything that can be applied now: the next in sequence, else (a gap,
 * or a refused one before it) the newest base. */
static void catch_up(ss__ps_follower *f) {
    ss__delta_index l;
    ss_status st;
    while (index_of(f, &l) == SS_OK) {
        if (l.next) {
            st = apply_entry(f, l.next, l.next_is_base);
        } else if (l.newest_base > f->applied) {
            if (f->applied)
                ss__counter_add(f->rebases, 1);
            st = apply_entry(f, l.newest_base, true);
        } else {
            ss__gauge_set(f->newest_gauge, (double)l.newest);
            ss__gauge_set(f->behind_gauge, (double)(l.newest - f->applied));
            break;
        }
        if (st != SS_OK && source_failed(f, st))
            break; /* the next look tries again */
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
    const bool remote = cfg && cfg->addr && *cfg->addr;
    if (!cfg || !out || (!remote && (!cfg->dir || !*cfg->dir)) || cfg->poll_ms < 10 ||
        !cfg->store || !cfg->centre || !cfg->metrics)
        return SS_ERR_INVALID_ARGUMENT;
    ss__ps_follower *f = calloc(1, sizeof *f);
    if (!f)
        return SS_ERR_NO_MEMORY;
    f->cfg = *cfg;
    if (!f->cfg.timeout_ms)
        f->cfg.timeout_ms = 30000;
    ss_status st = remote ? ss__rpc_channel_create(cfg->addr, 0, cfg->tls, &f->ch) : SS_OK;
    if (st == SS_OK && remote)
        st = ss__rpc_channel_reachable(f->ch, "the training PS", 2000);
    ss__delta_index l;
    if (st == SS_OK && (st = index_of(f, &l)) != SS_OK && remote)
        snprintf(why, whylen,
                 "--follow %s: its Deltas service said %s (is it a training PS with "
                 "--delta-dir, and is the token the same?)",
                 cfg->addr, ss_strerror(st));
    else if (st != SS_OK)
        snprintf(why, whylen, "--follow %s: %s", remote ? cfg->addr : cfg->dir,
                 remote ? ss__rpc_last_failure() : "cannot read the directory");
    if (st != SS_OK) {
        ss__rpc_channel_destroy(f->ch);
        free(f);
        return st;
    }
    register_series(f);
    ss__emb_store_set_read_only(cfg->store);
    catch_up(f);
    if ((st = ss__ticker_start((uint64_t)cfg->poll_ms * 1000000ull, catch_up_tick, f,
                               &f->ticker)) != SS_OK) {
        ss__rpc_channel_destroy(f->ch);
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
    ss__rpc_channel_destroy(f->ch);
    free(f);
}
