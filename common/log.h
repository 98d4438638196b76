/* Logging: one line per event, "ts level component key=value ...",
 * written to stderr; or, in the json format, one JSON object per line
 * ({"ts":..., "level":..., "component":..., and each key's value as a
 * string}) for log pipelines. The threshold comes from
 * ss__log_set_level() or SHADOWSYNC_LOG_LEVEL (debug|info|warn|error);
 * the format from ss__log_set_format() (every program's --log-format) or
 * SHADOWSYNC_LOG_FORMAT (text|json). */
#ifndef SHADOWSYNC_LOG_H
#define SHADOWSYNC_LOG_H

#include <stddef.h>

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

typedef enum ss__log_format { SS_LOG_TEXT = 0, SS_LOG_JSON = 1 } ss__log_format;

void ss__log_set_format(ss__log_format format);
/* Parses "text" or "json". */
ss_status ss__log_format_parse(const char *text, ss__log_format *out);

/* One line as format writes it, newline included, into out (cut short to
 * cap - 1 bytes); returns its length. msg is the key=value text: in json
 * each key=value (a value in double quotes, \" inside it a quote) is a
 * member; what does not read as key=value goes whole into "msg". */
size_t ss__log_render(ss__log_format format, const char *ts, ss__log_level level,
                      const char *component, const char *msg, char *out, size_t cap);

/* fmt is the key=value part of the line, printf-style. */
void ss__log(ss__log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A program's own line on stdout, "prog: text" (its ready and stopped
 * lines, which scripts and operators read), flushed: so in the text
 * format; in the json format one JSON object ({"ts", "level": "info",
 * "component": prog, "msg": "prog: text"}), so that every line a daemon
 * writes parses as JSON. Whatever the log level. */
void ss__say(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A daemon's refusal (a bad flag, a file it cannot use) on stderr, as
 * ss__say writes (level error in JSON). */
void ss__refuse(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define SS_LOG_DEBUGF(comp, ...) ss__log(SS_LOG_DEBUG, comp, __VA_ARGS__)
#define SS_LOG_INFOF(comp, ...)  ss__log(SS_LOG_INFO, comp, __VA_ARGS__)
#define SS_LOG_WARNF(comp, ...)  ss__log(SS_LOG_WARN, comp, __VA_ARGS__)
#define SS_LOG_ERRORF(comp, ...) ss__log(SS_LOG_ERROR, comp, __VA_ARGS__)

#endif
