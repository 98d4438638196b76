#include "common/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/names.h"

/* -1 = not yet initialised from the environment. */
static atomic_int log_threshold = -1;

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};
static const char *const format_names[] = {"text", "json"};

static atomic_int log_format = -1; /* -1: not yet read from the environment */

/* *slot, read from the environment variable var the first time (a value
 * that is not one of names: fallback; programs refuse it in
 * ss__flags_cli). */
static int setting_once(atomic_int *slot, const char *var, const char *const *names, int n,
                        int fallback) {
    int v = atomic_load(slot);
    if (v < 0) {
        v = ss__name_index(getenv(var), names, n);
        v = v < 0 ? fallback : v;
        atomic_store(slot, v);
    }
    return v;
}

ss_status ss__log_level_parse(const char *text, ss__log_level *out) {
    int i = ss__name_index(text, level_names, SS_LOG_OFF + 1);
    if (i < 0 || !out)
        return SS_ERR_INVALID_ARGUMENT;
    *out = (ss__log_level)i;
    return SS_OK;
}

void ss__log_set_level(ss__log_level level) {
    atomic_store(&log_threshold, (int)level);
}

ss__log_level ss__log_get_level(void) {
    return (ss__log_level)setting_once(&log_threshold, "SHADOWSYNC_LOG_LEVEL", level_names,
                                       SS_LOG_OFF + 1, SS_LOG_INFO);
}

ss_status ss__log_format_parse(const char *text, ss__log_format *out) {
    int i = ss__name_index(text, format_names, 2);
    if (i < 0 || !out)
        return SS_ERR_INVALID_ARGUMENT;
    *out = (ss__log_format)i;
    return SS_OK;
}

void ss__log_set_format(ss__log_format format) {
    atomic_store(&log_format, (int)format);
}

static ss__log_format format_now(void) {
    return (ss__log_format)setting_once(&log_format, "SHADOWSYNC_LOG_FORMAT", format_names, 2,
                                        SS_LOG_TEXT);
}

/* Appends to out[*at .. cap - 1), always terminated. */
static void put(char *out, size_t cap, size_t *at, const char *s, size_t n) {
    for (size_t i = 0; i < n && *at + 1 < cap; i++)
        out[(*at)++] = s[i];
    out[*at] = '\0';
}

/* s[0 .. n) as a JSON string, quotes included; \" in s is a quote when
 * unquote is set (a quoted key=value value). */
static void put_json_string(char *out, size_t cap, size_t *at, const char *s, size_t n,
                            bool unquote) {
    put(out, cap, at, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (unquote && c == '\\' && i + 1 < n && (s[i + 1] == '"' || s[i + 1] == '\\'))
            c = (unsigned char)s[++i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            put(out, cap, at, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            put(out, cap, at, esc, 6);
        } else {
            put(out, cap, at, (const char *)&c, 1);
        }
    }
    put(out, cap, at, "\"", 1);
}

/* The key=value text as JSON members (each after a comma); false, with
 * nothing written, when it does not read as key=value pairs. */
static bool put_json_pairs(char *out, size_t cap, size_t *at, const char *msg) {
    size_t start = *at;
    const char *p = msg;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        size_t k = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-");
        if (k == 0 || p[k] != '=')
            goto not_pairs;
        const char *v = p + k + 1;
        size_t n;
        bool quoted = *v == '"';
        if (quoted) {
            v++;
            for (n = 0; v[n] && v[n] != '"'; n++)
                if (v[n] == '\\' && v[n + 1])
                    n++;
            if (v[n] != '"')
                goto not_pairs;
        } else {
            n = strcspn(v, " ");
        }
        put(out, cap, at, ",", 1);
        put_json_string(out, cap, at, p, k, false);
        put(out, cap, at, ":", 1);
        put_json_string(out, cap, at, v, n, quoted);
        p = v + n + (quoted ? 1 : 0);
    }
    return true;
not_pairs:
    *at = start;
    out[start] = '\0';
    return false;
}

/* ss__log_render; pairs: a msg of key=value pairs becomes members. */
static size_t render(ss__log_format format, const char *ts, ss__log_level level,
                     const char *component, const char *msg, bool pairs, char *out, size_t cap) {
    if (cap < 2)
        return 0;
    size_t at = 0;
    out[0] = '\0';
    const char *lvl = level_names[level <= SS_LOG_OFF ? level : SS_LOG_OFF];
    component = component ? component : "-";
    if (format == SS_LOG_TEXT) {
        int n = snprintf(out, cap - 1, "%s %s %s %s", ts, lvl, component, msg);
        at = n < 0 ? 0 : ((size_t)n < cap - 1 ? (size_t)n : cap - 2);
    } else {
        put(out, cap - 1, &at, "{\"ts\":", 6);
        put_json_string(out, cap - 1, &at, ts, strlen(ts), false);
        put(out, cap - 1, &at, ",\"level\":", 9);
        put_json_string(out, cap - 1, &at, lvl, strlen(lvl), false);
        put(out, cap - 1, &at, ",\"component\":", 13);
        put_json_string(out, cap - 1, &at, component, strlen(component), false);
        if (!pairs || !put_json_pairs(out, cap - 1, &at, msg)) {
            put(out, cap - 1, &at, ",\"msg\":", 7);
            put_json_string(out, cap - 1, &at, msg, strlen(msg), false);
        }
        put(out, cap - 1, &at, "}", 1);
    }
    out[at++] = '\n';
    out[at] = '\0';
    return at;
}

size_t ss__log_render(ss__log_format format, const char *ts, ss__log_level level,
                      const char *component, const char *msg, char *out, size_t cap) {
    return render(format, ts, level, component, msg, true, out, cap);
}

static void timestamp(char *ts, size_t cap) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct tm tm;
    gmtime_r(&now.tv_sec, &tm);
    snprintf(ts, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, now.tv_nsec / 1000000);
}

void ss__log(ss__log_level level, const char *component, const char *fmt, ...) {
    if (level < ss__log_get_level() || level >= SS_LOG_OFF)
        return;
    char msg[1024], ts[96], line[2048];
    timestamp(ts, sizeof ts);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* One fputs per line so concurrent threads do not interleave fragments. */
    ss__log_render(format_now(), ts, level, component, msg, line, sizeof line);
    fputs(line, stderr);
}

/* "prog: msg" as it is (text) or as a JSON line of level at component
 * prog, to out. */
static void say_to(FILE *out, ss__log_level level, const char *prog, const char *fmt, va_list ap) {
    char msg[1024], ts[96], line[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (format_now() == SS_LOG_TEXT) {
        fprintf(out, "%s: %s\n", prog, msg);
    } else {
        char text[1200];
        snprintf(text, sizeof text, "%s: %s", prog, msg);
        timestamp(ts, sizeof ts);
        render(SS_LOG_JSON, ts, level, prog, text, false, line, sizeof line);
        fputs(line, out);
    }
    fflush(out);
}

void ss__say(const char *prog, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    say_to(stdout, SS_LOG_INFO, prog, fmt, ap);
    va_end(ap);
}

void ss__refuse(const char *prog, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    say_to(stderr, SS_LOG_ERROR, prog, fmt, ap);
    va_end(ap);
}
