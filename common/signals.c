#include "common/signals.h"

#include <pthread.h>

void ss__signals_block(sigset_t *set, int extra) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    if (extra)
        sigaddset(set, extra);
    pthread_sigmask(SIG_BLOCK, set, NULL);
    signal(SIGPIPE, SIG_IGN);
}
