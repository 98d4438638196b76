/* A stored row's life in an ss__emb_table (emb_table.h): dirty tracking
 * for the owner's writes, CLOCK eviction of clean rows, and the bounds of
 * an online table: admission, expiry and the row budget. */
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "embedding-store/table_internal.h"

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
            if (!sl || !(sl->meta & META_DIRTY))
                continue;
            d->ids[d->n] = id;
            d->versions[d->n] = sl->meta / META_VERSION;
            memcpy(d->rows + d->n * t->row_floats, row_of(t, s, sl), t->row_floats * sizeof(float));
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
            if (deltas) {
                float *v = row_of(t, s, sl);
                for (size_t j = 0; j < dim; j++)
                    v[j] -= deltas[i * dim + j];
            }
            if (sl->meta / META_VERSION == d->versions[i]) {
                if (sl->meta & META_DIRTY)
                    s->dirty--;
                sl->meta &= ~META_DIRTY;
            } else {
                (void)ss__emb_queue_push(s, d->ids[i]); /* updated meanwhile: next time */
            }
        }
        pthread_mutex_unlock(&s->lock);
    }
}

void ss__emb_table_requeue(ss__emb_table *t, const ss__emb_dirty *d) {
    for (size_t i = 0; i < d->n; i++) {
        stripe *s = stripe_of(t, d->ids[i]);
        pthread_mutex_lock(&s->lock);
        (void)ss__emb_queue_push(s, d->ids[i]);
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
            /* not dirty (unwritten) nor, with deltas, not yet in one */
            if (sl->row && !(sl->meta & META_DIRTY) &&
                !(t->tracking && (sl->meta & META_CHANGED))) {
                if (sl->meta & META_REF) {
                    sl->meta &= ~META_REF;
                } else {
                    ss__emb_row_free(t, s, sl);
                    ss__emb_stripe_remove_at(s, i);
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

/* Ages are ticks since a row's last update, kept in 8 bits: a sweep
 * clamps every older row to AGE_CEILING so that ages never wrap. */
#define AGE_CEILING 200u
#define TTL_TICKS   100u /* a ttl is this many ticks (a tick is at least 1 s) */

ss_status ss__emb_table_set_bounds(ss__emb_table *t, const ss__emb_bounds *b, uint64_t now_s) {
    if (!t || !b || b->admit_count > UINT16_MAX)
        return SS_ERR_INVALID_ARGUMENT;
    ss__emb_admission *adm = NULL;
    if (b->admit_count > 1) {
        ss_status st = ss__emb_admission_create(b->admit_count, &adm, NULL, 0);
        if (st != SS_OK)
            return st;
    }
    ss__emb_admission_destroy(t->admission);
    t->admission = adm;
    t->bounds = *b;
    t->stamp_unit_s = b->ttl_s > TTL_TICKS ? (uint32_t)((b->ttl_s + TTL_TICKS - 1) / TTL_TICKS) : 1;
    atomic_store(&t->stamp_now, (uint32_t)(now_s / t->stamp_unit_s));
    return SS_OK;
}

static uint32_t age_of(const ss__emb_table *t, const slot *sl) {
    const uint32_t now = atomic_load_explicit(&t->stamp_now, memory_order_relaxed);
    return (now - ((sl->meta & META_STAMP_MASK) >> META_STAMP_SHIFT)) & 0xffu;
}

/* Deleted ids of one stripe, handed to on_delete after its lock. */
typedef struct deleted {
    uint64_t *ids;
    size_t n, cap;
} deleted;

static void delete_at(ss__emb_table *t, stripe *s, size_t i, deleted *d) {
    slot *sl = &s->slots[i];
    if (sl->meta & META_DIRTY)
        s->dirty--; /* its queued id finds no row: collect_dirty skips it */
    /* Out of memory: deleted here, not reported (the store keeps it). */
    if (SS_GROW(d->ids, d->cap, d->n, 256))
        d->ids[d->n++] = sl->id;
    ss__emb_table_tombstone(t, sl->id);
    ss__emb_row_free(t, s, sl);
    ss__emb_stripe_remove_at(s, i);
    atomic_fetch_sub(&t->resident, 1);
}

/* One pass over stripe s: deletes rows of age >= cut (all of them), and
 * of age == at (up to *budget of them); clamps the others' ages. Adds the
 * ages seen to hist when given. Returns the rows deleted. */
static size_t sweep_stripe(ss__emb_table *t, stripe *s, uint32_t cut, uint32_t at, size_t *budget,
                           uint64_t *hist, deleted *d) {
    const uint32_t now = atomic_load(&t->stamp_now);
    size_t gone = 0;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->cap;) {
        slot *sl = &s->slots[i];
        if (!sl->row) {
            i++;
            continue;
        }
        uint32_t age = age_of(t, sl);
        if (age >= cut || (age == at && *budget > 0)) {
            if (age < cut)
                (*budget)--;
            delete_at(t, s, i, d);
            gone++;
            continue; /* slot i now holds the next entry of the chain */
        }
        if (age > AGE_CEILING) {
            age = AGE_CEILING;
            sl->meta = (sl->meta & ~META_STAMP_MASK) | (((now - age) & 0xffu) << META_STAMP_SHIFT);
        }
        if (hist)
            hist[age]++;
        i++;
    }
    pthread_mutex_unlock(&s->lock);
    return gone;
}

static size_t sweep_all(ss__emb_table *t, uint32_t cut, uint32_t at, size_t budget, uint64_t *hist,
                        ss__emb_on_delete on_delete, void *ctx) {
    deleted d = {0};
    size_t gone = 0;
    for (int k = 0; k < STRIPES; k++) {
        d.n = 0;
        gone += sweep_stripe(t, &t->s[k], cut, at, &budget, hist, &d);
        if (on_delete && d.n)
            on_delete(ctx, d.ids, d.n);
    }
    free(d.ids);
    return gone;
}

/* A sweep that brings the live rows down to max_live (0: no budget). */
static size_t sweep_to(ss__emb_table *t, uint64_t now_s, uint64_t max_live,
                       ss__emb_on_delete on_delete, void *ctx) {
    const ss__emb_bounds *b = &t->bounds;
    atomic_store(&t->stamp_now, (uint32_t)(now_s / t->stamp_unit_s));
    /* Expiry: a row whose age in ticks reaches the ttl's (never at 256:
     * no age gets there). */
    const uint32_t ttl_ticks =
        b->ttl_s ? (uint32_t)((b->ttl_s + t->stamp_unit_s - 1) / t->stamp_unit_s) : 256;
    uint64_t hist[256] = {0};
    size_t expired = sweep_all(t, ttl_ticks, 256, 0, max_live ? hist : NULL, on_delete, ctx);
    atomic_fetch_add(&t->expired, expired);
    const uint64_t live = atomic_load(&t->resident);
    if (!max_live || live <= max_live)
        return expired;
    /* The budget: the oldest first. cut is the youngest age deleted whole,
     * at the age deleted in part. */
    uint64_t excess = live - max_live, older = 0;
    uint32_t at = 255;
    while (at > 0 && older + hist[at] < excess)
        older += hist[at--];
    const size_t dropped = sweep_all(t, at + 1, at, (size_t)(excess - older), NULL, on_delete, ctx);
    atomic_fetch_add(&t->dropped, dropped);
    return expired + dropped;
}

size_t ss__emb_table_sweep(ss__emb_table *t, uint64_t now_s, ss__emb_on_delete on_delete,
                           void *ctx) {
    return sweep_to(t, now_s, t->bounds.max_live_rows, on_delete, ctx);
}

size_t ss__emb_table_make_room(ss__emb_table *t, uint64_t now_s, uint64_t max_live,
                               ss__emb_on_delete on_delete, void *ctx) {
    if (!t->bounds.max_live_rows)
        return 0;
    return sweep_to(t, now_s, max_live ? max_live : 1, on_delete, ctx);
}
