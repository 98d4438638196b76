#include "common/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void ss__strbuf_printf(ss__strbuf *b, const char *fmt, ...) {
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int k = vsnprintf(b->data ? b->data + b->len : NULL, b->data ? room : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->failed = true;
            return;
        }
        if (b->data && (size_t)k < room) {
            b->len += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + (size_t)k + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) {
            b->failed = true;
            return;
        }
        if (!b->data)
            d[0] = '\0';
        b->data = d;
        b->cap = cap;
    }
}

ss_status ss__strbuf_take(ss__strbuf *b, char **out, size_t *len) {
    if (b->failed || !b->data) {
        bool failed = b->failed;
        ss__strbuf_free(b);
        if (failed)
            return SS_ERR_NO_MEMORY;
        *out = calloc(1, 1);
        if (len)
            *len = 0;
        return *out ? SS_OK : SS_ERR_NO_MEMORY;
    }
    *out = b->data;
    if (len)
        *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return SS_OK;
}

void ss__strbuf_free(ss__strbuf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = false;
}

void ss__why(char *why, size_t whylen, const char *fmt, ...) {
    if (!why || whylen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
}

ss_status ss__fail(char *why, size_t whylen, ss_status st, const char *fmt, ...) {
    if (why && whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return st;
}
