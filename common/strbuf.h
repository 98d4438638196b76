/* A growable string for building replies (/status JSON, live views). */
#ifndef SHADOWSYNC_STRBUF_H
#define SHADOWSYNC_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

#include "shadowsync/status.h"

typedef struct ss__strbuf {
    char *data; /* NUL-terminated; NULL until the first append */
    size_t len, cap;
    bool failed; /* an allocation failed: the result is incomplete */
} ss__strbuf;

void ss__strbuf_printf(ss__strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hands the string over (caller frees): SS_ERR_NO_MEMORY if any append
 * failed (then nothing is handed over). */
ss_status ss__strbuf_take(ss__strbuf *b, char **out, size_t *len);
void ss__strbuf_free(ss__strbuf *b);

/* The library's one internal error rule (as RocksDB's errptr): a call
 * that can fail for a reason worth telling, and every constructor
 * (ss__*_create, _start, _open: tests/repo/test_error_rule.py), takes
 * (char *why, size_t whylen) as its last two arguments and says the
 * reason there with ss__why() (or returns ss__fail()); why may be NULL
 * (nobody asked). */
void ss__why(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* ss__why's text, then st: `return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "...")`. */
ss_status ss__fail(char *why, size_t whylen, ss_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
