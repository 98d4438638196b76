/* A serving PS's side of deltas (deltas.h): apply the newest base and the
 * deltas after it, then follow them: in a directory, or from a training
 * PS over the network (its Deltas service). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/private_files.h"
#include "common/read_file.h"
#include "common/ticker.h"
#include "embedding-store/delta_file.h"
#include "ps/deltas.h"
#include "shadow/dense_checkpoint.h"

/* Why an entry was refused: the reason label of
 * shadowsync_follower_refused_total. */
typedef enum refusal {
    REFUSED_UNREADABLE,     /* torn, truncated, corrupted, a file missing */
    REFUSED_NOT_PRIVATE,    /* a link, or not this uid's, or writable by others */
    REFUSED_MISMATCH,       /* its header names another entry (a replay) */
    REFUSED_NOT_APPLICABLE, /* does not fit the state served */
    REFUSED_OUT_OF_RANGE,   /* a sequence number no PS wrote */
    REFUSAL_KINDS
} refusal;

static const char *const refusal_names[REFUSAL_KINDS] = {"unreadable", "not_private", "mismatch",
                                                         "not_applicable", "out_of_range"};

/* The flag named in the messages about the followed directory. */
#define FOLLOW_FLAG "--follow"

/* Entries tried in one look at most: a bound on the work of a look however
 * many entries are refused. */
#define LOOK_MAX_ENTRIES 256

struct ss__ps_follower {
    ss__ps_follower_config cfg;
    ss__rpc_channel *ch; /* to cfg.addr; NULL: cfg.dir */
    ss__ticker *ticker;
    uint64_t applied;    /* sequence number of the state served (0: none) */
    uint64_t applied_ms; /* when the training PS wrote it */
    ss__delta_refusals refused;
    bool dir_refused; /* the followed directory itself, last look (said once) */
    ss__gauge *applied_gauge, *newest_gauge, *lag_gauge, *behind_gauge;
    ss__counter *applied_count, *refused_count[REFUSAL_KINDS], *rebases;
};

void ss__delta_refusals_add(ss__delta_refusals *r, ss__delta_entry e) {
    r->kept[r->next] = e;
    r->next = (r->next + 1) % SS_DELTA_REFUSALS_KEPT;
}

bool ss__delta_refusals_has(const ss__delta_refusals *r, ss__delta_entry e) {
    for (size_t i = 0; r && i < SS_DELTA_REFUSALS_KEPT; i++)
        if (r->kept[i].seq == e.seq && r->kept[i].base == e.base && e.seq)
            return true;
    return false;
}

/* The index of an open directory (closed here). */
static void index_entries(DIR *d, uint64_t after, const ss__delta_refusals *refused,
                          ss__delta_index *out, ss__delta_entry *far) {
    *out = (ss__delta_index){0};
    if (far)
        *far = (ss__delta_entry){0};
    struct dirent *e;
    ss__delta_entry n;
    while ((e = readdir(d))) {
        if (!ss__ps_delta_name_parse(e->d_name, &n.seq, &n.base) ||
            ss__delta_refusals_has(refused, n))
            continue;
        if (n.seq > after && n.seq - after > SS_DELTA_SEQ_JUMP) {
            if (far && !far->seq)
                *far = n;
            continue;
        }
        if (n.seq > out->newest)
            out->newest = n.seq;
        if (n.base && n.seq > out->newest_base)
            out->newest_base = n.seq;
        if (n.seq == after + 1) {
            out->next = n.seq;
            out->next_is_base = n.base;
        }
    }
    closedir(d);
}

ss_status ss__ps_delta_index(const char *dir, uint64_t after, const ss__delta_refusals *refused,
                             ss__delta_index *out, ss__delta_entry *far) {
    DIR *d = opendir(dir);
    if (!d)
        return SS_ERR_IO;
    index_entries(d, after, refused, out, far);
    return SS_OK;
}

/* The followed directory, opened and checked into *dfd: this uid's, not
 * writable by others, not a link (said once in the log while it stays
 * so, unless dir_refused is set already). SS_ERR_PERMISSION / SS_ERR_IO
 * with why when it cannot be followed now. */
static ss_status open_followed(ss__ps_follower *f, int *dfd, char *why, size_t whylen) {
    *dfd = ss__private_open_at(AT_FDCWD, f->cfg.dir, true, FOLLOW_FLAG, why, whylen);
    const ss_status st = *dfd >= 0 ? SS_OK : errno == EPERM ? SS_ERR_PERMISSION : SS_ERR_IO;
    if (st != SS_OK && !f->dir_refused)
        SS_LOG_ERRORF("follower",
                      "event=directory_refused dir=%s why=\"%s\" note=\"serving seq "
                      "%" PRIu64 "; nothing read from it until it is fixed\"",
                      f->cfg.dir, why, f->applied);
    f->dir_refused = st != SS_OK;
    return st;
}

/* What the source holds past what is applied (refused entries left out);
 * *dfd: the followed directory, open (-1 over the network); why: why the
 * directory cannot be read. */
static ss_status index_of(ss__ps_follower *f, ss__delta_index *ix, ss__delta_entry *far, int *dfd,
                          char *why, size_t whylen) {
    *far = (ss__delta_entry){0};
    *dfd = -1;
    if (!f->ch) {
        int dup_fd;
        DIR *d;
        ss_status st = open_followed(f, dfd, why, whylen);
        if (st != SS_OK)
            return st;
        if ((dup_fd = dup(*dfd)) < 0 || !(d = fdopendir(dup_fd))) {
            snprintf(why, whylen, "%s: cannot read %s: %s", FOLLOW_FLAG, f->cfg.dir,
                     strerror(errno));
            if (dup_fd >= 0)
                close(dup_fd);
            close(*dfd);
            *dfd = -1;
            return SS_ERR_IO;
        }
        index_entries(d, f->applied, &f->refused, ix, far);
        return SS_OK;
    }
    ss_status st = ss__delta_client_index(f->ch, f->applied, f->cfg.timeout_ms, ix);
    if (st != SS_OK)
        return st;
    const ss__delta_entry next = {ix->next, ix->next_is_base}, base = {ix->newest_base, true};
    if (ss__delta_refusals_has(&f->refused, next))
        ix->next = 0;
    if (ss__delta_refusals_has(&f->refused, base) || ix->newest_base <= f->applied)
        ix->newest_base = 0;
    else if (ix->newest_base - f->applied > SS_DELTA_SEQ_JUMP)
        *far = base, ix->newest_base = 0;
    if (ix->newest > f->applied && ix->newest - f->applied > SS_DELTA_SEQ_JUMP)
        ix->newest = f->applied + (ix->next != 0);
    return SS_OK;
}

/* A follower takes files up to this size (a base holds every row of the
 * shard). */
#define FETCH_MAX ((size_t)1 << 40)

/* One file of an entry of the followed directory, read whole through its
 * open entry; *why_kind: what a failure refuses it for. */
static ss_status read_local(int entry_fd, const char *file, unsigned char **buf, size_t *len,
                            refusal *why_kind, char *why, size_t whylen) {
    const int fd = ss__private_open_at(entry_fd, file, false, FOLLOW_FLAG, why, whylen);
    if (fd < 0) {
        *why_kind = errno == ENOENT ? REFUSED_UNREADABLE : REFUSED_NOT_PRIVATE;
        return errno == ENOENT ? SS_ERR_PARSE : SS_ERR_PERMISSION;
    }
    ss_status st = ss__read_fd(fd, FETCH_MAX, buf, len);
    close(fd);
    if (st != SS_OK) {
        *why_kind = REFUSED_UNREADABLE;
        snprintf(why, whylen, "%s: %s", file, ss_strerror(st));
    }
    return st;
}

/* Both files of entry e of the followed directory (dfd), read whole. A
 * missing entry (pruned since the look): SS_ERR_NOT_FOUND, not refused. */
static ss_status read_entry_files(int dfd, ss__delta_entry e, unsigned char **emb, size_t *emb_len,
                                  unsigned char **dense, size_t *dense_len, refusal *why_kind,
                                  char *why, size_t whylen) {
    char name[64];
    snprintf(name, sizeof name, "%020" PRIu64 "-%s", e.seq, e.base ? "base" : "delta");
    const int entry_fd = ss__private_open_at(dfd, name, true, FOLLOW_FLAG, why, whylen);
    if (entry_fd < 0 && errno == ENOENT)
        return SS_ERR_NOT_FOUND;
    if (entry_fd < 0) {
        *why_kind = REFUSED_NOT_PRIVATE;
        return SS_ERR_PERMISSION;
    }
    ss_status st = read_local(entry_fd, "emb.delta", emb, emb_len, why_kind, why, whylen);
    if (st == SS_OK && (st = read_local(entry_fd, "dense.ckpt", dense, dense_len, why_kind, why,
                                        whylen)) != SS_OK) {
        free(*emb);
        *emb = NULL;
    }
    close(entry_fd);
    return st;
}

/* Entry e's two files, read and checked whole (each on its own). A
 * failure of the source, not of the entry (the network's, or an entry
 * pruned since the look): *retry, tried again at the next look. */
static ss_status load_entry(const ss__ps_follower *f, int dfd, ss__delta_entry e,
                            ss__emb_delta_file **ef, ss__dense_ckpt_file **df, refusal *why_kind,
                            bool *retry, char *why, size_t whylen) {
    unsigned char *emb = NULL, *dense = NULL;
    size_t emb_len = 0, dense_len = 0;
    ss_status st;
    *why_kind = REFUSED_UNREADABLE;
    if (!f->ch) {
        st = read_entry_files(dfd, e, &emb, &emb_len, &dense, &dense_len, why_kind, why, whylen);
        *retry = st == SS_ERR_NOT_FOUND;
    } else {
        st = ss__delta_client_fetch(f->ch, e.seq, e.base, SS_DELTA_EMB, f->cfg.timeout_ms,
                                    FETCH_MAX, &emb, &emb_len, why, whylen);
        if (st == SS_OK &&
            (st = ss__delta_client_fetch(f->ch, e.seq, e.base, SS_DELTA_DENSE, f->cfg.timeout_ms,
                                         FETCH_MAX, &dense, &dense_len, why, whylen)) != SS_OK)
            free(emb);
        *retry = st == SS_ERR_IO || st == SS_ERR_TIMEOUT || st == SS_ERR_NOT_FOUND ||
                 st == SS_ERR_PERMISSION;
    }
    if (st != SS_OK)
        return st;
    *why_kind = REFUSED_UNREADABLE;
    if ((st = ss__emb_delta_parse(emb, emb_len, true, ef, why, whylen)) != SS_OK) {
        free(dense);
        return st;
    }
    if ((st = ss__dense_ckpt_parse(dense, dense_len, true, df)) != SS_OK)
        snprintf(why, whylen, "dense.ckpt: %s", ss_strerror(st));
    return st;
}

/* Whether the parts of entry e, read and checked on their own, are the
 * entry's and fit the state served: nothing applies otherwise. */
static ss_status entry_fits(ss__ps_follower *f, ss__delta_entry e, const ss__emb_delta_file *ef,
                            const ss__dense_ckpt_file *df, refusal *why_kind, char *why,
                            size_t whylen) {
    ss__emb_delta_info info;
    ss__emb_delta_info_of(ef, &info);
    ss_status st;
    *why_kind = REFUSED_MISMATCH;
    if (info.seq != e.seq || info.base != e.base) {
        snprintf(why, whylen,
                 "emb.delta's header is %s %" PRIu64 ", not this entry's %s %" PRIu64
                 " (a copy of another entry: a replay)",
                 info.base ? "base" : "delta", info.seq, e.base ? "base" : "delta", e.seq);
        return SS_ERR_PARSE;
    }
    *why_kind = REFUSED_NOT_APPLICABLE;
    if ((st = ss__emb_store_check_delta(f->cfg.store, ef)) != SS_OK)
        snprintf(why, whylen, "its rows do not fit: %s (a table of that name with another spec)",
                 ss_strerror(st));
    else if ((st = ss__central_check_file(f->cfg.centre, df)) != SS_OK)
        snprintf(why, whylen,
                 "its dense groups do not fit: %s (a group of that name with another "
                 "size or kind)",
                 ss_strerror(st));
    return st;
}

static void refuse(ss__ps_follower *f, ss__delta_entry e, refusal kind, const char *why) {
    ss__delta_refusals_add(&f->refused, e);
    ss__counter_add(f->refused_count[kind], 1);
    SS_LOG_ERRORF("follower",
                  "event=delta_refused from=%s seq=%" PRIu64 " kind=%s reason=%s why=\"%s\" "
                  "note=\"serving seq %" PRIu64 " until the next base\"",
                  f->ch ? f->cfg.addr : f->cfg.dir, e.seq, e.base ? "base" : "delta",
                  refusal_names[kind], why, f->applied);
}

/* Checks both parts of entry e whole, and against the state served, then
 * applies them: the state moves only when both are good. */
static ss_status apply_entry(ss__ps_follower *f, int dfd, ss__delta_entry e) {
    char why[300] = "";
    ss__emb_delta_file *ef = NULL;
    ss__dense_ckpt_file *df = NULL;
    size_t groups = 0;
    refusal kind = REFUSED_UNREADABLE;
    bool retry = false;
    ss_status st = load_entry(f, dfd, e, &ef, &df, &kind, &retry, why, sizeof why);
    if (st == SS_OK)
        st = entry_fits(f, e, ef, df, &kind, why, sizeof why);
    if (st == SS_OK && (st = ss__emb_store_apply_delta(f->cfg.store, ef)) != SS_OK)
        snprintf(why, sizeof why, "cannot apply its rows: %s", ss_strerror(st));
    if (st == SS_OK && (st = ss__central_load_file(f->cfg.centre, df, &groups)) != SS_OK)
        snprintf(why, sizeof why, "cannot apply its dense groups: %s", ss_strerror(st));
    if (st == SS_OK) {
        ss__emb_delta_info info;
        ss__emb_delta_info_of(ef, &info);
        f->applied = e.seq;
        f->applied_ms = info.written_ms;
        ss__counter_add(f->applied_count, 1);
    } else if (retry) {
        SS_LOG_WARNF("follower",
                     "event=fetch_failed from=%s seq=%" PRIu64 " status=%s why=\"%s\" "
                     "note=\"tried again at the next look\"",
                     f->ch ? f->cfg.addr : f->cfg.dir, e.seq, ss_status_name(st), why);
    } else {
        refuse(f, e, kind, why);
    }
    ss__emb_delta_close(ef);
    ss__dense_ckpt_close(df);
    return retry ? SS_ERR_IO : st;
}

/* Everything that can be applied now: the next in sequence, else (a gap,
 * or a refused one before it) the newest base. */
static void catch_up(ss__ps_follower *f) {
    ss__delta_index l;
    ss__delta_entry far;
    int dfd;
    char why[300];
    for (int tried = 0;
         tried < LOOK_MAX_ENTRIES && index_of(f, &l, &far, &dfd, why, sizeof why) == SS_OK;
         tried++) {
        ss_status st = SS_OK;
        if (far.seq) {
            char why[160];
            snprintf(why, sizeof why,
                     "sequence number %" PRIu64 " is more than 2^32 past the one served: "
                     "not one a PS wrote",
                     far.seq);
            refuse(f, far, REFUSED_OUT_OF_RANGE, why);
        } else if (l.next) {
            st = apply_entry(f, dfd, (ss__delta_entry){l.next, l.next_is_base});
        } else if (l.newest_base > f->applied) {
            if (f->applied)
                ss__counter_add(f->rebases, 1);
            st = apply_entry(f, dfd, (ss__delta_entry){l.newest_base, true});
        } else {
            ss__gauge_set(f->newest_gauge, (double)(l.newest > f->applied ? l.newest : f->applied));
            ss__gauge_set(f->behind_gauge,
                          (double)(l.newest > f->applied ? l.newest - f->applied : 0));
            st = SS_ERR_STOPPED; /* nothing more now */
        }
        if (dfd >= 0)
            close(dfd);
        if (st == SS_ERR_STOPPED || st == SS_ERR_IO)
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
    for (int k = 0; k < REFUSAL_KINDS; k++) {
        const char *labels[] = {"reason", refusal_names[k], NULL};
        ss__metrics_counter(m, "shadowsync_follower_refused_total",
                            "Entries refused, by reason: unreadable (torn, truncated, corrupted), "
                            "not_private (a link, or not this user's), mismatch (a replay), "
                            "not_applicable (does not fit the state), out_of_range (a sequence "
                            "number no PS wrote).",
                            labels, &f->refused_count[k]);
    }
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
    ss_status st = remote ? ss__rpc_channel_create(cfg->addr, 0, cfg->tls, &f->ch, NULL, 0) : SS_OK;
    if (st == SS_OK && remote)
        st = ss__rpc_channel_reachable(f->ch, "the training PS", 2000);
    ss__delta_index l;
    ss__delta_entry far;
    int dfd = -1;
    f->dir_refused = true; /* a refusal at the start is said in why, not in the log */
    if (st == SS_OK && (st = index_of(f, &l, &far, &dfd, why, whylen)) != SS_OK && remote)
        snprintf(why, whylen,
                 "--follow %s: its Deltas service said %s (is it a training PS with "
                 "--delta-dir, and is the token the same?)",
                 cfg->addr, ss_strerror(st));
    else if (st != SS_OK && remote)
        snprintf(why, whylen, "--follow %s: %s", cfg->addr, ss__rpc_last_failure());
    if (dfd >= 0)
        close(dfd);
    if (st != SS_OK) {
        ss__rpc_channel_destroy(f->ch);
        free(f);
        return st;
    }
    register_series(f);
    ss__emb_store_set_read_only(cfg->store);
    catch_up(f);
    if ((st = ss__ticker_start((uint64_t)cfg->poll_ms * 1000000ull, catch_up_tick, f, &f->ticker,
                               NULL, 0)) != SS_OK) {
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
