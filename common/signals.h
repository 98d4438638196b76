/* Signals for a daemon's main thread. */
#ifndef SS_COMMON_SIGNALS_H
#define SS_COMMON_SIGNALS_H

#include <signal.h>

/* Blocks SIGINT and SIGTERM (and `extra`, 0 = none) in the calling thread
 * and every thread it starts later, so that they reach only sigwait(set)
 * and not a library's thread; ignores SIGPIPE (a peer gone is an error
 * return, not a death). Call first in main. */
void ss__signals_block(sigset_t *set, int extra);

#endif
