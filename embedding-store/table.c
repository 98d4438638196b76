/* The in-memory table: 64 stripes, each a linear-probing hash of
 * (id -> row) under its own mutex. A stripe's rows are packed in slabs of
 * about 1 MiB from the table's row arena (row_arena_internal.h), a row
 * being its floats only: its version and flags live in its hash slot.
 * So a row of dim 64 takes 256 bytes and 4 cache lines, where one
 * allocation per row took 320 (its 8-byte header, then jemalloc's size
 * class) and 5 or 6 lines. See emb_table.h for the contract. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "common/strbuf.h"
#include "embedding-store/emb_table.h"
#include "embedding-store/row_arena_internal.h"
#include "embedding-store/table_internal.h"

static ss_status grow(stripe *s) {
    size_t ncap = s->cap ? s->cap * 2 : MIN_SLOTS;
    slot *old = s->slots, *ns = calloc(ncap, sizeof *ns);
    if (!ns)
        return SS_ERR_NO_MEMORY;
    size_t ocap = s->cap;
    /* Atomic stores: for_rows reads both without the lock to prefetch. */
    __atomic_store_n(&s->slots, ns, __ATOMIC_RELAXED);
    __atomic_store_n(&s->cap, ncap, __ATOMIC_RELAXED);
    for (size_t i = 0; i < ocap; i++) {
        if (!old[i].row)
            continue;
        size_t j = home_of(s, old[i].id);
        while (ns[j].row)
            j = (j + 1) & (ncap - 1);
        ns[j] = old[i];
    }
    free(old);
    return SS_OK;
}

/* Backward-shift deletion keeps probe chains intact without tombstones. */
void ss__emb_stripe_remove_at(stripe *s, size_t i) {
    const size_t mask = s->cap - 1;
    for (;;) {
        s->slots[i].row = 0;
        size_t j = i;
        for (;;) {
            j = (j + 1) & mask;
            if (!s->slots[j].row)
                goto done;
            size_t k = home_of(s, s->slots[j].id);
            bool stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
            if (!stays) {
                s->slots[i] = s->slots[j];
                i = j;
                break;
            }
        }
    }
done:
    s->count--;
}

static int cmp_id(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Keeps the queued ids of rows still here and dirty, once each. A deleted
 * row's id stays queued until the flusher pops it; a table with no
 * flusher (a PS without --emb-db) or rows deleted faster than it flushes
 * (an online table's expiry and row budget) would grow the queue by one id
 * for every row ever made: 0.6 MB per million training rows. */
static void compact_queue(stripe *s) {
    size_t k = 0;
    for (size_t i = 0; i < s->nqueue; i++) {
        const slot *sl = find(s, s->queue[i]);
        if (sl && (sl->meta & META_DIRTY))
            s->queue[k++] = s->queue[i];
    }
    qsort(s->queue, k, sizeof *s->queue, cmp_id); /* an id deleted and made again: twice */
    size_t u = 0;
    for (size_t i = 0; i < k; i++)
        if (u == 0 || s->queue[u - 1] != s->queue[i])
            s->queue[u++] = s->queue[i];
    s->nqueue = u;
}

ss_status ss__emb_queue_push(stripe *s, uint64_t id) {
    if (s->nqueue == s->queue_cap && s->nqueue > 2 * s->dirty + 64)
        compact_queue(s); /* mostly stale ids: room without growing */
    if (!SS_GROW(s->queue, s->queue_cap, s->nqueue, 64))
        return SS_ERR_NO_MEMORY;
    s->queue[s->nqueue++] = id;
    return SS_OK;
}

/* A row for a new slot: a freed one, else the next of the last slab, else
 * a new slab. Returns 1 + its index, 0 when out of memory. */
static uint32_t row_alloc(ss__emb_table *t, stripe *s) {
    if (s->free_head) {
        const uint32_t r = s->free_head;
        memcpy(&s->free_head, row_at(t, s, r), sizeof s->free_head);
        return r;
    }
    if (s->used == UINT32_MAX)
        return 0;
    if ((s->used >> t->slab_shift) == s->nslabs) {
        if (s->nslabs == s->slabs_cap) {
            uint32_t ncap = s->slabs_cap ? 2 * s->slabs_cap : 4;
            float **ns = realloc(s->slabs, ncap * sizeof *ns);
            if (!ns)
                return 0;
            s->slabs = ns;
            s->slabs_cap = ncap;
        }
        float *slab = ss__row_arena_alloc(t->arena, (t->stride * sizeof(float)) << t->slab_shift);
        if (!slab)
            return 0;
        s->slabs[s->nslabs++] = slab;
    }
    return ++s->used;
}

void ss__emb_row_free(ss__emb_table *t, stripe *s, const slot *sl) {
    memcpy(row_of(t, s, sl), &s->free_head, sizeof s->free_head);
    s->free_head = sl->row;
}

void ss__emb_table_mark_updated(ss__emb_table *t, stripe *s, slot *sl) {
    sl->meta = ((sl->meta & ~META_STAMP_MASK) + META_VERSION + stamp_now(t)) | META_CHANGED;
    if (!(sl->meta & META_DIRTY)) {
        sl->meta |= META_DIRTY;
        s->dirty++;
        /* Out of memory for the queue: the row stays dirty (never evicted)
         * but is written only by ss__emb_table_settle's requeue; rare. */
        if (!t->no_dirty_queue)
            (void)ss__emb_queue_push(s, sl->id);
    }
}

void ss__emb_table_skip_dirty_queue(ss__emb_table *t) {
    t->no_dirty_queue = true;
}

ss_status ss__emb_table_create(const ss__emb_spec *spec, ss__emb_loader loader, void *loader_ctx,
                               ss__emb_table **out, char *why, size_t whylen) {
    if (!out || !loader || ss__emb_spec_check(spec, NULL, 0) != SS_OK)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                        "an embedding table needs a loader and a valid spec");
    ss__emb_table *t = aligned_alloc(64, sizeof *t);
    if (!t)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for table %s", spec->name);
    memset(t, 0, sizeof *t);
    t->spec = *spec;
    t->tid = ss__emb_table_id(spec->name);
    t->row_floats = ss__emb_row_floats(spec);
    t->stride = (t->row_floats + 3) & ~(size_t)3;
    while (t->slab_shift < 16 && ((t->stride * sizeof(float)) << (t->slab_shift + 1)) <= SLAB_BYTES)
        t->slab_shift++;
    t->loader = loader;
    t->loader_ctx = loader_ctx;
    if (!(t->arena = ss__row_arena_create())) {
        free(t);
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for table %s's rows", spec->name);
    }
    for (int i = 0; i < STRIPES; i++)
        pthread_mutex_init(&t->s[i].lock, NULL);
    pthread_mutex_init(&t->tomb_lock, NULL);
    *out = t;
    return SS_OK;
}

void ss__emb_table_destroy(ss__emb_table *t) {
    if (!t)
        return;
    for (int i = 0; i < STRIPES; i++) {
        if (!ss__row_arena_frees_all())
            for (uint32_t j = 0; j < t->s[i].nslabs; j++)
                ss__row_arena_free(t->arena, t->s[i].slabs[j]);
        free(t->s[i].slabs);
        free(t->s[i].slots);
        free(t->s[i].queue);
        pthread_mutex_destroy(&t->s[i].lock);
    }
    ss__row_arena_destroy(t->arena); /* with a jemalloc arena: every slab at once */
    ss__emb_admission_destroy(t->admission);
    pthread_mutex_destroy(&t->tomb_lock);
    free(t->tombs);
    free(t);
}

const ss__emb_spec *ss__emb_table_spec(const ss__emb_table *t) {
    return &t->spec;
}

/* An operation on one resident row, under its stripe's lock. */
typedef void (*row_op)(ss__emb_table *t, stripe *s, slot *sl, size_t i, void *ctx);
/* What for_rows does with a row that is not resident: leave it (PEEK),
 * load it and insert it (WRITE), load it and insert it only when the
 * loader found it stored, else hand the loaded row to the loose op
 * without keeping it (READ), or as WRITE but a row stored nowhere is
 * inserted only when admission lets it in, else handed to the loose op
 * (UPDATE: an update of a new id), or insert it without asking the
 * loader, its floats for op to fill (PUT: a whole row replaced). */
typedef enum { ROWS_PEEK, ROWS_READ, ROWS_WRITE, ROWS_UPDATE, ROWS_PUT } rows_mode;
/* READ's op for a row not kept: its full loaded values. */
typedef void (*loose_op)(ss__emb_table *t, const float *full, size_t i, void *ctx);

static ss_status insert_loaded(ss__emb_table *t, stripe *s, uint64_t id, const float *full,
                               slot **out) {
    if ((s->count + 1) * 10 > s->cap * 7) {
        ss_status st = grow(s);
        if (st != SS_OK)
            return st;
    }
    const uint32_t r = row_alloc(t, s);
    if (!r)
        return SS_ERR_NO_MEMORY;
    size_t j = home_of(s, id);
    while (s->slots[j].row)
        j = (j + 1) & (s->cap - 1);
    s->slots[j] = (slot){.id = id, .row = r, .meta = META_REF | stamp_now(t)};
    memcpy(row_of(t, s, &s->slots[j]), full, t->row_floats * sizeof(float));
    s->count++;
    atomic_fetch_add(&t->resident, 1);
    *out = &s->slots[j];
    return SS_OK;
}

/* Admission of a new id (emb_table.h, bounds): counted; true once it
 * has been pushed admit_count times. */
static bool admit(ss__emb_table *t, uint64_t id) {
    if (!t->admission)
        return true;
    if (!ss__emb_admission_count(t->admission, t->tid, id)) {
        atomic_fetch_add(&t->not_admitted, 1);
        return false;
    }
    atomic_fetch_add(&t->admitted, 1);
    return true;
}

/* Asks for the cache lines of bytes at p. Always inline and fed an
 * address its caller computed: with a helper that computed the row's
 * address itself, gcc 12 -O3 emitted no row prefetch at all (the call
 * was gone from for_rows in objdump), and lookups ran at half speed. */
static inline __attribute__((always_inline)) void prefetch_lines(const void *p, size_t bytes) {
    for (size_t off = 0; off < bytes; off += 64)
        __builtin_prefetch((const char *)p + off);
    __builtin_prefetch((const char *)p + bytes - 1);
}

/* Finds the slots of the ids order[lo..hi) of stripe s (locked) into
 * found[lo..hi) and prefetches each found row. */
static inline __attribute__((always_inline)) void
find_prefetching(const ss__emb_table *t, stripe *s, const uint64_t *ids, const uint64_t *hs,
                 const size_t *order, size_t lo, size_t hi, slot **found) {
    for (size_t k = lo; k < hi; k++) {
        found[k] = find_hashed(s, ids[order[k]], hs[order[k]]);
        if (found[k])
            prefetch_lines(row_of(t, s, found[k]), t->row_floats * sizeof(float));
    }
}

/* Stripe b, locked, when the batch has ids in it (start[b] < start[b + 1],
 * for_rows' counting sort); NULL otherwise. */
static stripe *lock_if_used(ss__emb_table *t, const size_t *start, int b) {
    if (start[b] == start[b + 1])
        return NULL;
    stripe *s = &t->s[b];
    pthread_mutex_lock(&s->lock);
    return s;
}

/* Asks for the home slot of hash h, with or without its stripe's lock:
 * without it the array may be one that grow() is replacing, which a
 * prefetch does no harm to; the pointer and size are read atomically. */
static inline void prefetch_home(const ss__emb_table *t, uint64_t h) {
    const stripe *s = &t->s[h & (STRIPES - 1)];
    const slot *slots = __atomic_load_n(&s->slots, __ATOMIC_RELAXED);
    const size_t cap = __atomic_load_n(&s->cap, __ATOMIC_RELAXED);
    if (cap)
        __builtin_prefetch(&slots[(h >> STRIPE_BITS) & (cap - 1)]);
}

/* Below this many ids, for_rows takes two passes (see there). Measured
 * with shadowsync-bench-emb, 1M rows of dim 64: two passes win at 32-256
 * ids (14 against 8.5M rows/s at 32), tie at 1,024 and lose at 2,048
 * (20 against 28M), where one pass's prefetched rows no longer stay in
 * cache until the op runs. */
#define SMALL_BATCH (16 * STRIPES)

/* Runs op on every id's row; rows not resident are loaded (when load) and
 * inserted, then op runs on them under the same lock. The ids are visited
 * grouped by stripe (a counting sort), so each stripe's lock is taken once
 * per call rather than once per id. The next stripe's slots are
 * prefetched while a stripe is worked on; within a stripe, every slot is
 * found and its row prefetched, and op runs after: the cache misses
 * overlap instead of being paid one after the other. */
static ss_status load_missing(ss__emb_table *t, const uint64_t *ids, const size_t *missing,
                              size_t nm, rows_mode mode, row_op op, loose_op lop, void *ctx);

/* How many rows ahead of op the caller's row is asked for (for_rows_io).
 * The caller's rows (a push's gradients, a lookup's results) are visited
 * in stripe order, scattered over the batch, so no hardware prefetcher
 * follows them. Asked for 2-8 rows ahead, pushes ran 5-8% faster
 * (scratch driver, 1M rows of dim 64, five alternating pairs), lookups
 * 0.66 of the gather against 0.64 (mean of eight alternating runs of
 * shadowsync-bench-emb); 16 ahead, no faster; with the rows' own
 * prefetches (find_prefetching), no faster either. */
#define IO_AHEAD 4

/* for_rows, op reading or writing io + i * dim floats for id i (NULL:
 * none). */
static ss_status for_rows_io(ss__emb_table *t, const uint64_t *ids, size_t n, rows_mode mode,
                             row_op op, loose_op lop, void *ctx, const float *io) {
    if (n == 0)
        return SS_OK; /* nothing to do (and malloc(0) may be NULL) */
    /* One block: hashes, the stripe order, the missing, the found slots. */
    uint64_t *hs = malloc(n * (sizeof(uint64_t) + 2 * sizeof(size_t) + sizeof(slot *)));
    if (!hs)
        return SS_ERR_NO_MEMORY;
    size_t *order = (size_t *)(hs + n), *missing = order + n, nm = 0;
    slot **found = (slot **)(missing + n);
    size_t start[STRIPES + 1] = {0}, fill[STRIPES];
    for (size_t i = 0; i < n; i++) {
        hs[i] = ss__mix64(ids[i]);
        start[(hs[i] & (STRIPES - 1)) + 1]++;
    }
    for (int b = 0; b < STRIPES; b++)
        start[b + 1] += start[b];
    memcpy(fill, start, sizeof fill);
    for (size_t i = 0; i < n; i++)
        order[fill[hs[i] & (STRIPES - 1)]++] = i;
    /* A small batch's home slots are all asked for before any lock is
     * taken, so that the slot misses of all stripes overlap. A big one's
     * are asked for a stripe ahead (below): all 4,096 at once stalled on
     * the line-fill buffers and were out of cache again by their stripe's
     * turn: 16.3-19.3M rows/s, against 20.1-22.3M so (lookups alone,
     * batches of 4,096, alternating runs; 32 and 256 ids: the same). */
    const bool big = n >= SMALL_BATCH;
    for (size_t i = 0; i < n && !big; i++)
        prefetch_home(t, hs[i]);
    /* A small batch has a few ids per stripe, too few for the rows'
     * misses of one stripe to overlap: a first pass over the stripes
     * prefetches every row, and the pass below finds them in cache (it
     * finds each slot again: the lock was let go in between). */
    if (!big)
        for (int b = 0; b < STRIPES; b++) {
            stripe *s = lock_if_used(t, start, b);
            if (s) {
                find_prefetching(t, s, ids, hs, order, start[b], start[b + 1], found);
                pthread_mutex_unlock(&s->lock);
            }
        }
    for (size_t k = 0; big && k < start[1]; k++)
        prefetch_home(t, hs[order[k]]);
    for (int b = 0; b < STRIPES; b++) {
        for (size_t k = start[b + 1]; big && b + 1 < STRIPES && k < start[b + 2]; k++)
            prefetch_home(t, hs[order[k]]); /* the next stripe's slots */
        stripe *s = lock_if_used(t, start, b);
        if (!s)
            continue;
        const size_t lo = start[b], hi = start[b + 1];
        find_prefetching(t, s, ids, hs, order, lo, hi, found);
        for (size_t k = lo; k < hi; k++) {
            if (io && k + IO_AHEAD < hi)
                prefetch_lines(io + order[k + IO_AHEAD] * t->spec.dim, t->spec.dim * sizeof(float));
            if (found[k]) {
                /* Set only when clear: a lookup then leaves its slot's line
                 * clean, nothing to write back (lookups alone, 1M rows of
                 * dim 64: +3% in nine alternating pairs, scratch driver). */
                if (!(found[k]->meta & META_REF))
                    found[k]->meta |= META_REF;
                op(t, s, found[k], order[k], ctx);
            } else if (mode != ROWS_PEEK) {
                missing[nm++] = order[k];
            }
        }
        pthread_mutex_unlock(&s->lock);
    }
    ss_status st = nm ? load_missing(t, ids, missing, nm, mode, op, lop, ctx) : SS_OK;
    free(hs);
    return st;
}

static ss_status for_rows(ss__emb_table *t, const uint64_t *ids, size_t n, rows_mode mode,
                          row_op op, loose_op lop, void *ctx) {
    return for_rows_io(t, ids, n, mode, op, lop, ctx, NULL);
}

/* The second half of for_rows: the nm rows missing[] index, loaded in one
 * loader call, then inserted (or, READ, handed out loose) each under its
 * stripe's lock. */
static ss_status load_missing(ss__emb_table *t, const uint64_t *ids, const size_t *missing,
                              size_t nm, rows_mode mode, row_op op, loose_op lop, void *ctx) {
    uint64_t *mids = malloc(nm * sizeof *mids);
    float *rows = malloc(nm * t->row_floats * sizeof(float));
    bool *stored = malloc(nm * sizeof *stored);
    ss_status st = (mids && rows && stored) ? SS_OK : SS_ERR_NO_MEMORY;
    for (size_t k = 0; st == SS_OK && k < nm; k++) {
        mids[k] = ids[missing[k]];
        stored[k] = true;
    }
    if (st == SS_OK && mode == ROWS_PUT)
        memset(rows, 0, nm * t->row_floats * sizeof(float)); /* op writes every float */
    else if (st == SS_OK)
        st = t->loader(t->loader_ctx, mids, nm, rows, stored);
    if (st == SS_OK)
        atomic_fetch_add(&t->loads, nm);
    for (size_t k = 0; st == SS_OK && k < nm; k++) {
        const float *full = rows + k * t->row_floats;
        stripe *s = stripe_of(t, mids[k]);
        pthread_mutex_lock(&s->lock);
        slot *sl = find(s, mids[k]); /* another caller may have loaded it meanwhile */
        if (!sl && !stored[k] && mode == ROWS_UPDATE && !admit(t, mids[k]))
            lop(t, full, missing[k], ctx);
        else if (!sl && mode == ROWS_READ && !stored[k])
            lop(t, full, missing[k], ctx);
        else if (!sl)
            st = insert_loaded(t, s, mids[k], full, &sl);
        if (sl)
            op(t, s, sl, missing[k], ctx);
        pthread_mutex_unlock(&s->lock);
    }
    free(mids);
    free(rows);
    free(stored);
    return st;
}

typedef struct io_ctx {
    const float *in;
    float *out;
    bool *found;
    float alpha;
    const ss__emb_delta_encoder *enc; /* elastic: NULL (plain floats in out) or encoded */
    uint8_t *enc_out;                 /* elastic, encoded: enc->row_bytes a row */
    size_t not_held; /* elastic, encoded: rows whose delta the encoder could not hold */
    size_t refused;  /* updates: rows whose result would not have been finite (left alone) */
} io_ctx;

static void op_copy_data(ss__emb_table *t, stripe *s, slot *sl, size_t i, void *ctx) {
    io_ctx *c = ctx;
    memcpy(c->out + i * t->spec.dim, row_of(t, s, sl), t->spec.dim * sizeof(float));
    if (c->found)
        c->found[i] = true;
}

static void loose_copy_data(ss__emb_table *t, const float *full, size_t i, void *ctx) {
    io_ctx *c = ctx;
    memcpy(c->out + i * t->spec.dim, full, t->spec.dim * sizeof(float));
}

static void op_copy_full(ss__emb_table *t, stripe *s, slot *sl, size_t i, void *ctx) {
    io_ctx *c = ctx;
    memcpy(c->out + i * t->row_floats, row_of(t, s, sl), t->row_floats * sizeof(float));
    c->found[i] = true;
}

static void op_gradient(ss__emb_table *t, stripe *s, slot *sl, size_t i, void *ctx) {
    io_ctx *c = ctx;
    if (ss__emb_apply_gradient(&t->spec, row_of(t, s, sl), c->in + i * t->spec.dim))
        ss__emb_table_mark_updated(t, s, sl);
    else
        c->refused++;
}

static void op_elastic(ss__emb_table *t, stripe *s, slot *sl, size_t i, void *ctx) {
    io_ctx *c = ctx;
    const size_t dim = t->spec.dim;
    if (!c->enc) {
        if (!ss__emb_elastic(row_of(t, s, sl), c->in + i * dim, c->alpha, c->out + i * dim, dim))
            c->refused++;
    } else if (!ss__emb_elastic_encoded(row_of(t, s, sl), c->in + i * dim, c->alpha, c->enc,
                                        c->enc_out + i * c->enc->row_bytes, dim))
        c->not_held++;
    ss__emb_table_mark_updated(t, s, sl);
}

/* An update of an id admission kept out: nothing stored, a zero delta
 * (the trainer's row stays its own). */
static void loose_zero_delta(ss__emb_table *t, const float *full, size_t i, void *ctx) {
    (void)full;
    io_ctx *c = ctx;
    const size_t dim = t->spec.dim;
    if (!c->enc) {
        memset(c->out + i * dim, 0, dim * sizeof(float));
        return;
    }
    float *zero = calloc(dim, sizeof *zero);
    if (!zero || !c->enc->fn(c->enc->ctx, zero, dim, c->enc_out + i * c->enc->row_bytes))
        memset(c->enc_out + i * c->enc->row_bytes, 0, c->enc->row_bytes);
    free(zero);
}

static void loose_none(ss__emb_table *t, const float *full, size_t i, void *ctx) {
    (void)t, (void)full, (void)i, (void)ctx;
}

ss_status ss__emb_table_for_rows(ss__emb_table *t, const uint64_t *ids, size_t n, row_op op,
                                 void *ctx) {
    return for_rows(t, ids, n, ROWS_PUT, op, NULL, ctx);
}

ss_status ss__emb_table_lookup(ss__emb_table *t, const uint64_t *ids, size_t n, float *rows) {
    if (!t || (n && (!ids || !rows)))
        return SS_ERR_INVALID_ARGUMENT;
    io_ctx c = {.out = rows};
    return for_rows_io(t, ids, n, ROWS_READ, op_copy_data, loose_copy_data, &c, rows);
}

/* Rows that are there, copied by op (their data, or whole); found says
 * which were. Nothing is loaded or made. */
static ss_status peek_rows(ss__emb_table *t, const uint64_t *ids, size_t n, float *rows,
                           bool *found, row_op op) {
    if (!t || (n && (!ids || !rows || !found)))
        return SS_ERR_INVALID_ARGUMENT;
    memset(found, 0, n * sizeof *found);
    io_ctx c = {.out = rows, .found = found};
    return for_rows(t, ids, n, ROWS_PEEK, op, NULL, &c);
}

ss_status ss__emb_table_peek(ss__emb_table *t, const uint64_t *ids, size_t n, float *rows,
                             bool *found) {
    return peek_rows(t, ids, n, rows, found, op_copy_data);
}

size_t ss__emb_table_count_missing(ss__emb_table *t, const uint64_t *ids, size_t n) {
    size_t missing = 0;
    for (size_t i = 0; t && i < n; i++) {
        stripe *s = stripe_of(t, ids[i]);
        pthread_mutex_lock(&s->lock);
        missing += find(s, ids[i]) == NULL;
        pthread_mutex_unlock(&s->lock);
    }
    return missing;
}

static void op_none(ss__emb_table *t, stripe *s, slot *sl, size_t i, void *ctx) {
    (void)t, (void)s, (void)sl, (void)i, (void)ctx;
}

ss_status ss__emb_table_load(ss__emb_table *t, const uint64_t *ids, size_t n, size_t *loaded) {
    if (!t || (n && !ids) || !loaded)
        return SS_ERR_INVALID_ARGUMENT;
    uint64_t before = atomic_load(&t->loads);
    ss_status st = for_rows(t, ids, n, ROWS_WRITE, op_none, NULL, NULL);
    *loaded = (size_t)(atomic_load(&t->loads) - before); /* others' loads meanwhile too: a count */
    return st;
}

ss_status ss__emb_table_read_full(ss__emb_table *t, const uint64_t *ids, size_t n, float *rows,
                                  bool *found) {
    return peek_rows(t, ids, n, rows, found, op_copy_full);
}

static void op_mark_found(ss__emb_table *t, stripe *s, slot *sl, size_t i, void *ctx) {
    (void)t, (void)s, (void)sl;
    ((io_ctx *)ctx)->found[i] = true;
}

ss_status ss__emb_table_holds(ss__emb_table *t, const uint64_t *ids, size_t n, bool *found) {
    if (!t || (n && (!ids || !found)))
        return SS_ERR_INVALID_ARGUMENT;
    memset(found, 0, n * sizeof *found);
    io_ctx c = {.found = found};
    return for_rows(t, ids, n, ROWS_PEEK, op_mark_found, NULL, &c);
}

/* An update's status: for_rows', else SS_ERR_NON_FINITE when some row
 * was refused (*refused says how many). */
static ss_status update_status(ss_status st, const io_ctx *c, size_t *refused) {
    if (refused)
        *refused = c->refused;
    return st == SS_OK && c->refused ? SS_ERR_NON_FINITE : st;
}

ss_status ss__emb_table_apply_gradients(ss__emb_table *t, const uint64_t *ids, size_t n,
                                        const float *grads, size_t *refused) {
    if (!t || (n && (!ids || !grads)))
        return SS_ERR_INVALID_ARGUMENT;
    io_ctx c = {.in = grads};
    return update_status(for_rows_io(t, ids, n, ROWS_UPDATE, op_gradient, loose_none, &c, grads),
                         &c, refused);
}

ss_status ss__emb_table_elastic(ss__emb_table *t, const uint64_t *ids, size_t n, const float *x,
                                float alpha, float *deltas, size_t *refused) {
    if (!t || (n && (!ids || !x || !deltas)))
        return SS_ERR_INVALID_ARGUMENT;
    io_ctx c = {.in = x, .out = deltas, .alpha = alpha};
    return update_status(for_rows(t, ids, n, ROWS_UPDATE, op_elastic, loose_zero_delta, &c), &c,
                         refused);
}

ss_status ss__emb_table_elastic_encoded(ss__emb_table *t, const uint64_t *ids, size_t n,
                                        const float *x, float alpha,
                                        const ss__emb_delta_encoder *enc, uint8_t *deltas,
                                        size_t *not_held) {
    if (!t || (n && (!ids || !x || !deltas)) || !enc || !enc->fn)
        return SS_ERR_INVALID_ARGUMENT;
    io_ctx c = {.in = x, .alpha = alpha, .enc = enc, .enc_out = deltas};
    ss_status st = for_rows(t, ids, n, ROWS_UPDATE, op_elastic, loose_zero_delta, &c);
    if (not_held)
        *not_held = c.not_held;
    return st;
}

uint64_t ss__emb_table_resident(const ss__emb_table *t, uint64_t *bytes) {
    uint64_t rows = atomic_load(&t->resident);
    if (bytes) /* rows in their slabs + their hash slots at the 0.7 load bound */
        *bytes = rows * (t->stride * sizeof(float) + sizeof(slot) * 10 / 7);
    return rows;
}

void ss__emb_table_get_stats(ss__emb_table *t, ss__emb_table_stats *out) {
    memset(out, 0, sizeof *out);
    for (int k = 0; k < STRIPES; k++) {
        stripe *s = &t->s[k];
        pthread_mutex_lock(&s->lock);
        out->dirty_rows += s->dirty;
        out->index_bytes += s->cap * sizeof(slot) + s->queue_cap * sizeof *s->queue;
        pthread_mutex_unlock(&s->lock);
    }
    /* One count at one moment: a sum of the stripes' counts, each taken in
     * turn, can see a row deleted from one stripe and another made in the
     * next, and so more rows than the table ever held at once. */
    out->resident_rows = atomic_load(&t->resident);
    out->row_bytes = out->resident_rows * t->stride * sizeof(float);
    out->arena_bytes = ss__row_arena_allocated(t->arena);
    out->loads = atomic_load(&t->loads);
    out->evictions = atomic_load(&t->evictions);
    out->admitted = atomic_load(&t->admitted);
    out->not_admitted = atomic_load(&t->not_admitted);
    out->expired = atomic_load(&t->expired);
    out->dropped = atomic_load(&t->dropped);
}
