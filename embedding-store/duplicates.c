/* The duplicate-id check (duplicates_internal.h): an open-addressing set
 * of at least 2n slots (a sort was 8% of a shard's CPU on small batches),
 * kept per thread between calls. Allocating and clearing it per call (a
 * 64 KiB malloc and an 8 KiB calloc for 4,096 ids) cost 5-10% of a
 * lookup's time in the store: a slot is in the set when its stamp is
 * this call's, so nothing is cleared. */
#include "embedding-store/duplicates_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct id_set {
    uint64_t *keys;
    uint32_t *stamp; /* a slot holds keys[j] when stamp[j] == the call's */
    size_t cap;
    uint32_t call;
} id_set;

static pthread_key_t set_key;
static pthread_once_t set_once = PTHREAD_ONCE_INIT;

static void set_free(void *p) {
    id_set *s = p;
    if (s) {
        free(s->keys);
        free(s->stamp);
        free(s);
    }
}

static void make_key(void) {
    (void)pthread_key_create(&set_key, set_free);
}

/* This thread's set with room for cap slots, its stamp moved on; NULL out
 * of memory. */
static id_set *thread_set(size_t cap) {
    pthread_once(&set_once, make_key);
    id_set *s = pthread_getspecific(set_key);
    if (!s) {
        if (!(s = calloc(1, sizeof *s)) || pthread_setspecific(set_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    if (s->cap < cap) {
        free(s->keys);
        free(s->stamp);
        s->keys = malloc(cap * sizeof *s->keys);
        s->stamp = calloc(cap, sizeof *s->stamp);
        s->cap = s->keys && s->stamp ? cap : 0;
        s->call = 0;
        if (!s->cap)
            return NULL;
    }
    if (++s->call == 0) { /* wrapped: stamps of 2^32 calls ago would read as this one's */
        memset(s->stamp, 0, s->cap * sizeof *s->stamp);
        s->call = 1;
    }
    return s;
}

int ss__emb_find_duplicate(const uint64_t *ids, size_t n, uint64_t *dup) {
    size_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    id_set *s = thread_set(cap);
    if (!s)
        return -1;
    const uint32_t now = s->call;
    for (size_t i = 0; i < n; i++) {
        uint64_t h = ids[i] * 0x9e3779b97f4a7c15ull; /* Fibonacci hashing: the high bits */
        size_t j = (size_t)(h >> 32) & (cap - 1);
        while (s->stamp[j] == now && s->keys[j] != ids[i])
            j = (j + 1) & (cap - 1);
        if (s->stamp[j] == now) {
            *dup = ids[i];
            return 1;
        }
        s->stamp[j] = now;
        s->keys[j] = ids[i];
    }
    return 0;
}
