/* The in-memory table: 64 stripes, each a linear-probing hash of
 * (id -> row pointer) under its own mutex, rows allocated from the
 * table's row arena (row_arena.h). See emb_table.h for the contract. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedding-store/emb_table.h"
#include "embedding-store/row_arena_internal.h"

#define STRIPES     64
#define STRIPE_BITS 6
#define MIN_SLOTS   16

typedef struct row {
    uint32_t version; /* bumped by every update */
    uint8_t dirty;    /* updated since last written/synced */
    uint8_t ref;      /* CLOCK reference bit */
    uint16_t pad;
    float v[]; /* dim floats, then the optimizer state */
} row;

typedef struct slot {
    uint64_t id;
    row *r; /* NULL = empty */
} slot;

typedef struct stripe {
    pthread_mutex_t lock;
    slot *slots;
    size_t cap, count, dirty;
    uint64_t *queue; /* ids of dirty rows not being written right now */
    size_t nqueue, queue_cap;
    size_t hand; /* CLOCK position */
} __attribute__((aligned(64))) stripe;

struct ss__emb_table {
    ss__emb_spec spec;
    uint32_t tid;
    size_t row_floats, row_size, row_class;
    ss__row_arena *arena;
    ss__emb_loader loader;
    void *loader_ctx;
    atomic_uint_fast64_t loads, evictions, resident;
    stripe s[STRIPES];
};

static uint64_t hash_id(uint64_t id) {
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdull;
    id ^= id >> 33;
    id *= 0xc4ceb9fe1a85ec53ull;
    return id ^ (id >> 33);
}

static stripe *stripe_of(ss__emb_table *t, uint64_t id) {
    return &t->s[hash_id(id) & (STRIPES - 1)];
}

static size_t home_of(const stripe *s, uint64_t id) {
    return (size_t)(hash_id(id) >> STRIPE_BITS) & (s->cap - 1);
}

/* find() with the id's hash already known (h = hash_id(id)). */
static slot *find_hashed(stripe *s, uint64_t id, uint64_t h) {
    if (s->count == 0)
        return NULL;
    for (size_t i = (size_t)(h >> STRIPE_BITS) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (!s->slots[i].r)
            return NULL;
        if (s->slots[i].id == id)
            return &s->slots[i];
    }
}

static slot *find(stripe *s, uint64_t id) {
    return find_hashed(s, id, hash_id(id));
}

static ss_status grow(stripe *s) {
    size_t ncap = s->cap ? s->cap * 2 : MIN_SLOTS;
    slot *old = s->slots, *ns = calloc(ncap, sizeof *ns);
    if (!ns)
        return SS_ERR_NO_MEMORY;
    size_t ocap = s->cap;
    s->slots = ns;
    s->cap = ncap;
    for (size_t i = 0; i < ocap; i++) {
        if (!old[i].r)
            continue;
        size_t j = home_of(s, old[i].id);
        while (ns[j].r)
            j = (j + 1) & (ncap - 1);
        ns[j] = old[i];
    }
    free(old);
    return SS_OK;
}

/* Backward-shift deletion keeps probe chains intact without tombstones. */
static void remove_at(stripe *s, size_t i) {
    const size_t mask = s->cap - 1;
    for (;;) {
        s->slots[i].r = NULL;
        size_t j = i;
        for (;;) {
            j = (j + 1) & mask;
            if (!s->slots[j].r)
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

static ss_status queue_push(stripe *s, uint64_t id) {
    if (s->nqueue == s->queue_cap) {
        size_t ncap = s->queue_cap ? s->queue_cap * 2 : 64;
        uint64_t *nq = realloc(s->queue, ncap * sizeof *nq);
        if (!nq)
            return SS_ERR_NO_MEMORY;
        s->queue = nq;
        s->queue_cap = ncap;
    }
    s->queue[s->nqueue++] = id;
    return SS_OK;
}

static void mark_dirty(stripe *s, slot *sl) {
    sl->r->version++;
    if (!sl->r->dirty) {
        sl->r->dirty = 1;
        s->dirty++;
        /* Out of memory for the queue: the row stays dirty (never evicted)
         * but is written only by ss__emb_table_settle's requeue; rare. */
        (void)queue_push(s, sl->id);
    }
}

ss_status ss__emb_table_create(const ss__emb_spec *spec, ss__emb_loader loader, void *loader_ctx,
                               ss__emb_table **out) {
    if (!out || !loader || ss__emb_spec_check(spec, NULL, 0) != SS_OK)
        return SS_ERR_INVALID_ARGUMENT;
    ss__emb_table *t = aligned_alloc(64, sizeof *t);
    if (!t)
        return SS_ERR_NO_MEMORY;
    memset(t, 0, sizeof *t);
    t->spec = *spec;
    t->tid = ss__emb_table_id(spec->name);
    t->row_floats = ss__emb_row_floats(spec);
    t->row_size = sizeof(row) + t->row_floats * sizeof(float);
    t->loader = loader;
    t->loader_ctx = loader_ctx;
    if (!(t->arena = ss__row_arena_create(t->row_size))) {
        free(t);
        return SS_ERR_NO_MEMORY;
    }
    t->row_class = ss__row_arena_row_bytes(t->arena);
    for (int i = 0; i < STRIPES; i++)
        pthread_mutex_init(&t->s[i].lock, NULL);
    *out = t;
    return SS_OK;
}

void ss__emb_table_destroy(ss__emb_table *t) {
    if (!t)
        return;
    for (int i = 0; i < STRIPES; i++) {
        if (!ss__row_arena_frees_all())
            for (size_t j = 0; j < t->s[i].cap; j++)
                if (t->s[i].slots[j].r)
                    ss__row_arena_free(t->arena, t->s[i].slots[j].r);
        free(t->s[i].slots);
        free(t->s[i].queue);
        pthread_mutex_destroy(&t->s[i].lock);
    }
    ss__row_arena_destroy(t->arena); /* with a jemalloc arena: every row at once */
    free(t);
}

const ss__emb_spec *ss__emb_table_spec(const ss__emb_table *t) {
    return &t->spec;
}

/* An operation on one resident row, under its stripe's lock. */
typedef void (*row_op)(ss__emb_table *t, stripe *s, slot *sl, size_t i, void *ctx);

static ss_status insert_loaded(ss__emb_table *t, stripe *s, uint64_t id, const float *full,
                               slot **out) {
    if ((s->count + 1) * 10 > s->cap * 7) {
        ss_status st = grow(s);
        if (st != SS_OK)
            return st;
    }
    row *r = ss__row_arena_alloc(t->arena);
    if (!r)
        return SS_ERR_NO_MEMORY;
    memset(r, 0, sizeof *r);
    r->ref = 1;
    memcpy(r->v, full, t->row_floats * sizeof(float));
    size_t j = home_of(s, id);
    while (s->slots[j].r)
        j = (j + 1) & (s->cap - 1);
    s->slots[j].id = id;
    s->slots[j].r = r;
    s->count++;
    atomic_fetch_add(&t->resident, 1);
    *out = &s->slots[j];
    return SS_OK;
}

/* How many ids ahead for_rows prefetches a stripe's hash slot. */
#define SLOT_PREFETCH 8

static void prefetch_row(const ss__emb_table *t, const row *r) {
    const char *p = (const char *)r;
    for (size_t off = 0; off < t->row_size; off += 64)
        __builtin_prefetch(p + off);
    __builtin_prefetch(p + t->row_size - 1);
}

/* Runs op on every id's row; rows not resident are loaded (when load) and
 * inserted, then op runs on them under the same lock. The ids are visited
 * grouped by stripe (a counting sort), so each stripe's lock is taken once
 * per call rather than once per id. Within a stripe, every id's slot is
 * found first, with the slots a few ids ahead and every found row
 * prefetched, and op runs after: the cache misses of a stripe's rows
 * overlap instead of being paid one after the other. */
static ss_status for_rows(ss__emb_table *t, const uint64_t *ids, size_t n, bool load, row_op op,
                          void *ctx) {
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
        hs[i] = hash_id(ids[i]);
        start[(hs[i] & (STRIPES - 1)) + 1]++;
    }
    for (int b = 0; b < STRIPES; b++)
        start[b + 1] += start[b];
    memcpy(fill, start, sizeof fill);
    for (size_t i = 0; i < n; i++)
        order[fill[hs[i] & (STRIPES - 1)]++] = i;
    for (int b = 0; b < STRIPES; b++) {
        const size_t lo = start[b], hi = start[b + 1];
        if (lo == hi)
            continue;
        stripe *s = &t->s[b];
        pthread_mutex_lock(&s->lock);
        const size_t mask = s->cap ? s->cap - 1 : 0;
        for (size_t k = lo; k < hi && s->cap && k < lo + SLOT_PREFETCH; k++)
            __builtin_prefetch(&s->slots[(hs[order[k]] >> STRIPE_BITS) & mask]);
        for (size_t k = lo; k < hi; k++) {
            const size_t i = order[k];
            if (s->cap && k + SLOT_PREFETCH < hi)
                __builtin_prefetch(&s->slots[(hs[order[k + SLOT_PREFETCH]] >> STRIPE_BITS) & mask]);
            found[k] = find_hashed(s, ids[i], hs[i]);
            if (found[k])
                prefetch_row(t, found[k]->r);
        }
        for (size_t k = lo; k < hi; k++) {
            if (found[k]) {
                found[k]->r->ref = 1;
                op(t, s, found[k], order[k], ctx);
            } else if (load) {
                missing[nm++] = order[k];
            }
        }
        pthread_mutex_unlock(&s->lock);
    }
    if (nm == 0) {
        free(hs);
        return SS_OK;
    }
    uint64_t *mids = malloc(nm * sizeof *mids);
    float *rows = malloc(nm * t->row_floats * sizeof(float));
    ss_status st = (mids && rows) ? SS_OK : SS_ERR_NO_MEMORY;
    for (size_t k = 0; st == SS_OK && k < nm; k++)
        mids[k] = ids[missing[k]];
    if (st == SS_OK)
        st = t->loader(t->loader_ctx, mids, nm, rows);
    if (st == SS_OK)
        atomic_fetch_add(&t->loads, nm);
    for (size_t k = 0; st == SS_OK && k < nm; k++) {
        stripe *s = stripe_of(t, mids[k]);
        pthread_mutex_lock(&s->lock);
        slot *sl = find(s, mids[k]); /* another caller may have loaded it meanwhile */
        if (!sl)
            st = insert_loaded(t, s, mids[k], rows + k * t->row_floats, &sl);
        if (sl)
            op(t, s, sl, missing[k], ctx);
        pthread_mutex_unlock(&s->lock);
    }
    free(hs);
    free(mids);
    free(rows);
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
} io_ctx;

static void op_copy_data(ss__emb_table *t, stripe *s, slot *sl, size_t i, void *ctx) {
    (void)s;
    io_ctx *c = ctx;
    memcpy(c->out + i * t->spec.dim, sl->r->v, t->spec.dim * sizeof(float));
    if (c->found)
        c->found[i] = true;
}

static void op_copy_full(ss__emb_table *t, stripe *s, slot *sl, size_t i, void *ctx) {
    (void)s;
    io_ctx *c = ctx;
    memcpy(c->out + i * t->row_floats, sl->r->v, t->row_floats * sizeof(float));
    c->found[i] = true;
}

static void op_gradient(ss__emb_table *t, stripe *s, slot *sl, size_t i, void *ctx) {
    io_ctx *c = ctx;
    ss__emb_apply_gradient(&t->spec, sl->r->v, c->in + i * t->spec.dim);
    mark_dirty(s, sl);
}

static void op_elastic(ss__emb_table *t, stripe *s, slot *sl, size_t i, void *ctx) {
    io_ctx *c = ctx;
    const size_t dim = t->spec.dim;
    if (!c->enc)
        ss__emb_elastic(sl->r->v, c->in + i * dim, c->alpha, c->out + i * dim, dim);
    else if (!ss__emb_elastic_encoded(sl->r->v, c->in + i * dim, c->alpha, c->enc,
                                      c->enc_out + i * c->enc->row_bytes, dim))
        c->not_held++;
    mark_dirty(s, sl);
}

ss_status ss__emb_table_lookup(ss__emb_table *t, const uint64_t *ids, size_t n, float *rows) {
    if (!t || (n && (!ids || !rows)))
        return SS_ERR_INVALID_ARGUMENT;
    io_ctx c = {.out = rows};
    return for_rows(t, ids, n, true, op_copy_data, &c);
}

ss_status ss__emb_table_peek(ss__emb_table *t, const uint64_t *ids, size_t n, float *rows,
                             bool *found) {
    if (!t || (n && (!ids || !rows || !found)))
        return SS_ERR_INVALID_ARGUMENT;
    memset(found, 0, n * sizeof *found);
    io_ctx c = {.out = rows, .found = found};
    return for_rows(t, ids, n, false, op_copy_data, &c);
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
    ss_status st = for_rows(t, ids, n, true, op_none, NULL);
    *loaded = (size_t)(atomic_load(&t->loads) - before); /* others' loads meanwhile too: a count */
    return st;
}

ss_status ss__emb_table_read_full(ss__emb_table *t, const uint64_t *ids, size_t n, float *rows,
                                  bool *found) {
    if (!t || (n && (!ids || !rows || !found)))
        return SS_ERR_INVALID_ARGUMENT;
    memset(found, 0, n * sizeof *found);
    io_ctx c = {.out = rows, .found = found};
    return for_rows(t, ids, n, false, op_copy_full, &c);
}

ss_status ss__emb_table_apply_gradients(ss__emb_table *t, const uint64_t *ids, size_t n,
                                        const float *grads) {
    if (!t || (n && (!ids || !grads)))
        return SS_ERR_INVALID_ARGUMENT;
    io_ctx c = {.in = grads};
    return for_rows(t, ids, n, true, op_gradient, &c);
}

ss_status ss__emb_table_elastic(ss__emb_table *t, const uint64_t *ids, size_t n, const float *x,
                                float alpha, float *deltas) {
    if (!t || (n && (!ids || !x || !deltas)))
        return SS_ERR_INVALID_ARGUMENT;
    io_ctx c = {.in = x, .out = deltas, .alpha = alpha};
    return for_rows(t, ids, n, true, op_elastic, &c);
}

ss_status ss__emb_table_elastic_encoded(ss__emb_table *t, const uint64_t *ids, size_t n,
                                        const float *x, float alpha,
                                        const ss__emb_delta_encoder *enc, uint8_t *deltas,
                                        size_t *not_held) {
    if (!t || (n && (!ids || !x || !deltas)) || !enc || !enc->fn)
        return SS_ERR_INVALID_ARGUMENT;
    io_ctx c = {.in = x, .alpha = alpha, .enc = enc, .enc_out = deltas};
    ss_status st = for_rows(t, ids, n, true, op_elastic, &c);
    if (not_held)
        *not_held = c.not_held;
    return st;
}

static ss_status dirty_reserve(ss__emb_dirty *d, size_t need, size_t row_floats) {
    if (need <= d->cap)
        return SS_OK;
    size_t ncap = d->cap ? d->cap : 256;
    while (ncap < need)
        ncap *= 2;
    uint64_t *ids = realloc(d->ids, ncap * sizeof *ids);
    if (ids)
        d->ids = ids;
    float *rows = realloc(d->rows, ncap * row_floats * sizeof *rows);
    if (rows)
        d->rows = rows;
    uint32_t *v = realloc(d->versions, ncap * sizeof *v);
    if (v)
        d->versions = v;
    if (!ids || !rows || !v)
        return SS_ERR_NO_MEMORY;
    d->cap = ncap;
    return SS_OK;
}

ss_status ss__emb_table_collect_dirty(ss__emb_table *t, ss__emb_dirty *d, size_t max) {
    if (!t || !d)
        return SS_ERR_INVALID_ARGUMENT;
    d->n = 0;
    for (int k = 0; k < STRIPES && d->n < max; k++) {
        stripe *s = &t->s[k];
        pthread_mutex_lock(&s->lock);
        size_t take = s->nqueue < max - d->n ? s->nqueue : max - d->n;
        ss_status st = dirty_reserve(d, d->n + take, t->row_floats);
        if (st != SS_OK) {
            pthread_mutex_unlock(&s->lock);
            return st;
        }
        for (size_t q = 0; q < take; q++) {
            uint64_t id = s->queue[--s->nqueue];
            slot *sl = find(s, id);
            if (!sl || !sl->r->dirty)
                continue;
            d->ids[d->n] = id;
            d->versions[d->n] = sl->r->version;
            memcpy(d->rows + d->n * t->row_floats, sl->r->v, t->row_floats * sizeof(float));
            d->n++;
        }
        pthread_mutex_unlock(&s->lock);
    }
    return SS_OK;
}

void ss__emb_table_settle(ss__emb_table *t, const ss__emb_dirty *d, const float *deltas) {
    const size_t dim = t->spec.dim;
    for (size_t i = 0; i < d->n; i++) {
        stripe *s = stripe_of(t, d->ids[i]);
        pthread_mutex_lock(&s->lock);
        slot *sl = find(s, d->ids[i]);
        if (sl) {
            if (deltas)
                for (size_t j = 0; j < dim; j++)
                    sl->r->v[j] -= deltas[i * dim + j];
            if (sl->r->version == d->versions[i]) {
                if (sl->r->dirty)
                    s->dirty--;
                sl->r->dirty = 0;
            } else {
                (void)queue_push(s, d->ids[i]); /* updated meanwhile: next time */
            }
        }
        pthread_mutex_unlock(&s->lock);
    }
}

void ss__emb_table_requeue(ss__emb_table *t, const ss__emb_dirty *d) {
    for (size_t i = 0; i < d->n; i++) {
        stripe *s = stripe_of(t, d->ids[i]);
        pthread_mutex_lock(&s->lock);
        (void)queue_push(s, d->ids[i]);
        pthread_mutex_unlock(&s->lock);
    }
}

void ss__emb_dirty_free(ss__emb_dirty *d) {
    if (!d)
        return;
    free(d->ids);
    free(d->rows);
    free(d->versions);
    memset(d, 0, sizeof *d);
}

size_t ss__emb_table_evict(ss__emb_table *t, size_t max_rows) {
    const size_t per_stripe = max_rows / STRIPES;
    size_t evicted = 0;
    for (int k = 0; k < STRIPES; k++) {
        stripe *s = &t->s[k];
        pthread_mutex_lock(&s->lock);
        /* Two sweeps at most: the first clears reference bits. */
        for (size_t steps = 0; s->count > per_stripe && steps < 2 * s->cap;) {
            size_t i = s->hand & (s->cap - 1);
            slot *sl = &s->slots[i];
            if (sl->r && !sl->r->dirty) {
                if (sl->r->ref) {
                    sl->r->ref = 0;
                } else {
                    ss__row_arena_free(t->arena, sl->r);
                    remove_at(s, i);
                    evicted++;
                    continue; /* slot i now holds the next entry of the chain */
                }
            }
            s->hand = i + 1;
            steps++;
        }
        pthread_mutex_unlock(&s->lock);
    }
    atomic_fetch_add(&t->evictions, evicted);
    atomic_fetch_sub(&t->resident, evicted);
    return evicted;
}

uint64_t ss__emb_table_resident(const ss__emb_table *t, uint64_t *bytes) {
    uint64_t rows = atomic_load(&t->resident);
    if (bytes) /* rows as allocated + their hash slots at the 0.7 load bound */
        *bytes = rows * (t->row_class + sizeof(slot) * 10 / 7);
    return rows;
}

void ss__emb_table_get_stats(ss__emb_table *t, ss__emb_table_stats *out) {
    memset(out, 0, sizeof *out);
    for (int k = 0; k < STRIPES; k++) {
        stripe *s = &t->s[k];
        pthread_mutex_lock(&s->lock);
        out->resident_rows += s->count;
        out->dirty_rows += s->dirty;
        out->index_bytes += s->cap * sizeof(slot);
        pthread_mutex_unlock(&s->lock);
    }
    out->row_bytes = out->resident_rows * t->row_class;
    out->arena_bytes = ss__row_arena_allocated(t->arena);
    out->loads = atomic_load(&t->loads);
    out->evictions = atomic_load(&t->evictions);
}
