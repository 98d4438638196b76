/* What table.c (the rows, lookups and updates) and table_life.c (a stored
 * row's life: dirty tracking, eviction, expiry, the row budget) share: the
 * table's stripes and slots. Private to embedding-store/. */
#ifndef SS_EMB_TABLE_INTERNAL_H
#define SS_EMB_TABLE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/hash.h"
#include "embedding-store/admission_internal.h"
#include "embedding-store/emb_table.h"
#include "embedding-store/row_arena_internal.h"

#define STRIPES     64
#define STRIPE_BITS 6
#define MIN_SLOTS   16

#define SLAB_BYTES (1u << 20)

/* slot.meta: the row's version in the high 21 bits (bumped by every
 * update, compared for equality only, so it may wrap), the changed flag
 * of deltas, its push stamp (8 bits: the bounds' clock when it was last
 * updated), then two flags. */
#define META_REF         1u /* CLOCK reference bit */
#define META_DIRTY       2u /* updated since last written/synced */
#define META_STAMP_SHIFT 2
#define META_STAMP_MASK  (0xffu << META_STAMP_SHIFT)
#define META_CHANGED     (1u << 10) /* updated since the last delta took it */
#define META_VERSION     (1u << 11) /* one version step */

typedef struct slot {
    uint64_t id;
    uint32_t row;  /* 1 + the row's index in its stripe's slabs; 0 = empty */
    uint32_t meta; /* version and flags, above */
} slot;

typedef struct stripe {
    pthread_mutex_t lock;
    slot *slots;
    size_t cap, count, dirty;
    uint64_t *queue; /* ids of dirty rows not being written right now */
    size_t nqueue, queue_cap;
    size_t hand;   /* CLOCK position */
    float **slabs; /* each slab_rows rows of stride floats */
    uint32_t nslabs, slabs_cap;
    uint32_t used;      /* rows ever handed out of the slabs */
    uint32_t free_head; /* a freed row (1-based; 0 = none); its first 4 bytes name the next */
} __attribute__((aligned(64))) stripe;

struct ss__emb_table {
    ss__emb_spec spec;
    uint32_t tid;
    size_t row_floats;   /* dim floats, then the optimizer state */
    bool no_dirty_queue; /* nobody collects dirty rows: updates are not queued */
    size_t stride;       /* floats from one row to the next in a slab (16-byte multiples) */
    uint32_t slab_shift; /* a slab holds 1 << slab_shift rows */
    ss__row_arena *arena;
    ss__emb_loader loader;
    void *loader_ctx;
    atomic_uint_fast64_t loads, evictions, resident;
    /* Bounds (ss__emb_table_set_bounds; table_life.c) */
    ss__emb_bounds bounds;
    uint32_t stamp_unit_s;        /* seconds per stamp tick */
    _Atomic uint32_t stamp_now;   /* the clock, in ticks (its low 8 bits are stamped) */
    ss__emb_admission *admission; /* NULL: every new row is stored */
    atomic_uint_fast64_t admitted, not_admitted, expired, dropped;
    /* Deltas (ss__emb_table_track_changes): ids deleted since the last
     * take, under tomb_lock (taken inside a stripe's lock, never around
     * one). */
    bool tracking;
    pthread_mutex_t tomb_lock;
    uint64_t *tombs;
    size_t ntombs, tombs_cap;
    stripe s[STRIPES];
};

static inline stripe *stripe_of(ss__emb_table *t, uint64_t id) {
    return &t->s[ss__mix64(id) & (STRIPES - 1)];
}

static inline size_t home_of(const stripe *s, uint64_t id) {
    return (size_t)(ss__mix64(id) >> STRIPE_BITS) & (s->cap - 1);
}

/* find() with the id's hash already known (h = ss__mix64(id)). */
static inline slot *find_hashed(stripe *s, uint64_t id, uint64_t h) {
    if (s->count == 0)
        return NULL;
    for (size_t i = (size_t)(h >> STRIPE_BITS) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (!s->slots[i].row)
            return NULL;
        if (s->slots[i].id == id)
            return &s->slots[i];
    }
}

static inline slot *find(stripe *s, uint64_t id) {
    return find_hashed(s, id, ss__mix64(id));
}

/* The floats of row r (1-based, as in slot.row) of stripe s. */
static inline float *row_at(const ss__emb_table *t, const stripe *s, uint32_t r) {
    const uint32_t i = r - 1;
    return s->slabs[i >> t->slab_shift] + (size_t)(i & ((1u << t->slab_shift) - 1)) * t->stride;
}

/* The floats of a used slot's row. */
static inline float *row_of(const ss__emb_table *t, const stripe *s, const slot *sl) {
    return row_at(t, s, sl->row);
}

/* The stamp of a row updated now (slot.meta's stamp bits). */
static inline uint32_t stamp_now(const ss__emb_table *t) {
    return (atomic_load_explicit(&t->stamp_now, memory_order_relaxed) & 0xffu) << META_STAMP_SHIFT;
}

/* Marks a row updated: version, stamp, dirty, changed (table.c). */
void ss__emb_table_mark_updated(ss__emb_table *t, stripe *s, slot *sl);
/* Runs op on every id's row, inserting the missing ones without the
 * loader (op writes the whole row); op(t, s, sl, i, ctx). */
ss_status ss__emb_table_for_rows(ss__emb_table *t, const uint64_t *ids, size_t n,
                                 void (*op)(ss__emb_table *t, stripe *s, slot *sl, size_t i,
                                            void *ctx),
                                 void *ctx);

/* Records a deleted id for the next delta (when tracking). */
void ss__emb_table_tombstone(ss__emb_table *t, uint64_t id);

/* Frees a slot's row to its stripe's free list (the slot stays). */
void ss__emb_row_free(ss__emb_table *t, stripe *s, const slot *sl);
/* Empties slot i (backward-shift deletion: no tombstones). */
void ss__emb_stripe_remove_at(stripe *s, size_t i);
/* Queues a dirty row's id for the flusher; SS_ERR_NO_MEMORY. */
ss_status ss__emb_queue_push(stripe *s, uint64_t id);

#endif
