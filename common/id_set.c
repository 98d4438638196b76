/* The per-thread id set (id_set.h). */
#include "common/id_set.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"

typedef struct id_set {
    uint64_t *keys;
    size_t *index;   /* the key's first position in the caller's output */
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
        free(s->index);
        free(s->stamp);
        free(s);
    }
}

static void make_key(void) {
    (void)pthread_key_create(&set_key, set_free);
}

/* This thread's set with room for 2n ids, its stamp moved on; NULL out of
 * memory. */
static id_set *thread_set(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
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
        free(s->index);
        free(s->stamp);
        s->keys = malloc(cap * sizeof *s->keys);
        s->index = malloc(cap * sizeof *s->index);
        s->stamp = calloc(cap, sizeof *s->stamp);
        s->cap = s->keys && s->index && s->stamp ? cap : 0;
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

/* id's slot in s: where it is, or the free one where it goes. */
static size_t slot_of(const id_set *s, uint64_t id) {
    size_t j = (size_t)((id * SS_GOLDEN64) >> 32) & (s->cap - 1); /* Fibonacci hashing */
    while (s->stamp[j] == s->call && s->keys[j] != id)
        j = (j + 1) & (s->cap - 1);
    return j;
}

int ss__ids_find_duplicate(const uint64_t *ids, size_t n, uint64_t *dup) {
    id_set *s = thread_set(n);
    if (!s)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const size_t j = slot_of(s, ids[i]);
        if (s->stamp[j] == s->call) {
            *dup = ids[i];
            return 1;
        }
        s->stamp[j] = s->call;
        s->keys[j] = ids[i];
    }
    return 0;
}

ss_status ss__ids_unique(const uint64_t *ids, size_t n, uint64_t *uniq, size_t *map, size_t *m) {
    id_set *s = thread_set(n);
    if (!s)
        return SS_ERR_NO_MEMORY;
    *m = 0;
    for (size_t i = 0; i < n; i++) {
        const size_t j = slot_of(s, ids[i]);
        if (s->stamp[j] != s->call) {
            s->stamp[j] = s->call;
            s->keys[j] = ids[i];
            s->index[j] = *m;
            uniq[(*m)++] = ids[i];
        }
        map[i] = s->index[j];
    }
    return SS_OK;
}
