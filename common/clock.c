#include "common/clock.h"

#include <errno.h>
#include <time.h>

uint64_t ss__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double ss__now_s(void) {
    return (double)ss__now_ns() * 1e-9;
}

uint64_t ss__unix_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void ss__sleep_ns(uint64_t ns) {
    struct timespec req = {.tv_sec = (time_t)(ns / 1000000000ull),
                           .tv_nsec = (long)(ns % 1000000000ull)};
    while (nanosleep(&req, &req) != 0 && errno == EINTR) {
    }
}

void ss__cond_init_monotonic(pthread_cond_t *c) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(c, &ca);
    pthread_condattr_destroy(&ca);
}

struct timespec ss__deadline_in(uint64_t ns) {
    uint64_t t = ss__now_ns() + ns;
    return (struct timespec){.tv_sec = (time_t)(t / 1000000000ull),
                             .tv_nsec = (long)(t % 1000000000ull)};
}
