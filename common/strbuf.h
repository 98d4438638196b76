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

/* The one shape of every "why" side channel: a call that can fail for a
 * reason worth telling takes (char *why, size_t whylen) and says it with
 * ss__why(); why may be NULL (nobody asked). */
void ss__why(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
