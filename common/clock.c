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

void ss__sleep_ns(uint64_t ns) {
    struct timespec req = {.tv_sec = (time_t)(ns / 1000000000ull),
                           .tv_nsec = (long)(ns % 1000000000ull)};
    while (nanosleep(&req, &req) != 0 && errno == EINTR) {
    }
}
