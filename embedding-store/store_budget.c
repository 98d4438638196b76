/* The live-row budget of bounded tables (--emb-max-live-rows) held at
 * every moment, not only at the once-a-second sweep: a writer that may
 * create rows reserves them first, and when the rows held and reserved
 * would pass the budget it deletes the least recently updated rows itself
 * (evict on insert, as HierarchicalKV does), down to 15/16 of the budget
 * so that the next writers find room without sweeping again. */
#include <inttypes.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "embedding-store/store_internal.h"

void ss__emb_store_delete_stored(void *ctx, const uint64_t *ids, size_t n) {
    store_table *tb = ctx;
    if (tb->st->db && ss__emb_db_delete_rows(tb->st->db, tb->tid, ids, n, false) != SS_OK)
        ss__log(SS_LOG_ERROR, "emb", "event=delete_failed table=%s rows=%zu", tb->spec.name, n);
}

ss_status ss__emb_budget_reserve(ss__emb_store *st, store_table *tb, const uint64_t *ids, size_t n,
                                 uint64_t *held, char *why, size_t whylen) {
    const uint64_t budget = st->cfg.bounds.max_live_rows;
    *held = 0;
    if (!budget || n == 0)
        return SS_OK;
    /* n first (at least the new ids), so that writers never pass the
     * budget together between a look and their rows; far from it no id
     * needs counting. */
    uint64_t reserved = atomic_fetch_add(&tb->reserved, n) + n;
    *held = n;
    if (ss__emb_table_resident(tb->t, NULL) + reserved <= budget)
        return SS_OK;
    const uint64_t fresh = ss__emb_table_count_missing(tb->t, ids, n);
    reserved = atomic_fetch_sub(&tb->reserved, n - fresh) - (n - fresh);
    *held = fresh;
    if (fresh > budget) {
        ss__emb_budget_release(tb, fresh);
        *held = 0;
        ss__why(why, whylen,
                "%" PRIu64 " new ids in one request, over table %s's budget of %" PRIu64
                " live rows (--emb-max-live-rows); send fewer ids per call",
                fresh, tb->spec.name, budget);
        return SS_ERR_TOO_LARGE;
    }
    if (ss__emb_table_resident(tb->t, NULL) + reserved <= budget)
        return SS_OK;
    const uint64_t headroom = budget / 16, room = reserved + headroom;
    pthread_mutex_lock(&st->flush_lock); /* as the sweep: no flush writes back a row deleted */
    ss__emb_table_make_room(tb->t, ss__unix_ms() / 1000, budget > room ? budget - room : 1,
                            ss__emb_store_delete_stored, tb);
    pthread_mutex_unlock(&st->flush_lock);
    return SS_OK;
}

void ss__emb_budget_release(store_table *tb, uint64_t held) {
    if (held)
        atomic_fetch_sub(&tb->reserved, held);
}
