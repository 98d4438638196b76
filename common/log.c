#include "common/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* -1 = not yet initialised from the environment. */
static atomic_int log_threshold = -1;

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

ss_status ss__log_level_parse(const char *text, ss__log_level *out) {
    if (!text || !out)
        return SS_ERR_INVALID_ARGUMENT;
    for (int i = 0; i <= SS_LOG_OFF; i++) {
        if (strcmp(text, level_names[i]) == 0) {
            *out = (ss__log_level)i;
            return SS_OK;
        }
    }
    return SS_ERR_INVALID_ARGUMENT;
}

void ss__log_set_level(ss__log_level level) {
    atomic_store(&log_threshold, (int)level);
}

ss__log_level ss__log_get_level(void) {
    int lvl = atomic_load(&log_threshold);
    if (lvl < 0) {
        ss__log_level parsed = SS_LOG_INFO;
        const char *env = getenv("SHADOWSYNC_LOG_LEVEL");
        if (env && ss__log_level_parse(env, &parsed) != SS_OK)
            parsed = SS_LOG_INFO;
        lvl = (int)parsed;
        atomic_store(&log_threshold, lvl);
    }
    return (ss__log_level)lvl;
}

void ss__log(ss__log_level level, const char *component, const char *fmt, ...) {
    if (level < ss__log_get_level() || level >= SS_LOG_OFF)
        return;
    char line[1024];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int off =
        snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s ",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 ts.tv_nsec / 1000000, level_names[level], component ? component : "-");
    if (off < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    if ((size_t)off < sizeof line)
        vsnprintf(line + off, sizeof line - (size_t)off, fmt, ap);
    va_end(ap);
    /* One fputs per line so concurrent threads do not interleave fragments. */
    size_t len = strnlen(line, sizeof line - 2);
    line[len] = '\n';
    line[len + 1] = '\0';
    fputs(line, stderr);
}
