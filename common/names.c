#include "common/names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool ss__name_valid(const char *name) {
    size_t n = name ? strnlen(name, SS_NAME_MAX) : 0;
    if (n == 0 || n == SS_NAME_MAX || name[0] == '.') /* never ".", ".." or hidden */
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

/* Digits, then the character end; returns where it stopped or NULL. */
static const char *digits_then(const char *s, char end) {
    const char *d = s;
    while (*d >= '0' && *d <= '9')
        d++;
    return d > s && d - s <= 20 && *d == end ? d + 1 : NULL;
}

bool ss__ps_group_name_valid(const char *name) {
    if (!name)
        return false;
    size_t base = strcspn(name, "[");
    if (base == 0 || base >= SS_NAME_MAX)
        return false;
    char head[SS_NAME_MAX];
    memcpy(head, name, base);
    head[base] = '\0';
    if (!ss__name_valid(head))
        return false;
    if (name[base] == '\0')
        return true;
    const char *p = digits_then(name + base + 1, ':');
    p = p ? digits_then(p, ')') : NULL;
    return p && *p == '\0';
}

bool ss__ps_chunk_range(const char *name, size_t *base_len, uint64_t *lo, uint64_t *hi) {
    const char *open = ss__ps_group_name_valid(name) ? strchr(name, '[') : NULL;
    if (!open)
        return false;
    /* The rule checked the shape: digits, ':', digits, ')'. */
    *base_len = (size_t)(open - name);
    *lo = strtoull(open + 1, NULL, 10);
    *hi = strtoull(strchr(open, ':') + 1, NULL, 10);
    return true;
}

bool ss__address_valid(const char *address, const char *flag, char *why, size_t whylen) {
    const char *bad = NULL;
    const char *colon = address ? strrchr(address, ':') : NULL;
    size_t hostlen = colon ? (size_t)(colon - address) : 0;
    if (!address || !*address)
        bad = "an empty address";
    else if (!colon)
        bad = "no port";
    else if (hostlen == 0)
        bad = "no host";
    else if (address[0] == '[' ? address[hostlen - 1] != ']' || hostlen < 3
                               : memchr(address, ':', hostlen) != NULL)
        bad = "an IPv6 host goes in brackets";
    else if (strcspn(address, " \t\n") != strlen(address))
        bad = "a space in it";
    else {
        const char *p = colon + 1;
        unsigned long port = 0;
        size_t digits = 0;
        for (; *p >= '0' && *p <= '9' && digits < 6; p++, digits++)
            port = port * 10 + (unsigned long)(*p - '0');
        if (digits == 0 || *p || port > 65535)
            bad = "the port is not a number in 0-65535";
    }
    if (bad && why && whylen)
        snprintf(why, whylen, "%s \"%s\": %s (%s)", flag, address ? address : "", bad,
                 SS_ADDRESS_RULE);
    return bad == NULL;
}

size_t ss__address_host_len(const char *address) {
    const char *colon = strrchr(address, ':');
    return colon ? (size_t)(colon - address) : strlen(address);
}

bool ss__address_split(const char *address, char *host, size_t hostlen, unsigned *port) {
    if (!ss__address_valid(address, "", NULL, 0))
        return false;
    const char *colon = strrchr(address, ':'), *h = address;
    size_t hl = (size_t)(colon - address);
    if (h[0] == '[') { /* valid: "[...]" */
        h++;
        hl -= 2;
    }
    if (hl >= hostlen)
        return false;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (unsigned)strtoul(colon + 1, NULL, 10);
    return true;
}

int ss__name_index(const char *text, const char *const *names, size_t n) {
    for (size_t i = 0; text && i < n; i++)
        if (names[i] && !strcmp(text, names[i]))
            return (int)i;
    return -1;
}
