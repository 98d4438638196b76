/* Logging: one line per event, "ts level component key=value ...",
 * written to stderr. The threshold comes from ss__log_set_level() or the
 * SHADOWSYNC_LOG_LEVEL environment variable (debug|info|warn|error). */
#ifndef SHADOWSYNC_LOG_H
#define SHADOWSYNC_LOG_H

#include "shadowsync/status.h"

typedef enum ss__log_level {
    SS_LOG_DEBUG = 0,
    SS_LOG_INFO = 1,
    SS_LOG_WARN = 2,
    SS_LOG_ERROR = 3,
    SS_LOG_OFF = 4
} ss__log_level;

void ss__log_set_level(ss__log_level level);
ss__log_level ss__log_get_level(void);

/* Parses "debug", "info", "warn", "error" or "off". */
ss_status ss__log_level_parse(const char *text, ss__log_level *out);

/* fmt is the key=value part of the line, printf-style. */
void ss__log(ss__log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define SS_LOG_DEBUGF(comp, ...) ss__log(SS_LOG_DEBUG, comp, __VA_ARGS__)
#define SS_LOG_INFOF(comp, ...)  ss__log(SS_LOG_INFO, comp, __VA_ARGS__)
#define SS_LOG_WARNF(comp, ...)  ss__log(SS_LOG_WARN, comp, __VA_ARGS__)
#define SS_LOG_ERRORF(comp, ...) ss__log(SS_LOG_ERROR, comp, __VA_ARGS__)

#endif
