#include "common/ticker.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/clock.h"
#include "common/strbuf.h"

struct ss__ticker {
    uint64_t period_ns;      /* the next wait */
    void (*tick)(void *ctx); /* every period_ns, or: */
    uint64_t (*paced)(void *ctx);
    void *ctx;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stop;
};

static ss_status start(const ss__ticker *how, ss__ticker **out);

static void *ticker_main(void *arg) {
    ss__ticker *t = arg;
    pthread_mutex_lock(&t->lock);
    while (!t->stop) {
        /* The whole wait (CLOCK_MONOTONIC): only stop ends it early, a
         * spurious wake-up goes back to sleep. */
        struct timespec ts = ss__deadline_in(t->period_ns);
        while (!t->stop && pthread_cond_timedwait(&t->cond, &t->lock, &ts) != ETIMEDOUT) {
        }
        if (t->stop)
            break;
        pthread_mutex_unlock(&t->lock);
        uint64_t next = t->period_ns;
        if (t->paced)
            next = t->paced(t->ctx);
        else
            t->tick(t->ctx);
        pthread_mutex_lock(&t->lock);
        t->period_ns = next ? next : 1;
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

ss_status ss__ticker_start(uint64_t period_ns, void (*tick)(void *ctx), void *ctx, ss__ticker **out,
                           char *why, size_t whylen) {
    if (!period_ns || !tick || !out)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "a ticker needs a period and a tick");
    const ss_status st =
        start(&(ss__ticker){.period_ns = period_ns, .tick = tick, .ctx = ctx}, out);
    return st == SS_OK ? st : ss__fail(why, whylen, st, "no thread for a ticker");
}

ss_status ss__ticker_start_paced(uint64_t first_ns, uint64_t (*tick)(void *ctx), void *ctx,
                                 ss__ticker **out, char *why, size_t whylen) {
    if (!tick || !out)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "a ticker needs a tick");
    const ss_status st =
        start(&(ss__ticker){.period_ns = first_ns ? first_ns : 1, .paced = tick, .ctx = ctx}, out);
    return st == SS_OK ? st : ss__fail(why, whylen, st, "no thread for a ticker");
}

static ss_status start(const ss__ticker *how, ss__ticker **out) {
    ss__ticker *t = calloc(1, sizeof *t);
    if (!t)
        return SS_ERR_NO_MEMORY;
    *t = *how;
    pthread_mutex_init(&t->lock, NULL);
    ss__cond_init_monotonic(&t->cond);
    if (pthread_create(&t->thread, NULL, ticker_main, t) != 0) {
        pthread_mutex_destroy(&t->lock);
        pthread_cond_destroy(&t->cond);
        free(t);
        return SS_ERR_NO_MEMORY;
    }
    *out = t;
    return SS_OK;
}

void ss__ticker_stop(ss__ticker *t) {
    if (!t)
        return;
    pthread_mutex_lock(&t->lock);
    t->stop = true;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->cond);
    free(t);
}
