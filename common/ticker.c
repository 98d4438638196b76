#include "common/ticker.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/clock.h"

struct ss__ticker {
    uint64_t period_ns;
    void (*tick)(void *ctx);
    void *ctx;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stop;
};

static void *ticker_main(void *arg) {
    ss__ticker *t = arg;
    pthread_mutex_lock(&t->lock);
    while (!t->stop) {
        struct timespec ts = ss__deadline_in(t->period_ns);
        pthread_cond_timedwait(&t->cond, &t->lock, &ts); /* CLOCK_MONOTONIC */
        if (t->stop)
            break;
        pthread_mutex_unlock(&t->lock);
        t->tick(t->ctx);
        pthread_mutex_lock(&t->lock);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

ss_status ss__ticker_start(uint64_t period_ns, void (*tick)(void *ctx), void *ctx,
                           ss__ticker **out) {
    if (!period_ns || !tick || !out)
        return SS_ERR_INVALID_ARGUMENT;
    ss__ticker *t = calloc(1, sizeof *t);
    if (!t)
        return SS_ERR_NO_MEMORY;
    *t = (ss__ticker){.period_ns = period_ns, .tick = tick, .ctx = ctx};
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
