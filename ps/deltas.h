/* Deltas out of a training PS, and a serving PS that follows them.
 *
 * The directory (--delta-dir on the training PS, --follow on a follower)
 * holds one directory per delta, named by its sequence number and kind:
 * "00000000000000000042-delta" or "...-base", each holding emb.delta (the
 * embedding rows: embedding-store/delta_file.h) and dense.ckpt (the dense
 * groups changed since the previous entry, a base every group:
 * shadow/dense_checkpoint.h; a reader upserts them). A delta is built in a
 * hidden temporary directory and renamed into place, so a reader sees a
 * whole delta or none, and SIGKILL mid-write leaves the ones before it.
 * The first delta after a start, the one after a failed write and every
 * --delta-base-every-th one are bases (every row); the newest
 * --delta-keep-bases bases and the deltas after the oldest of them are
 * kept, older ones removed.
 *
 * A follower applies the newest base, then each delta in sequence order
 * as it appears. What it reads must be what the training PS wrote: the
 * followed directory, each entry and each file are this uid's, not
 * writable by group or others, and never links; an entry's emb.delta
 * header names the entry's own sequence number and kind (a copy of
 * another entry is a replay); a sequence number more than
 * SS_DELTA_SEQ_JUMP past the one served is not one a PS wrote. An entry
 * is checked whole (both files read, every value, both parts against the
 * state served) before any of it applies. One that fails is refused, by
 * name (it never hides a later entry), with the reason in the log and in
 * shadowsync_follower_refused_total{reason}: the follower keeps serving
 * its last good state and, since the deltas after a missing one cannot
 * apply, waits for the next base (a gap in the sequence re-bases the same
 * way). */
#ifndef SS_PS_DELTAS_H
#define SS_PS_DELTAS_H

#include <stdint.h>

#include "common/metrics.h"
#include "embedding-store/emb_store.h"
#include "rpc/emb/delta_client.h"
#include "shadow/central.h"

typedef struct ss__ps_deltas ss__ps_deltas;

typedef struct ss__ps_deltas_config {
    const char *dir;     /* made 0700 when missing; an existing one must be private */
    uint32_t every_s;    /* a delta every this many seconds (>= 1) */
    uint32_t base_every; /* a base every this many deltas (>= 1; 1: every one a base) */
    uint32_t keep_bases; /* bases kept, with the deltas after them (>= 1) */
    ss__emb_store *store;
    ss__central *centre;
    ss__metrics *metrics;
} ss__ps_deltas_config;

/* Starts tracking the store's changes and the writer thread; its first
 * delta (a base) comes every_s from now. SS_ERR_PERMISSION / SS_ERR_IO
 * with why for the directory. */
ss_status ss__ps_deltas_start(const ss__ps_deltas_config *cfg, ss__ps_deltas **out, char *why,
                              size_t whylen);
/* Writes one more delta (what changed since the last), then stops. */
void ss__ps_deltas_stop(ss__ps_deltas *d);

typedef struct ss__ps_follower ss__ps_follower;

typedef struct ss__ps_follower_config {
    const char *dir;        /* the directory followed, or: */
    const char *addr;       /* a training PS's host:port (its Deltas service) */
    const ss__rpc_tls *tls; /* to addr (NULL: plain TCP); the token from the environment */
    uint32_t timeout_ms;    /* of each call to addr (0: 30 s) */
    uint32_t poll_ms;       /* a look for new deltas every this many ms (>= 10) */
    ss__emb_store *store;
    ss__central *centre;
    ss__metrics *metrics;
} ss__ps_follower_config;

/* Applies what the directory (or the PS at addr) holds now (the newest
 * base and the deltas after it), then follows it in a thread. SS_ERR_IO
 * with why when the directory cannot be read or the PS not reached. Over
 * the network a failed fetch is tried again at the next look; an entry
 * that arrives whole but does not check is refused as in a directory. */
ss_status ss__ps_follower_start(const ss__ps_follower_config *cfg, ss__ps_follower **out, char *why,
                                size_t whylen);
void ss__ps_follower_stop(ss__ps_follower *f);

/* One entry of a delta directory, by name: its sequence number and kind;
 * false for a name that is not one ("...-base", "...-delta"). */
bool ss__ps_delta_name_parse(const char *name, uint64_t *seq, bool *base);

/* Where entry seq (a base or a delta) of directory dir lies, or its file
 * `file` when not NULL ("emb.delta", "dense.ckpt"): the one spelling of
 * an entry's name for its writer, a follower and the Deltas service. */
void ss__ps_delta_path(const char *dir, uint64_t seq, bool base, const char *file, char *out,
                       size_t outlen);

/* How far past the state served a sequence number may be: a PS writes one
 * a second at most (2^32 is 136 years of them), so a name beyond it was
 * not written by one, and taken as the newest it would hide every later
 * entry. */
#define SS_DELTA_SEQ_JUMP ((uint64_t)1 << 32)

/* One entry, by name. */
typedef struct ss__delta_entry {
    uint64_t seq; /* 0: none */
    bool base;
} ss__delta_entry;

/* The entries a follower refused (the newest SS_DELTA_REFUSALS_KEPT): not
 * tried again, and not taken for the newest base. */
#define SS_DELTA_REFUSALS_KEPT 64
typedef struct ss__delta_refusals {
    ss__delta_entry kept[SS_DELTA_REFUSALS_KEPT];
    size_t next; /* where the next goes (the oldest is replaced) */
} ss__delta_refusals;

void ss__delta_refusals_add(ss__delta_refusals *r, ss__delta_entry e);
bool ss__delta_refusals_has(const ss__delta_refusals *r, ss__delta_entry e);

/* What directory dir holds past `after` (newest, newest_base: at all),
 * at most SS_DELTA_SEQ_JUMP past it, entries in refused (NULL: none) left out; far (NULL: not
 * asked) gets one entry past that bound that is not refused. SS_ERR_IO when it cannot be read. */
ss_status ss__ps_delta_index(const char *dir, uint64_t after, const ss__delta_refusals *refused,
                             ss__delta_index *out, ss__delta_entry *far);

#endif
