/* Rows moving between shards (row_moves.h): the plan a map gives, the
 * taking side (background and on demand) and the giving side. */
#include "ps/row_moves.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/shard_map.h"
#include "common/strbuf.h"
#include "common/ticker.h"
#include "rpc/emb/emb_wire.h"
#include "rpc/emb/embedding.pb-c.h"
#include "rpc/emb/spec_pb.h"
#include "rpc/rpc_pb.h"

#define MAX_SHARDS      256
#define MAX_TAKE        65536                /* rows of one Handoff */
#define MAX_REPLY_BYTES ((uint64_t)64 << 20) /* rows of one Handoff's reply, at most */
#define STALE_WAIT_MS   3000                 /* an old owner reads the new map within 200 ms */
#define IDLE_POLL_NS    100000000ull
#define FAILED_PAUSE_NS 1000000000ull /* an old owner down: not a busy loop of calls */

/* Rows taken and put here at since_ns (0: written synced at once): said
 * to the giver (which then forgets them) once the store has written
 * them, so that rows lost by this PS dying are still the giver's. */
typedef struct held {
    uint64_t *ids;
    size_t n;
    uint64_t since_ns;
} held;

/* What this PS still takes from one old shard, per table. */
typedef struct src_table {
    char name[64];
    bool drained; /* it has no row left for this PS, and knows this PS holds what it gave */
    bool resumed; /* a background call went (the first asks for what was given before) */
    held *held;   /* oldest first */
    size_t nheld;
} src_table;

typedef struct source {
    char addr[256];
    ss__rpc_channel *ch;
    bool listed; /* its tables are known */
    src_table *tables;
    size_t ntables;
} source;

/* The move a map asks of this PS. */
typedef struct plan {
    uint64_t epoch;
    uint32_t shards;          /* in the new map */
    int self;                 /* this PS's place in it, -1: not in it (shrunk out) */
    uint32_t from_shards;     /* in the old one (0: nothing moves) */
    source *from[MAX_SHARDS]; /* by place in the old map; NULL: this PS */
    source src[MAX_SHARDS];
    size_t nsrc;
} plan;

struct ss__ps_row_moves {
    ss__ps_row_moves_config cfg;
    char self[256];
    pthread_mutex_t lock; /* the taking side: its plan, one take at a time (held across
                             calls to other PS: the giving side never takes it) */
    plan p;
    _Atomic uint64_t planned; /* p.epoch, read without the lock */
    _Atomic bool ready;       /* run() was called */
    _Atomic bool done;        /* nothing left to take under the plan */
    ss__ticker *mover;        /* the background steps, once run() */
    ss__counter *in_background, *in_on_demand, *out, *failures;
    ss__gauge *pending;
    char plan_why[320]; /* why the last plan could not be made (mv->lock) */
    /* What ensure() reads without the lock: whether a request's ids could
     * need a row from another shard under the plan (view_epoch: the
     * plan's, 0 while it changes). A request whose ids cannot does not
     * wait for the lock, which the mover holds across calls to other PS:
     * the server's completion-queue threads waited there, each PS's
     * Handoff calls found no thread to read them on the other, and both
     * sides' calls ran to their 10 s deadline. */
    _Atomic uint64_t view_epoch;
    _Atomic int view_self;
    _Atomic uint32_t view_shards, view_from_shards;
    _Atomic uint64_t view_from_self[MAX_SHARDS / 64]; /* bit j: old place j was this PS */
    /* The giving side's channels to the takers it calls back, by address
     * (give_lock; never held across the taking side's calls). */
    pthread_mutex_t give_lock;
    struct {
        char addr[256];
        ss__rpc_channel *ch;
    } back[MAX_SHARDS];
    size_t nback;
};

/* A channel to another shard: the token from the environment, the peer
 * token of the fleet. */
static ss_status peer_channel(const ss__ps_row_moves *mv, const char *addr, ss__rpc_channel **ch,
                              char *why, size_t whylen) {
    ss_status st = ss__rpc_channel_create(addr, (size_t)1 << 30, mv->cfg.tls, ch, why, whylen);
    if (st == SS_OK)
        ss__rpc_channel_set_peer_auth(*ch, mv->cfg.peer_auth);
    return st;
}

static void free_sources(plan *p) {
    for (size_t i = 0; i < p->nsrc; i++) {
        ss__rpc_channel_destroy(p->src[i].ch);
        for (size_t t = 0; t < p->src[i].ntables; t++) {
            for (size_t h = 0; h < p->src[i].tables[t].nheld; h++)
                free(p->src[i].tables[t].held[h].ids);
            free(p->src[i].tables[t].held);
        }
        free(p->src[i].tables);
    }
    memset(p, 0, sizeof *p);
}

/* The plan as ensure() reads it without the lock (mv->lock held). */
static void publish_view(ss__ps_row_moves *mv) {
    const plan *p = &mv->p;
    atomic_store(&mv->view_epoch, 0);
    atomic_store(&mv->view_self, p->self);
    atomic_store(&mv->view_shards, p->shards);
    atomic_store(&mv->view_from_shards, p->from_shards);
    for (uint32_t w = 0; w < MAX_SHARDS / 64; w++) {
        uint64_t bits = 0;
        for (uint32_t b = 0; b < 64; b++)
            if (w * 64 + b < p->from_shards && !p->from[w * 64 + b])
                bits |= 1ull << b;
        atomic_store(&mv->view_from_self[w], bits);
    }
    atomic_store(&mv->view_epoch, p->epoch);
}

/* Without the lock: false when no id can need a row from another shard
 * under the plan of the epoch served (owned here now, owned by another PS
 * before); true when some may, or the plan is being made. */
static bool may_need_rows(ss__ps_row_moves *mv, const char *table, const uint64_t *ids, size_t n) {
    const uint64_t serving = atomic_load(ss__ps_map_watch_epoch(mv->cfg.map));
    if (serving == 0 || atomic_load(&mv->view_epoch) != serving)
        return true;
    const int self = atomic_load(&mv->view_self);
    const uint32_t shards = atomic_load(&mv->view_shards);
    const uint32_t from_shards = atomic_load(&mv->view_from_shards);
    uint64_t from_self[MAX_SHARDS / 64];
    for (uint32_t w = 0; w < MAX_SHARDS / 64; w++)
        from_self[w] = atomic_load(&mv->view_from_self[w]);
    if (atomic_load(&mv->view_epoch) != serving) /* changed while read */
        return true;
    if (self < 0 || from_shards == 0)
        return false;
    const uint32_t tid = ss__emb_table_id(table);
    for (size_t j = 0; j < n; j++) {
        if (ss__emb_shard_of(tid, ids[j], shards) != (uint32_t)self)
            continue;
        const uint32_t was = ss__emb_shard_of(tid, ids[j], from_shards);
        if (!(from_self[was / 64] >> (was % 64) & 1))
            return true;
    }
    return false;
}

/* The plan of the map served now (mv->lock held): sources are the old
 * map's shards other than this one. A channel that cannot be made (a
 * client certificate unreadable while it is rotated) leaves no plan, so
 * the next call plans again, and says why in mv->plan_why. */
static ss_status replan(ss__ps_row_moves *mv) {
    ss__shard_map m;
    ss__ps_map_watch_get(mv->cfg.map, &m);
    if (m.epoch == mv->p.epoch)
        return SS_OK;
    bool held_any = false; /* rows taken in the move before, not yet said to their giver */
    for (size_t i = 0; i < mv->p.nsrc; i++)
        for (size_t t = 0; t < mv->p.src[i].ntables; t++)
            held_any = held_any || mv->p.src[i].tables[t].nheld > 0;
    if (held_any) /* written now: their givers drop them when they next give */
        ss__emb_store_flush(mv->cfg.store);
    free_sources(&mv->p);
    plan *p = &mv->p;
    p->epoch = m.epoch;
    atomic_store(&mv->planned, m.epoch);
    char nbuf[SS_SHARD_MAP_PS_MAX], fbuf[SS_SHARD_MAP_PS_MAX];
    const char *now[MAX_SHARDS], *was[MAX_SHARDS];
    p->shards = (uint32_t)ss__shard_map_split(m.ps, nbuf, sizeof nbuf, now, MAX_SHARDS);
    p->self = ss__shard_map_index(m.ps, mv->self);
    const size_t nwas = ss__shard_map_split(m.from, fbuf, sizeof fbuf, was, MAX_SHARDS);
    if (nwas == 0 || !strcmp(m.from, m.ps)) {
        atomic_store(&mv->done, true);
        publish_view(mv); /* from_shards 0: nothing moves */
        return SS_OK;
    }
    p->from_shards = (uint32_t)nwas;
    ss_status st = SS_OK;
    char why[300] = "";
    for (size_t j = 0; j < nwas && st == SS_OK; j++) {
        if (!strcmp(was[j], mv->self))
            continue;
        source *s = &p->src[p->nsrc++];
        snprintf(s->addr, sizeof s->addr, "%s", was[j]);
        /* Handoff carries its epoch in the request, not as the call's: a
         * call with one would wait on the giver's map gate, and two PS
         * changing epoch while each serves a request that takes from the
         * other would each wait on the other's. The giver needs no gate:
         * once it serves the new epoch no call of the old one is left. */
        st = peer_channel(mv, was[j], &s->ch, why, sizeof why);
        p->from[j] = s;
    }
    if (st != SS_OK) {
        snprintf(mv->plan_why, sizeof mv->plan_why,
                 "no channel to old shard %s for the map of epoch %llu: %s (%s); planned again "
                 "at the next call",
                 p->src[p->nsrc - 1].addr, (unsigned long long)m.epoch, ss_strerror(st), why);
        ss__counter_add(mv->failures, 1);
        SS_LOG_WARNF("ps", "event=row_moves_plan_failed epoch=%llu why=\"%s\"",
                     (unsigned long long)m.epoch, mv->plan_why);
        free_sources(p);
        atomic_store(&mv->planned, 0);
        return st;
    }
    atomic_store(&mv->done, p->nsrc == 0 || p->self < 0);
    publish_view(mv);
    SS_LOG_INFOF("ps", "event=row_moves_plan epoch=%llu shard=%d of=%u from=%s sources=%zu",
                 (unsigned long long)m.epoch, p->self, p->shards, m.from, p->nsrc);
    return st;
}

/* Keeps the plan at the served epoch (mv->lock held). */
static ss_status current_plan(ss__ps_row_moves *mv) {
    return atomic_load(ss__ps_map_watch_epoch(mv->cfg.map)) == mv->p.epoch ? SS_OK : replan(mv);
}

static src_table *table_of(source *s, const char *name) {
    for (size_t t = 0; t < s->ntables; t++)
        if (!strcmp(s->tables[t].name, name))
            return &s->tables[t];
    src_table *n = realloc(s->tables, (s->ntables + 1) * sizeof *n);
    if (!n)
        return NULL;
    s->tables = n;
    src_table *t = &n[s->ntables++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    return t;
}

/* The reply's ids and rows, checked against the spec. */
static ss_status reply_rows(const Shadowsync__V1__HandoffReply *r, size_t rf, size_t *n) {
    *n = r->ids.len / sizeof(uint64_t);
    if (r->ids.len % sizeof(uint64_t) || r->rows.len != *n * rf * sizeof(float))
        return SS_ERR_PARSE;
    return SS_OK;
}

/* The ids of the held rows the store has written (a prefix of the list:
 * *chunks of it), for the giver; NULL with none. */
static uint64_t *written_ids(ss__ps_row_moves *mv, const src_table *tt, size_t *chunks, size_t *n) {
    const uint64_t before = ss__emb_store_durable_before(mv->cfg.store);
    *chunks = *n = 0;
    while (*chunks < tt->nheld && tt->held[*chunks].since_ns < before)
        *n += tt->held[(*chunks)++].n;
    uint64_t *ids = *n ? malloc(*n * sizeof *ids) : NULL;
    for (size_t c = 0, at = 0; ids && c < *chunks; at += tt->held[c++].n)
        memcpy(ids + at, tt->held[c].ids, tt->held[c].n * sizeof *ids);
    if (*n && !ids)
        *chunks = *n = 0; /* said next time */
    return ids;
}

/* The giver knows of the first `chunks`; ids (k of them, taken) came. */
static void update_held(src_table *tt, size_t chunks, uint64_t *ids, size_t k, bool synced) {
    for (size_t c = 0; c < chunks; c++)
        free(tt->held[c].ids);
    if (chunks) /* (memmove of a NULL list, even of 0 bytes, is undefined) */
        memmove(tt->held, tt->held + chunks, (tt->nheld - chunks) * sizeof *tt->held);
    tt->nheld -= chunks;
    held *n = k ? realloc(tt->held, (tt->nheld + 1) * sizeof *n) : NULL;
    if (!n) { /* none came (or no memory: the giver keeps them stored) */
        free(ids);
        return;
    }
    tt->held = n;
    n[tt->nheld++] = (held){ids, k, synced ? 0 : ss__now_ns()};
}

/* One Handoff to s for table (ids: these, or NULL: any that move here),
 * the rows put here (sync: written synced at once, else by the store's
 * flusher); the held rows the store has written are said to the giver
 * with it. *got: rows received; *fresh: of them, rows this PS did not
 * hold yet (the rows moved); *said: rows said. mv->lock held. */
static ss_status take_from(ss__ps_row_moves *mv, source *s, src_table *tt, const uint64_t *ids,
                           size_t n, bool sync, size_t *got, size_t *fresh, size_t *said, char *why,
                           size_t whylen) {
    ss__emb_spec spec;
    ss_status st = ss__emb_store_table_spec(mv->cfg.store, tt->name, &spec);
    if (st != SS_OK) {
        snprintf(why, whylen, "table %s is not open here", tt->name);
        return st;
    }
    Shadowsync__V1__HandoffRequest req = SHADOWSYNC__V1__HANDOFF_REQUEST__INIT;
    req.table = tt->name;
    req.ids = (ProtobufCBinaryData){n * sizeof *ids, (uint8_t *)ids};
    req.to_shard = (uint32_t)mv->p.self;
    req.shards = mv->p.shards;
    /* Within the giver's reply bound, so that a reply of fewer rows than
     * asked for says the giver had no more. */
    const size_t rf = ss__emb_row_floats(&spec), fit = MAX_REPLY_BYTES / (rf * sizeof(float));
    req.max_rows = ids ? 0 : (uint32_t)(mv->cfg.batch_rows < fit ? mv->cfg.batch_rows : fit);
    req.epoch = mv->p.epoch;
    req.again = !ids && !tt->resumed;
    size_t chunks, ndone;
    uint64_t *done = written_ids(mv, tt, &chunks, &ndone);
    req.done_ids = (ProtobufCBinaryData){ndone * sizeof *done, (uint8_t *)done};
    ProtobufCMessage *r = NULL;
    const uint64_t deadline = ss__now_ns() + STALE_WAIT_MS * 1000000ull;
    for (;;) { /* the giver may read the new map up to a second after this PS */
        st = ss__rpc_call_message(s->ch, SS_EMB_M_HANDOFF, &req.base, mv->cfg.timeout_ms, false,
                                  &shadowsync__v1__handoff_reply__descriptor, &r, why, whylen);
        if (!ss__rpc_refused_for_epoch(st, why) || ss__now_ns() > deadline)
            break;
        ss__sleep_ns(100000000ull);
    }
    free(done);
    if (st != SS_OK) { /* which shard: the call's own words do not say */
        char call_why[256];
        snprintf(call_why, sizeof call_why, "%s", why);
        snprintf(why, whylen, "rows from old shard %s: %s", s->addr,
                 *call_why ? call_why : ss_strerror(st));
        return st;
    }
    const Shadowsync__V1__HandoffReply *x = (const Shadowsync__V1__HandoffReply *)r;
    size_t k = 0, put = 0;
    st = reply_rows(x, rf, &k);
    uint64_t *kept = st == SS_OK ? malloc(k * sizeof *kept + 1) : NULL;
    float *rows = st == SS_OK ? malloc(k * rf * sizeof *rows + 1) : NULL;
    if (st == SS_OK && (!kept || !rows))
        st = SS_ERR_NO_MEMORY;
    if (st == SS_OK && k) { /* aligned copies: bytes fields need not be */
        memcpy(kept, x->ids.data, k * sizeof *kept);
        memcpy(rows, x->rows.data, k * rf * sizeof *rows);
        st = ss__emb_store_put_absent(mv->cfg.store, tt->name, kept, k, rows, sync, &put);
    }
    if (st == SS_OK) {
        /* Starting over (again) goes on while replies are full: the rows
         * given before come first, a batch at a time, and a taker that
         * stopped asking after one batch left the rest of them given for
         * good (lost once it went on to serve those ids itself). */
        tt->resumed = tt->resumed || (!ids && k < req.max_rows);
        update_held(tt, chunks, kept, k, sync);
        kept = NULL;
        *got = k;
        *fresh = put;
        *said = ndone;
    } else if (!*why) {
        snprintf(why, whylen, "rows from %s: %s", s->addr, ss_strerror(st));
    }
    free(kept);
    free(rows);
    protobuf_c_message_free_unpacked(r, NULL);
    return st;
}

/* The giver's tables, opened here with the same spec. */
static ss_status list_tables(ss__ps_row_moves *mv, source *s, char *why, size_t whylen) {
    Shadowsync__V1__HandoffRequest req = SHADOWSYNC__V1__HANDOFF_REQUEST__INIT;
    req.table = "";
    req.to_shard = (uint32_t)mv->p.self;
    req.shards = mv->p.shards;
    req.epoch = mv->p.epoch;
    ProtobufCMessage *r = NULL;
    ss_status st =
        ss__rpc_call_message(s->ch, SS_EMB_M_HANDOFF, &req.base, mv->cfg.timeout_ms, false,
                             &shadowsync__v1__handoff_reply__descriptor, &r, why, whylen);
    if (st != SS_OK)
        return st;
    const Shadowsync__V1__HandoffReply *x = (const Shadowsync__V1__HandoffReply *)r;
    for (size_t i = 0; i < x->n_tables && st == SS_OK; i++) {
        ss__emb_spec spec, stored;
        if (!ss__emb_spec_from_pb(x->tables[i], &spec)) {
            st = SS_ERR_PARSE;
            break;
        }
        st = ss__emb_store_open_table(mv->cfg.store, &spec, &stored, why, whylen);
        if (st == SS_OK && !table_of(s, spec.name))
            st = SS_ERR_NO_MEMORY;
    }
    s->listed = st == SS_OK;
    protobuf_c_message_free_unpacked(r, NULL);
    return st;
}

/* What a background step did: how long the mover waits before the next. */
typedef enum step { STEP_MOVED, STEP_IDLE, STEP_FAILED } step;

/* One background step: the next batch from the first source and table
 * with rows left. STEP_IDLE when nothing moved (none left, or only rows
 * held here that the store has not written yet). mv->lock held. */
static step background_step(ss__ps_row_moves *mv) {
    char why[400] = "";
    for (size_t i = 0; i < mv->p.nsrc; i++) {
        source *s = &mv->p.src[i];
        ss_status st = s->listed ? SS_OK : list_tables(mv, s, why, sizeof why);
        for (size_t t = 0; st == SS_OK && t < s->ntables; t++) {
            src_table *tt = &s->tables[t];
            if (tt->drained)
                continue;
            size_t got = 0, fresh = 0, said = 0; /* a batch synced at once: one sync */
            if ((st = take_from(mv, s, tt, NULL, 0, true, &got, &fresh, &said, why, sizeof why)) !=
                SS_OK)
                break;
            ss__counter_add(mv->in_background, fresh);
            tt->drained = got == 0 && said == 0 && tt->nheld == 0;
            return got > 0 || said > 0 ? STEP_MOVED : STEP_IDLE; /* wait for the flusher */
        }
        if (st != SS_OK) {
            ss__counter_add(mv->failures, 1);
            SS_LOG_WARNF("ps", "event=row_move_failed from=%s status=%s why=\"%s\"", s->addr,
                         ss_status_name(st), why);
            return STEP_FAILED; /* tried again a second later */
        }
    }
    return STEP_IDLE;
}

static size_t tables_left(const plan *p) {
    size_t left = 0;
    for (size_t i = 0; i < p->nsrc; i++)
        left += !p->src[i].listed;
    for (size_t i = 0; i < p->nsrc; i++)
        for (size_t t = 0; t < p->src[i].ntables; t++)
            left += !p->src[i].tables[t].drained;
    return left;
}

/* One background step; returns how long to wait before the next. */
static uint64_t mover_step(void *arg) {
    ss__ps_row_moves *mv = arg;
    pthread_mutex_lock(&mv->lock);
    step last = STEP_IDLE;
    if (current_plan(mv) != SS_OK)
        last = STEP_FAILED; /* planned again a second later */
    else if (mv->p.self >= 0 && mv->p.nsrc)
        last = background_step(mv);
    const size_t left = mv->p.self >= 0 ? tables_left(&mv->p) : 0;
    atomic_store(&mv->done, left == 0);
    ss__gauge_set(mv->pending, (double)left);
    pthread_mutex_unlock(&mv->lock);
    return last == STEP_MOVED    ? (uint64_t)mv->cfg.pause_ms * 1000000ull
           : last == STEP_FAILED ? FAILED_PAUSE_NS
                                 : IDLE_POLL_NS;
}

/* Takes from one source the missing ids it held under the old map. */
static ss_status take_missing(ss__ps_row_moves *mv, source *s, const char *table,
                              const uint64_t *ids, size_t n, char *why, size_t whylen) {
    src_table *tt = table_of(s, table);
    if (!tt)
        return SS_ERR_NO_MEMORY;
    if (tt->drained || n == 0)
        return SS_OK;
    ss_status st = SS_OK;
    for (size_t at = 0; at < n && st == SS_OK;) {
        const size_t k = n - at < MAX_TAKE ? n - at : MAX_TAKE;
        size_t got = 0, fresh = 0, said = 0; /* written by the flusher: no sync waited for */
        st = take_from(mv, s, tt, ids + at, k, false, &got, &fresh, &said, why, whylen);
        ss__counter_add(mv->in_on_demand, fresh);
        at += k;
    }
    return st;
}

ss_status ss__ps_row_moves_ensure(void *ctx, const char *table, const uint64_t *ids, size_t n,
                                  char *why, size_t whylen) {
    ss__ps_row_moves *mv = ctx;
    if (!mv || (atomic_load(&mv->done) &&
                atomic_load(ss__ps_map_watch_epoch(mv->cfg.map)) == atomic_load(&mv->planned)))
        return SS_OK;
    if (!atomic_load(&mv->ready)) {
        snprintf(why, whylen, "this PS is starting: its rows may be moving; try again");
        return SS_ERR_STATE;
    }
    if (!may_need_rows(mv, table, ids, n))
        return SS_OK;
    bool *found = malloc(n * sizeof *found + 1);
    uint64_t *mine = malloc(n * sizeof *mine + 1);
    ss_status st = found && mine ? SS_OK : SS_ERR_NO_MEMORY;
    pthread_mutex_lock(&mv->lock);
    if (st == SS_OK && (st = current_plan(mv)) != SS_OK)
        snprintf(why, whylen, "%s", mv->plan_why);
    if (st == SS_OK && mv->p.nsrc && mv->p.self >= 0)
        st = ss__emb_store_holds(mv->cfg.store, table, ids, n, found);
    const uint32_t tid = ss__emb_table_id(table);
    for (size_t i = 0; st == SS_OK && mv->p.self >= 0 && i < mv->p.nsrc; i++) {
        source *s = &mv->p.src[i];
        size_t k = 0;
        for (size_t j = 0; j < n; j++) /* rows this PS owns now, held by s before */
            if (!found[j] && ss__emb_shard_of(tid, ids[j], mv->p.shards) == (uint32_t)mv->p.self &&
                mv->p.from[ss__emb_shard_of(tid, ids[j], mv->p.from_shards)] == s)
                mine[k++] = ids[j];
        st = take_missing(mv, s, table, mine, k, why, whylen);
    }
    pthread_mutex_unlock(&mv->lock);
    free(found);
    free(mine);
    return st;
}

/* ---- the giving side ---- */

typedef struct leaving {
    uint32_t tid, to, shards;
} leaving;

/* Whether a row goes to the taker under the new map. */
static bool leaves_for(void *ctx, uint64_t id) {
    const leaving *l = ctx;
    return ss__emb_shard_of(l->tid, id, l->shards) == l->to;
}

/* What the giving side needs of the map served now, read apart from the
 * taking side's lock: that side holds it while it calls another PS, whose
 * taking side may be calling this one (two PS taking from each other). */
typedef struct give_view {
    uint64_t epoch;
    uint32_t shards;
    int self;
    char taker[256]; /* the address of shard `to` (view_of's), "" when none */
} give_view;

static void view_of(ss__ps_row_moves *mv, uint32_t to, give_view *v) {
    ss__shard_map m;
    ss__ps_map_watch_get(mv->cfg.map, &m);
    char buf[SS_SHARD_MAP_PS_MAX];
    const char *a[MAX_SHARDS];
    v->epoch = m.epoch;
    v->shards = (uint32_t)ss__shard_map_split(m.ps, buf, sizeof buf, a, MAX_SHARDS);
    v->self = ss__shard_map_index(m.ps, mv->self);
    snprintf(v->taker, sizeof v->taker, "%s", to < v->shards ? a[to] : "");
}

/* The request against the map: the same epoch and size, a taker that is
 * not this PS. */
static bool request_fits(ss__ps_row_moves *mv, const Shadowsync__V1__HandoffRequest *m,
                         ss__rpc_reply *r, give_view *v) {
    view_of(mv, m->to_shard, v);
    if (m->epoch != v->epoch) {
        ss__rpc_reply_fail(r, SS_ERR_STATE,
                           "Handoff for " SS_RPC_STALE_EPOCH " %llu; this server serves epoch %llu",
                           (unsigned long long)m->epoch, (unsigned long long)v->epoch);
        return false;
    }
    /* A confirmation comes to the taker itself; anything else from one. */
    if (m->shards != v->shards || m->to_shard >= m->shards ||
        ((int)m->to_shard == v->self) != m->confirm) {
        ss__rpc_reply_fail(
            r, SS_ERR_INVALID_ARGUMENT,
            "Handoff to shard %u of %u: this server's map has %u shards and it is shard %d",
            m->to_shard, m->shards, v->shards, v->self);
        return false;
    }
    return true;
}

static void reply_tables(ss__ps_row_moves *mv, ss__rpc_reply *r) {
    ss__emb_spec specs[64];
    const size_t n = ss__emb_store_tables(mv->cfg.store, specs, 64);
    Shadowsync__V1__TableSpec ts[64], *tp[64];
    for (size_t i = 0; i < n; i++) {
        ss__emb_spec_to_pb(&specs[i], &ts[i]);
        tp[i] = &ts[i];
    }
    Shadowsync__V1__HandoffReply out = SHADOWSYNC__V1__HANDOFF_REPLY__INIT;
    out.n_tables = n;
    out.tables = tp;
    ss__rpc_reply_pack(&out.base, r);
}

/* Ids of a bytes field, aligned, each leaving for the taker; NULL with
 * the refusal in r otherwise. */
static uint64_t *ids_for(const ProtobufCBinaryData *b, const leaving *l, size_t *n,
                         ss__rpc_reply *r) {
    *n = b->len / sizeof(uint64_t);
    if (b->len % sizeof(uint64_t) || *n > MAX_TAKE) {
        ss__rpc_reply_fail(r, SS_ERR_INVALID_ARGUMENT, "ids: whole uint64s, at most %d", MAX_TAKE);
        return NULL;
    }
    uint64_t *ids = malloc(*n * sizeof *ids + 1);
    if (!ids) {
        ss__rpc_reply_fail(r, SS_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    if (*n)
        memcpy(ids, b->data, *n * sizeof *ids);
    for (size_t i = 0; i < *n; i++)
        if (!leaves_for((void *)l, ids[i])) {
            ss__rpc_reply_fail(r, SS_ERR_INVALID_ARGUMENT,
                               "row %llu does not move to shard %u of %u",
                               (unsigned long long)ids[i], l->to, l->shards);
            free(ids);
            return NULL;
        }
    return ids;
}

/* The channel back to the taker at addr (made on first use). */
static ss__rpc_channel *channel_back(ss__ps_row_moves *mv, const char *addr) {
    ss__rpc_channel *ch = NULL;
    pthread_mutex_lock(&mv->give_lock);
    for (size_t i = 0; i < mv->nback && !ch; i++)
        if (!strcmp(mv->back[i].addr, addr))
            ch = mv->back[i].ch;
    if (!ch && mv->nback < MAX_SHARDS && peer_channel(mv, addr, &ch, NULL, 0) == SS_OK) {
        snprintf(mv->back[mv->nback].addr, sizeof mv->back[0].addr, "%s", addr);
        mv->back[mv->nback++].ch = ch;
    }
    pthread_mutex_unlock(&mv->give_lock);
    return ch;
}

/* Of the rows the caller says it holds (done, *n of them), those the
 * taker the map names says it holds, asked on a channel of this PS's own
 * to the map's address (the caller's word alone is not enough: anyone
 * who can call could say it). *n: how many; on any failure none (the rows
 * stay given, given again to the real taker). */
static void confirmed_by_taker(ss__ps_row_moves *mv, const Shadowsync__V1__HandoffRequest *m,
                               const give_view *v, uint64_t *done, size_t *n) {
    ss__rpc_channel *ch = *n && v->taker[0] ? channel_back(mv, v->taker) : NULL;
    Shadowsync__V1__HandoffRequest q = SHADOWSYNC__V1__HANDOFF_REQUEST__INIT;
    q.table = m->table;
    q.ids = (ProtobufCBinaryData){*n * sizeof *done, (uint8_t *)done};
    q.to_shard = m->to_shard;
    q.shards = m->shards;
    q.epoch = m->epoch;
    q.confirm = true;
    ProtobufCMessage *r = NULL;
    char why[300] = "";
    ss_status st =
        ch ? ss__rpc_call_message(ch, SS_EMB_M_HANDOFF, &q.base, mv->cfg.timeout_ms, false,
                                  &shadowsync__v1__handoff_reply__descriptor, &r, why, sizeof why)
           : SS_ERR_IO;
    const Shadowsync__V1__HandoffReply *x = (const Shadowsync__V1__HandoffReply *)r;
    size_t k = 0;
    if (st == SS_OK && x->ids.len % sizeof(uint64_t) == 0) {
        /* Only ids that were asked about: the reply is a subset of done,
         * in its order. */
        const size_t got = x->ids.len / sizeof(uint64_t);
        for (size_t i = 0, j = 0; i < *n && j < got; i++) {
            uint64_t id;
            memcpy(&id, x->ids.data + j * sizeof id, sizeof id);
            if (id == done[i]) {
                done[k++] = id;
                j++;
            }
        }
    } else if (*n) {
        SS_LOG_WARNF("ps",
                     "event=handoff_unconfirmed table=%s to_shard=%u taker=%s rows=%zu "
                     "why=\"%s\" note=\"the rows stay given: the taker the map names gets them "
                     "again\"",
                     m->table, m->to_shard, v->taker[0] ? v->taker : "(none)", *n,
                     st == SS_OK ? "a reply that is not ids"
                     : *why      ? why
                                 : ss_strerror(st));
    }
    *n = k;
    protobuf_c_message_free_unpacked(r, NULL);
}

/* The taker's side of a confirmation: which of the ids (rows that move
 * to it) it holds written (a copy in its database): the giver forgets
 * those next. */
static void confirm_held(ss__ps_row_moves *mv, const Shadowsync__V1__HandoffRequest *m,
                         const ss__emb_spec *spec, ss__rpc_reply *r) {
    const leaving l = {ss__emb_table_id(spec->name), m->to_shard, m->shards};
    size_t n = 0;
    uint64_t *ids = ids_for(&m->ids, &l, &n, r);
    if (!ids)
        return; /* refused, r says why */
    bool *found = malloc(n * sizeof *found + 1);
    ss_status st = found ? SS_OK : SS_ERR_NO_MEMORY;
    if (st == SS_OK)
        st = ss__emb_store_holds_written(mv->cfg.store, m->table, ids, n, found);
    size_t k = 0;
    for (size_t i = 0; st == SS_OK && i < n; i++)
        if (found[i])
            ids[k++] = ids[i];
    if (st == SS_OK) {
        Shadowsync__V1__HandoffReply out = SHADOWSYNC__V1__HANDOFF_REPLY__INIT;
        out.ids = (ProtobufCBinaryData){k * sizeof *ids, (uint8_t *)ids};
        ss__rpc_reply_pack(&out.base, r);
    } else {
        ss__rpc_reply_fail(r, st, "confirming %zu rows of %s: %s", n, m->table, ss_strerror(st));
    }
    free(ids);
    free(found);
}

/* Forgets what the taker holds (said by the taker the map names), then
 * takes the rows asked for. */
static void give(ss__ps_row_moves *mv, const Shadowsync__V1__HandoffRequest *m,
                 const ss__emb_spec *spec, const give_view *v, ss__rpc_reply *r) {
    const leaving l = {ss__emb_table_id(spec->name), m->to_shard, m->shards};
    const size_t rf = ss__emb_row_floats(spec);
    size_t ndone = 0, nids = 0, taken = 0;
    uint64_t *done = ids_for(&m->done_ids, &l, &ndone, r);
    uint64_t *ids = done ? ids_for(&m->ids, &l, &nids, r) : NULL;
    size_t max = m->ids.len ? nids : m->max_rows;
    if (ids && !m->ids.len && (max == 0 || max > MAX_TAKE)) {
        ss__rpc_reply_fail(r, SS_ERR_INVALID_ARGUMENT, "max_rows %zu: 1 .. %d", max, MAX_TAKE);
        max = 0;
    }
    if (ids && max && (uint64_t)max * rf * sizeof(float) > MAX_REPLY_BYTES)
        max = (size_t)(MAX_REPLY_BYTES / (rf * sizeof(float)));
    uint64_t *out_ids = max ? malloc(max * sizeof *out_ids) : NULL;
    float *out_rows = max ? malloc(max * rf * sizeof *out_rows) : NULL;
    ss_status st = done && ids && (!max || (out_ids && out_rows)) ? SS_OK : SS_ERR_NO_MEMORY;
    if (st == SS_OK && ndone)
        confirmed_by_taker(mv, m, v, done, &ndone);
    if (st == SS_OK && ndone)
        st = ss__emb_store_forget(mv->cfg.store, spec->name, m->epoch, done, ndone);
    if (st == SS_OK && max)
        st = ss__emb_store_take(mv->cfg.store, spec->name, m->epoch, m->ids.len ? ids : NULL, nids,
                                m->again, leaves_for, (void *)&l, max, out_ids, out_rows, &taken);
    if (st == SS_OK) {
        Shadowsync__V1__HandoffReply out = SHADOWSYNC__V1__HANDOFF_REPLY__INIT;
        out.ids = (ProtobufCBinaryData){taken * sizeof *out_ids, (uint8_t *)out_ids};
        out.rows = (ProtobufCBinaryData){taken * rf * sizeof(float), (uint8_t *)out_rows};
        ss__rpc_reply_pack(&out.base, r);
        ss__counter_add(mv->out, taken);
    } else if (r->status == SS_OK) {
        ss__rpc_reply_fail(r, st, "taking rows of %s: %s", spec->name, ss_strerror(st));
    }
    free(done);
    free(ids);
    free(out_ids);
    free(out_rows);
}

static void serve_handoff(void *ctx, void *request, ss__rpc_reply *reply) {
    ss__ps_row_moves *mv = ctx;
    const Shadowsync__V1__HandoffRequest *m = request;
    ss__emb_spec spec;
    give_view v;
    if (!atomic_load(&mv->ready))
        ss__rpc_reply_fail(reply, SS_ERR_STATE, "this PS is starting; try again");
    else if (!request_fits(mv, m, reply, &v))
        ;
    else if (!m->table || !*m->table)
        reply_tables(mv, reply);
    else if (ss__emb_store_table_spec(mv->cfg.store, m->table, &spec) != SS_OK)
        ss__rpc_reply_fail(reply, SS_ERR_NOT_FOUND, "unknown table %s", m->table);
    else if (m->confirm)
        confirm_held(mv, m, &spec, reply);
    else
        give(mv, m, &spec, &v, reply);
}

static const ss__rpc_request_type handoff_request = {&shadowsync__v1__handoff_request__descriptor,
                                                     serve_handoff, NULL, 0, 0};

void ss__ps_row_moves_handoff(void *ctx, const uint8_t *req, size_t len, ss__rpc_reply *reply) {
    ss__rpc_serve_request(&handoff_request, ctx, req, len, reply);
}

/* ---- life ---- */

ss_status ss__ps_row_moves_create(const ss__ps_row_moves_config *cfg, ss__ps_row_moves **out,
                                  char *why, size_t whylen) {
    if (!cfg || !cfg->store || !cfg->map || !cfg->batch_rows || cfg->batch_rows > MAX_TAKE)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                        "row moves need a store, a map and 1 to %d rows a batch", MAX_TAKE);
    ss__ps_row_moves *mv = calloc(1, sizeof *mv);
    if (!mv)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for row moves");
    mv->cfg = *cfg;
    if (!mv->cfg.timeout_ms)
        mv->cfg.timeout_ms = 10000;
    pthread_mutex_init(&mv->lock, NULL);
    pthread_mutex_init(&mv->give_lock, NULL);
    ss__metrics *m = cfg->metrics;
    const char *bg[] = {"how", "background", NULL}, *od[] = {"how", "on_demand", NULL};
    const char *in_help = "Embedding rows taken from their old shard after a shard map change.";
    ss_status st = ss__metrics_counter(m, "shadowsync_emb_rows_moved_in_total", in_help, bg,
                                       &mv->in_background);
    if (st == SS_OK)
        st = ss__metrics_counter(m, "shadowsync_emb_rows_moved_in_total", in_help, od,
                                 &mv->in_on_demand);
    if (st == SS_OK)
        st = ss__metrics_counter(m, "shadowsync_emb_rows_moved_out_total",
                                 "Embedding rows given to their new shard.", NULL, &mv->out);
    if (st == SS_OK)
        st = ss__metrics_counter(m, "shadowsync_emb_row_move_failures_total",
                                 "Background row moves that failed (tried again).", NULL,
                                 &mv->failures);
    if (st == SS_OK)
        st = ss__metrics_gauge(m, "shadowsync_emb_row_moves_pending",
                               "Old shards and tables this PS still takes rows from (0: none).",
                               NULL, &mv->pending);
    if (st != SS_OK) {
        ss__ps_row_moves_destroy(mv);
        return ss__fail(why, whylen, st, "cannot register the row moves' series");
    }
    *out = mv;
    return SS_OK;
}

ss_status ss__ps_row_moves_run(ss__ps_row_moves *mv, const char *self) {
    pthread_mutex_lock(&mv->lock);
    snprintf(mv->self, sizeof mv->self, "%s", self);
    mv->p.epoch = 0; /* planned again with this PS's place */
    replan(mv);      /* a plan that cannot be made yet is made again by the mover */
    pthread_mutex_unlock(&mv->lock);
    atomic_store(&mv->ready, true);
    return ss__ticker_start_paced(1, mover_step, mv, &mv->mover, NULL,
                                  0); /* the first step at once */
}

void ss__ps_row_moves_destroy(ss__ps_row_moves *mv) {
    if (!mv)
        return;
    ss__ticker_stop(mv->mover);
    free_sources(&mv->p);
    for (size_t i = 0; i < mv->nback; i++)
        ss__rpc_channel_destroy(mv->back[i].ch);
    pthread_mutex_destroy(&mv->give_lock);
    pthread_mutex_destroy(&mv->lock);
    free(mv);
}
