/* The per-thread last error behind ss_last_error(), shared by every
 * public call of the library (hooks.c, tables.c, settings.c). Not exported
 * (the version script keeps only the public names). */
#ifndef SS_ERRORS_INTERNAL_H
#define SS_ERRORS_INTERNAL_H

#include "shadowsync/status.h"

/* Every public call starts with ss__err_begin() (forgets the previous
 * call's message) and returns through ss__err_end(st): a failure that
 * said nothing more gets ss_strerror's text, so ss_last_error() always
 * describes the last call that failed in this thread. */
void ss__err_begin(void);
ss_status ss__err_end(ss_status st);

/* Sets the message (printf-style; logged at debug level too) and returns
 * st. */
ss_status ss__err_set(ss_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
