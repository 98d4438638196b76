#include "embedding-store/admission_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "common/hash.h"
#include "common/strbuf.h"

#define DEPTH      4
#define WIDTH_BITS 18
#define WIDTH      (1u << WIDTH_BITS)

struct ss__emb_admission {
    uint32_t k;
    _Atomic uint64_t increments; /* since the last halving */
    pthread_mutex_t halving;
    _Atomic uint16_t counts[DEPTH][WIDTH];
};

ss_status ss__emb_admission_create(uint32_t k, ss__emb_admission **out, char *why, size_t whylen) {
    if (!out || k < 2 || k > UINT16_MAX)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                        "an admission count is 2 to %u, not %u", (unsigned)UINT16_MAX, k);
    ss__emb_admission *a = calloc(1, sizeof *a);
    if (!a)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the admission sketch");
    a->k = k;
    pthread_mutex_init(&a->halving, NULL);
    *out = a;
    return SS_OK;
}

void ss__emb_admission_destroy(ss__emb_admission *a) {
    if (!a)
        return;
    pthread_mutex_destroy(&a->halving);
    free(a);
}

/* Halves every counter (one caller; increments racing with it may be
 * halved or not, which only blurs counts the sketch already blurs). */
static void halve(ss__emb_admission *a) {
    if (pthread_mutex_trylock(&a->halving) != 0)
        return; /* another caller is halving */
    if (atomic_load(&a->increments) >= (uint64_t)WIDTH * 8) {
        for (int d = 0; d < DEPTH; d++)
            for (uint32_t w = 0; w < WIDTH; w++)
                atomic_store_explicit(
                    &a->counts[d][w],
                    atomic_load_explicit(&a->counts[d][w], memory_order_relaxed) >> 1,
                    memory_order_relaxed);
        atomic_store(&a->increments, 0);
    }
    pthread_mutex_unlock(&a->halving);
}

bool ss__emb_admission_count(ss__emb_admission *a, uint64_t table_id, uint64_t id) {
    uint64_t h = ss__mix64(id ^ ss__splitmix64(table_id));
    uint32_t least = UINT16_MAX;
    for (int d = 0; d < DEPTH; d++) {
        _Atomic uint16_t *c = &a->counts[d][ss__mix64(h + (uint64_t)d) & (WIDTH - 1)];
        uint16_t v = atomic_load_explicit(c, memory_order_relaxed);
        /* saturate rather than wrap to 0 */
        while (v < UINT16_MAX &&
               !atomic_compare_exchange_weak_explicit(c, &v, (uint16_t)(v + 1),
                                                      memory_order_relaxed, memory_order_relaxed)) {
        }
        const uint32_t now = v < UINT16_MAX ? v + 1u : v;
        least = now < least ? now : least;
    }
    if (atomic_fetch_add_explicit(&a->increments, 1, memory_order_relaxed) + 1 >=
        (uint64_t)WIDTH * 8)
        halve(a);
    return least >= a->k;
}
