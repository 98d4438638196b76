#include "common/shard_map.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/names.h"
#include "common/private_files.h"
#include "common/read_file.h"

/* Every address of a comma-separated list, as flags take them. */
static bool addresses_valid(const char *list, const char *key, char *bad, size_t badlen) {
    char copy[SS_SHARD_MAP_PS_MAX], *save = NULL;
    snprintf(copy, sizeof copy, "%s", list);
    int n = 0;
    for (char *a = strtok_r(copy, ",", &save); a; a = strtok_r(NULL, ",", &save), n++)
        if (!ss__address_valid(a, key, bad, badlen))
            return false;
    if (n == 0)
        snprintf(bad, badlen, "an empty %s list", key);
    return n > 0;
}

/* One line (its newline cut): what it sets in out, or why not. */
static ss_status parse_line(char *line, ss__shard_map *out, bool *seen_epoch, bool *seen_ps,
                            bool *seen_from, char *why, size_t whylen) {
    char *p = line + strspn(line, " \t");
    if (!*p || *p == '#')
        return SS_OK;
    char key[16], value[SS_SHARD_MAP_PS_MAX];
    if (sscanf(p, "%15s %4095s", key, value) != 2) {
        snprintf(why, whylen,
                 "\"%.60s\" is not \"epoch N\", \"ps host:port,...\" or \"from "
                 "host:port,...\"",
                 p);
        return SS_ERR_INVALID_ARGUMENT;
    }
    if (!strcmp(key, "epoch") && !*seen_epoch) {
        if (!ss__shard_map_epoch_parse(value, strlen(value), &out->epoch) ||
            out->epoch > SS_SHARD_MAP_EPOCH_MAX) {
            snprintf(why, whylen, "epoch \"%.40s\": a whole number from 1 to 2^53", value);
            return SS_ERR_INVALID_ARGUMENT;
        }
        *seen_epoch = true;
        return SS_OK;
    }
    const bool ps = !strcmp(key, "ps"), from = !strcmp(key, "from");
    if ((ps && !*seen_ps) || (from && !*seen_from)) {
        char bad[200];
        if (!addresses_valid(value, key, bad, sizeof bad)) {
            snprintf(why, whylen, "%s", bad);
            return SS_ERR_INVALID_ARGUMENT;
        }
        snprintf(ps ? out->ps : out->from, sizeof out->ps, "%s", value);
        *(ps ? seen_ps : seen_from) = true;
        return SS_OK;
    }
    snprintf(why, whylen, "\"%s\" %s", key,
             !strcmp(key, "epoch") || ps || from ? "given twice"
                                                 : "is not a key (epoch, ps, from)");
    return SS_ERR_INVALID_ARGUMENT;
}

ss_status ss__shard_map_parse(const char *text, const char *name, ss__shard_map *out, char *why,
                              size_t whylen) {
    ss__shard_map m = {0};
    bool seen_epoch = false, seen_ps = false, seen_from = false;
    char line[SS_SHARD_MAP_PS_MAX + 64], what[400] = "";
    ss_status st = SS_OK;
    for (int no = 1; st == SS_OK && text && *text; no++) {
        size_t n = strcspn(text, "\n");
        if (n >= sizeof line) {
            snprintf(why, whylen, "shard map %s, line %d: longer than %zu bytes", name, no,
                     sizeof line - 1);
            return SS_ERR_INVALID_ARGUMENT;
        }
        memcpy(line, text, n);
        line[n] = '\0';
        line[strcspn(line, "\r")] = '\0';
        text += n + (text[n] == '\n');
        if ((st = parse_line(line, &m, &seen_epoch, &seen_ps, &seen_from, what, sizeof what)) !=
            SS_OK)
            snprintf(why, whylen, "shard map %s, line %d: %s", name, no, what);
    }
    if (st == SS_OK && (!seen_epoch || !seen_ps)) {
        snprintf(why, whylen, "shard map %s: no \"%s\" line", name, seen_epoch ? "ps" : "epoch");
        st = SS_ERR_INVALID_ARGUMENT;
    }
    if (st == SS_OK)
        *out = m;
    return st;
}

/* A map is a few lines: anything larger is not one. */
#define MAP_FILE_MAX (64 << 10)

ss_status ss__shard_map_read(const char *path, ss__shard_map *out, char *why, size_t whylen) {
    unsigned char *text;
    size_t n;
    if (!path) {
        snprintf(why, whylen, "shard map: no path");
        return SS_ERR_INVALID_ARGUMENT;
    }
    /* Every address in it gets this process's token: its owner checked. */
    const int fd = ss__operator_file_open(path, "shard map", why, whylen);
    if (fd < 0)
        return errno == ENOENT ? SS_ERR_NOT_FOUND : errno == EPERM ? SS_ERR_PERMISSION : SS_ERR_IO;
    ss_status st = ss__read_fd(fd, MAP_FILE_MAX, &text, &n);
    close(fd);
    if (st == SS_ERR_TOO_LARGE) {
        snprintf(why, whylen, "shard map %s: over 64 KiB: not a shard map", path);
        return SS_ERR_INVALID_ARGUMENT;
    }
    if (st != SS_OK) {
        snprintf(why, whylen, "shard map %s: %s", path,
                 st == SS_ERR_NO_MEMORY ? "out of memory" : strerror(errno));
        return st;
    }
    st = ss__shard_map_parse((char *)text, path, out, why, whylen);
    free(text);
    return st;
}

bool ss__shard_map_epoch_parse(const char *text, size_t len, uint64_t *epoch) {
    char digits[24];
    if (!text || len == 0 || len >= sizeof digits)
        return false;
    memcpy(digits, text, len);
    digits[len] = '\0';
    if (strspn(digits, "0123456789") != len)
        return false;
    errno = 0;
    unsigned long long e = strtoull(digits, NULL, 10);
    if (errno || e == 0)
        return false;
    *epoch = e;
    return true;
}

size_t ss__shard_map_split(const char *list, char *buf, size_t bufsize, const char **out,
                           size_t max) {
    snprintf(buf, bufsize, "%s", list ? list : "");
    size_t n = 0;
    char *save = NULL;
    for (char *a = strtok_r(buf, ",", &save); a && n < max; a = strtok_r(NULL, ",", &save))
        out[n++] = a;
    return n;
}

int ss__shard_map_index(const char *list, const char *address) {
    char buf[SS_SHARD_MAP_PS_MAX];
    const char *a[256];
    const size_t n = ss__shard_map_split(list, buf, sizeof buf, a, 256);
    for (size_t i = 0; address && i < n; i++)
        if (!strcmp(a[i], address))
            return (int)i;
    return -1;
}

bool ss__shard_map_newer(uint64_t serving, uint64_t epoch) {
    return epoch > serving && (serving == 0 || epoch - serving <= SS_SHARD_MAP_EPOCH_JUMP);
}
