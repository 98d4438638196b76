/* The per-thread last error behind ss_last_error() (errors_internal.h). */
#include <stdarg.h>
#include <stdio.h>

#include "common/log.h"
#include "shadowsync/shadowsync.h"
#include "trainer-hooks/errors_internal.h"

static _Thread_local char last_error[512];

const char *ss_last_error(void) {
    return last_error;
}

void ss__err_begin(void) {
    last_error[0] = '\0';
}

ss_status ss__err_end(ss_status st) {
    if (st != SS_OK && !last_error[0])
        snprintf(last_error, sizeof last_error, "%s", ss_strerror(st));
    return st;
}

ss_status ss__err_set(ss_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    SS_LOG_DEBUGF("hooks", "status=%s why=\"%s\"", ss_status_name(st), last_error);
    return st;
}
