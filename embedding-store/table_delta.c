/* Deltas of an ss__emb_table (emb_table.h): the rows updated since the
 * last take and the ids deleted since, for the PS's delta files; and the
 * other side, a follower replacing and deleting rows as a delta says.
 * Rows leaving for another shard are found here too. */
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "embedding-store/table_internal.h"

/* Rows copied out of one stripe per sink call at most. */
#define TAKE_BATCH 4096

void ss__emb_table_track_changes(ss__emb_table *t) {
    pthread_mutex_lock(&t->tomb_lock);
    t->tracking = true;
    pthread_mutex_unlock(&t->tomb_lock);
}

void ss__emb_table_tombstone(ss__emb_table *t, uint64_t id) {
    pthread_mutex_lock(&t->tomb_lock);
    /* Out of memory: the delete is not in the next delta; a follower keeps
     * the row until the next base, which does not hold it. */
    if (t->tracking && SS_GROW(t->tombs, t->tombs_cap, t->ntombs, 1024))
        t->tombs[t->ntombs++] = id;
    pthread_mutex_unlock(&t->tomb_lock);
}

/* Copies the changed (or all) rows of stripe s from slot *pos on, up to
 * TAKE_BATCH, clearing their changed flag; *pos moves past them. */
static size_t take_stripe(ss__emb_table *t, stripe *s, bool all, size_t *pos, uint64_t *ids,
                          float *rows) {
    size_t n = 0;
    pthread_mutex_lock(&s->lock);
    for (; *pos < s->cap && n < TAKE_BATCH; (*pos)++) {
        slot *sl = &s->slots[*pos];
        if (!sl->row || (!all && !(sl->meta & META_CHANGED)))
            continue;
        sl->meta &= ~META_CHANGED;
        ids[n] = sl->id;
        memcpy(rows + n * t->row_floats, row_of(t, s, sl), t->row_floats * sizeof(float));
        n++;
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

/* Marks the ids changed again (their sink call failed). */
static void mark_changed(ss__emb_table *t, const uint64_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++) {
        stripe *s = stripe_of(t, ids[i]);
        pthread_mutex_lock(&s->lock);
        slot *sl = find(s, ids[i]);
        if (sl)
            sl->meta |= META_CHANGED;
        pthread_mutex_unlock(&s->lock);
    }
}

/* The deletions since the last take, to the sink (they stay on failure). */
static ss_status take_tombs(ss__emb_table *t, ss__emb_row_sink sink, void *ctx) {
    pthread_mutex_lock(&t->tomb_lock);
    uint64_t *tombs = t->tombs;
    size_t n = t->ntombs;
    t->tombs = NULL;
    t->ntombs = t->tombs_cap = 0;
    pthread_mutex_unlock(&t->tomb_lock);
    ss_status st = n ? sink(ctx, tombs, NULL, n) : SS_OK;
    if (st != SS_OK)
        for (size_t i = 0; i < n; i++)
            ss__emb_table_tombstone(t, tombs[i]);
    free(tombs);
    return st;
}

ss_status ss__emb_table_take_changes(ss__emb_table *t, bool all, ss__emb_row_sink sink, void *ctx) {
    if (!t || !sink)
        return SS_ERR_INVALID_ARGUMENT;
    uint64_t *ids = malloc(TAKE_BATCH * sizeof *ids);
    float *rows = malloc(TAKE_BATCH * t->row_floats * sizeof *rows);
    ss_status st = ids && rows ? SS_OK : SS_ERR_NO_MEMORY;
    /* Deletions first: a row deleted and then created again since the last
     * take is a tombstone and a row, applied in that order. */
    if (st == SS_OK)
        st = take_tombs(t, sink, ctx);
    for (int k = 0; k < STRIPES && st == SS_OK; k++) {
        size_t pos = 0, n;
        while (st == SS_OK && (n = take_stripe(t, &t->s[k], all, &pos, ids, rows)) > 0)
            if ((st = sink(ctx, ids, rows, n)) != SS_OK)
                mark_changed(t, ids, n);
    }
    free(ids);
    free(rows);
    return st;
}

static void op_put_full(ss__emb_table *t, stripe *s, slot *sl, size_t i, void *ctx) {
    memcpy(row_of(t, s, sl), (const float *)ctx + i * t->row_floats, t->row_floats * sizeof(float));
    ss__emb_table_mark_updated(t, s, sl);
}

ss_status ss__emb_table_put_full(ss__emb_table *t, const uint64_t *ids, size_t n,
                                 const float *rows) {
    if (!t || (n && (!ids || !rows)))
        return SS_ERR_INVALID_ARGUMENT;
    return ss__emb_table_for_rows(t, ids, n, op_put_full, (void *)rows);
}

size_t ss__emb_table_delete(ss__emb_table *t, const uint64_t *ids, size_t n) {
    size_t gone = 0;
    for (size_t i = 0; i < n; i++) {
        stripe *s = stripe_of(t, ids[i]);
        pthread_mutex_lock(&s->lock);
        slot *sl = find(s, ids[i]);
        if (sl) {
            if (sl->meta & META_DIRTY)
                s->dirty--;
            ss__emb_row_free(t, s, sl);
            ss__emb_stripe_remove_at(s, (size_t)(sl - s->slots));
            atomic_fetch_sub(&t->resident, 1);
            gone++;
        }
        pthread_mutex_unlock(&s->lock);
        ss__emb_table_tombstone(t, ids[i]);
    }
    return gone;
}

/* One stripe's slots [from, to): ids that keep, appended at ids[*n] up to
 * max; returns the slot after the last one found (to when none). */
static size_t find_in_stripe(stripe *s, size_t from, size_t to, ss__emb_id_filter keep, void *ctx,
                             size_t max, uint64_t *ids, size_t *n) {
    size_t stop = to;
    pthread_mutex_lock(&s->lock);
    for (size_t i = from; i < s->cap && i < to && *n < max; i++)
        if (s->slots[i].row && keep(ctx, s->slots[i].id)) {
            ids[(*n)++] = s->slots[i].id;
            stop = i + 1;
        }
    pthread_mutex_unlock(&s->lock);
    return stop;
}

size_t ss__emb_table_find_ids(ss__emb_table *t, ss__emb_id_filter keep, void *ctx, size_t max,
                              uint64_t *ids, ss__emb_scan_pos *pos) {
    ss__emb_scan_pos start = pos ? *pos : (ss__emb_scan_pos){0, 0};
    if (start.stripe >= STRIPES)
        start = (ss__emb_scan_pos){0, 0};
    size_t n = 0;
    /* From start to the table's end, then from its beginning back to
     * start: every slot once, whatever a resize or a delete has moved
     * since the position was taken. */
    for (unsigned step = 0; step <= STRIPES && n < max; step++) {
        unsigned k = (start.stripe + step) % STRIPES;
        size_t from = step == 0 ? start.slot : 0;
        size_t to = step == STRIPES ? start.slot : SIZE_MAX;
        if (step == STRIPES && start.slot == 0)
            break;
        size_t stop = find_in_stripe(&t->s[k], from, to, keep, ctx, max, ids, &n);
        if (pos && n == max) /* the next call goes on from here */
            *pos = (ss__emb_scan_pos){k, stop};
    }
    return n;
}
