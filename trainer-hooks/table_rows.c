/* What the tables' public calls (tables.c) and their threads
 * (table_threads.c) both do with rows: ids deduplicated, lookups of
 * unique ids (with a push in the same call on the remote path), push
 * items freed. Both depend on this file (tables_internal.h), not on each
 * other. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/id_set.h"
#include "embedding-store/emb_table.h"
#include "rpc/emb/emb_client.h"
#include "trainer-hooks/tables_internal.h"

/* ---- ids: deduplication ---- */

ss_status ss__table_dedup(const uint64_t *ids, size_t n, unique_ids *u) {
    u->ids = malloc(n * sizeof *u->ids + 8);
    u->map = malloc(n * sizeof *u->map + 8);
    ss_status st =
        u->ids && u->map ? ss__ids_unique(ids, n, u->ids, u->map, &u->m) : SS_ERR_NO_MEMORY;
    if (st != SS_OK) {
        free(u->ids);
        free(u->map);
        *u = (unique_ids){0};
    }
    return st;
}

void ss__table_unique_free(unique_ids *u) {
    free(u->ids);
    free(u->map);
}

void ss__table_push_item_free(push_item *it) {
    free(it->ids);
    free(it->grads);
    *it = (push_item){0};
}

/* push (remote only; NULL: none) goes to the shards in the same calls,
 * applied before the lookup. A failed call fails both. */
static ss_status lookup_unique(ss_table *tb, const unique_ids *u, float *rows,
                               const push_item *push) {
    atomic_fetch_add(&tb->unique_lookups, u->m);
    if (tb->cfg.mode == SS_TABLE_REMOTE) {
        ss_status st = push ? ss__emb_client_push_lookup(tb->client, &tb->spec, push->ids, push->n,
                                                         push->grads, u->ids, u->m, rows)
                            : ss__emb_client_lookup(tb->client, &tb->spec, u->ids, u->m, rows);
        if (st == SS_OK)
            atomic_fetch_add(&tb->remote_rows, u->m);
        else if (!push) /* a failed push_lookup is counted as a dropped push */
            atomic_fetch_add(&tb->failed_calls, 1);
        return st;
    }
    return ss__emb_table_lookup(tb->rows, u->ids, u->m, rows);
}

ss_status ss__table_lookup_ids(ss_table *tb, const uint64_t *ids, size_t n, float *rows,
                               const push_item *push) {
    if (n == 0)
        return push ? ss__emb_client_push(tb->client, &tb->spec, push->ids, push->n, push->grads)
                    : SS_OK;
    atomic_fetch_add(&tb->lookups, n);
    const size_t dim = tb->spec.dim;
    unique_ids u;
    ss_status st = ss__table_dedup(ids, n, &u);
    if (st != SS_OK)
        return st;
    if (u.m == n) { /* no repeats: u.ids is ids in order, straight into the caller's rows */
        st = lookup_unique(tb, &u, rows, push);
    } else {
        float *ur = malloc(u.m * dim * sizeof *ur);
        st = ur ? lookup_unique(tb, &u, ur, push) : SS_ERR_NO_MEMORY;
        for (size_t i = 0; st == SS_OK && i < n; i++)
            memcpy(rows + i * dim, ur + u.map[i] * dim, dim * sizeof(float));
        free(ur);
    }
    ss__table_unique_free(&u);
    return st;
}
