/* The dense checkpoint file (layout in dense_checkpoint.h). */
#include "shadow/dense_checkpoint.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/byte_reader.h"
#include "common/finite.h"
#include "common/fnv.h"
#include "common/private_files.h"
#include "common/read_file.h"

static const char ckpt_magic[8] = {'S', 'S', 'D', 'E', 'N', 'S', 'E', '2'};
static const char ckpt_magic_v1[8] = {'S', 'S', 'D', 'E', 'N', 'S', 'E', '1'};
#define MAX_NAME       1024
#define MAX_GROUP_SIZE ((uint64_t)1 << 34)

/* n floats at p, which may be unaligned (a file's bytes), all finite? */
static bool floats_finite(const void *p, size_t n) {
    float block[1024];
    for (size_t i = 0; i < n; i += 1024) {
        const size_t k = n - i < 1024 ? n - i : 1024;
        memcpy(block, (const unsigned char *)p + i * sizeof(float), k * sizeof(float));
        if (!ss__all_finite(block, k))
            return false;
    }
    return true;
}

/* ---- writing ---- */

struct ss__dense_ckpt_writer {
    /* The new file itself (a random name beside path, 0600), written as
     * groups are put: no copy of the state in memory (a memory stream of
     * every group doubled the PS's memory during a checkpoint). */
    FILE *f;
    char path[4096], tmp[4104];
    uint64_t hash;
    uint32_t expected, written;
    bool ok, non_finite;
};

static void put(ss__dense_ckpt_writer *w, const void *p, size_t n) {
    if (w->ok && n && fwrite(p, 1, n, w->f) != n)
        w->ok = false;
    w->hash = ss__fnv1a(w->hash, p, n);
}

ss_status ss__dense_ckpt_begin(const char *path, uint32_t groups, ss__dense_ckpt_writer **out) {
    if (!path || !*path || !out || strlen(path) >= sizeof((ss__dense_ckpt_writer *)0)->path)
        return SS_ERR_INVALID_ARGUMENT;
    ss__dense_ckpt_writer *w = calloc(1, sizeof *w);
    if (!w)
        return SS_ERR_NO_MEMORY;
    snprintf(w->path, sizeof w->path, "%s", path);
    /* Callers put a group while holding its lock: the writes go to the
     * page cache through a 1 MiB buffer; the fsync and the rename wait
     * for commit, under no lock. */
    int fd = ss__private_tmp_open(w->path, w->tmp, sizeof w->tmp);
    w->f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!w->f) {
        if (fd >= 0) {
            close(fd);
            unlink(w->tmp);
        }
        free(w);
        return SS_ERR_IO;
    }
    setvbuf(w->f, NULL, _IOFBF, 1 << 20);
    w->hash = SS_FNV_OFFSET;
    w->expected = groups;
    w->ok = true;
    put(w, ckpt_magic, sizeof ckpt_magic);
    put(w, &groups, sizeof groups);
    *out = w;
    return SS_OK;
}

void ss__dense_ckpt_put(ss__dense_ckpt_writer *w, const ss__dense_ckpt_group *g) {
    uint32_t len = (uint32_t)strlen(g->name);
    uint64_t n = g->n;
    uint8_t has_central = g->central != NULL, has_mean = g->mean != NULL;
    put(w, &len, sizeof len);
    put(w, g->name, len);
    put(w, &n, sizeof n);
    put(w, &has_central, 1);
    put(w, &has_mean, 1);
    put(w, &g->mean_round, sizeof g->mean_round);
    uint8_t has_bmuf = g->bmuf_w && g->bmuf_m, nesterov = g->bmuf_nesterov;
    /* A value that is not finite never reaches the file: the whole
     * checkpoint fails (the last good one stays), since a restore of it
     * would poison every member. */
    if ((has_central && !floats_finite(g->central, g->n)) ||
        (has_mean && !floats_finite(g->mean, g->n)) ||
        (has_bmuf && (!floats_finite(g->bmuf_w, g->n) || !floats_finite(g->bmuf_m, g->n)))) {
        w->ok = false;
        w->non_finite = true;
    }
    put(w, &has_bmuf, 1);
    if (has_bmuf) {
        put(w, &g->bmuf_eta, sizeof g->bmuf_eta);
        put(w, &g->bmuf_zeta, sizeof g->bmuf_zeta);
        put(w, &nesterov, 1);
        put(w, g->bmuf_w, g->n * sizeof(float));
        put(w, g->bmuf_m, g->n * sizeof(float));
    }
    if (has_central)
        put(w, g->central, g->n * sizeof(float));
    if (has_mean)
        put(w, g->mean, g->n * sizeof(float));
    w->written++;
}

ss_status ss__dense_ckpt_commit(ss__dense_ckpt_writer *w) {
    if (!w)
        return SS_ERR_INVALID_ARGUMENT;
    if (w->written != w->expected)
        w->ok = false;
    uint64_t hash = w->hash;
    put(w, &hash, sizeof hash);
    /* Data on disk before the rename makes it visible. */
    if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0)
        w->ok = false;
    if (fclose(w->f) != 0)
        w->ok = false;
    ss_status st = SS_OK;
    if (!w->ok || rename(w->tmp, w->path) != 0) {
        unlink(w->tmp);
        st = w->non_finite ? SS_ERR_NON_FINITE : SS_ERR_IO;
    } else {
        ss__fsync_parent_dir(w->path);
    }
    free(w);
    return st;
}

/* ---- reading ---- */

struct ss__dense_ckpt_file {
    unsigned char *buf;
    ss__dense_ckpt_group *groups;
    char (*names)[MAX_NAME];
    size_t count;
};

/* Walks the groups of a file whose hash matched; r->end excludes the hash. */
static ss_status parse_groups(ss__dense_ckpt_file *f, ss__byte_reader *r) {
    char magic[8];
    uint32_t count;
    if (!ss__take(r, magic, 8) || !ss__take(r, &count, sizeof count))
        return SS_ERR_PARSE;
    const bool v2 = !memcmp(magic, ckpt_magic, 8);
    if (!v2 && memcmp(magic, ckpt_magic_v1, 8))
        return SS_ERR_PARSE;
    /* Every group takes at least 22 bytes: a count beyond that is a lie. */
    if (count > ss__bytes_left(r) / 22 + 1)
        return SS_ERR_PARSE;
    f->groups = calloc(count ? count : 1, sizeof *f->groups);
    f->names = calloc(count ? count : 1, sizeof *f->names);
    if (!f->groups || !f->names)
        return SS_ERR_NO_MEMORY;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t len;
        uint64_t n, round;
        uint8_t has_central, has_mean, has_bmuf = 0;
        if (!ss__take(r, &len, sizeof len) || len == 0 || len >= MAX_NAME ||
            !ss__take(r, f->names[i], len))
            return SS_ERR_PARSE;
        f->names[i][len] = '\0';
        if (!ss__take(r, &n, sizeof n) || n == 0 || n > MAX_GROUP_SIZE ||
            !ss__take(r, &has_central, 1) || !ss__take(r, &has_mean, 1) || has_central > 1 ||
            has_mean > 1 || !ss__take(r, &round, sizeof round) ||
            (v2 && !ss__take(r, &has_bmuf, 1)) || has_bmuf > 1)
            return SS_ERR_PARSE;
        ss__dense_ckpt_group *g = &f->groups[i];
        if (has_bmuf) {
            uint8_t nesterov;
            if (!ss__take(r, &g->bmuf_eta, sizeof g->bmuf_eta) ||
                !ss__take(r, &g->bmuf_zeta, sizeof g->bmuf_zeta) || !ss__take(r, &nesterov, 1) ||
                nesterov > 1 || ss__bytes_left(r) < 2 * n * sizeof(float))
                return SS_ERR_PARSE;
            g->bmuf_nesterov = nesterov;
            if (!floats_finite(r->p, 2 * n))
                return SS_ERR_NON_FINITE;
            g->bmuf_w = r->p;
            g->bmuf_m = r->p + n * sizeof(float);
            r->p += 2 * n * sizeof(float);
        }
        if (ss__bytes_left(r) < (has_central + has_mean) * n * sizeof(float))
            return SS_ERR_PARSE;
        if (!floats_finite(r->p, (has_central + has_mean) * n))
            return SS_ERR_NON_FINITE; /* written by a build that did not check */
        g->name = f->names[i];
        g->n = (size_t)n;
        g->mean_round = round;
        if (has_central) {
            g->central = r->p;
            r->p += n * sizeof(float);
        }
        if (has_mean) {
            g->mean = r->p;
            r->p += n * sizeof(float);
        }
        f->count++;
    }
    return r->p == r->end ? SS_OK : SS_ERR_PARSE;
}

ss_status ss__dense_ckpt_parse(uint8_t *buf, size_t len, bool verify_hash,
                               ss__dense_ckpt_file **out) {
    if ((!buf && len) || !out) {
        free(buf);
        return SS_ERR_INVALID_ARGUMENT;
    }
    ss__dense_ckpt_file *f = calloc(1, sizeof *f);
    if (!f) {
        free(buf);
        return SS_ERR_NO_MEMORY;
    }
    f->buf = buf;
    uint64_t stored;
    ss_status st = SS_OK;
    if (len < sizeof ckpt_magic + sizeof(uint32_t) + sizeof stored)
        st = SS_ERR_PARSE;
    if (st == SS_OK && verify_hash) {
        memcpy(&stored, f->buf + len - sizeof stored, sizeof stored);
        if (ss__fnv1a(SS_FNV_OFFSET, f->buf, len - sizeof stored) != stored)
            st = SS_ERR_PARSE;
    }
    if (st == SS_OK) {
        ss__byte_reader r = {.p = f->buf, .end = f->buf + len - sizeof stored};
        st = parse_groups(f, &r);
    }
    if (st != SS_OK) {
        ss__dense_ckpt_close(f);
        return st;
    }
    *out = f;
    return SS_OK;
}

ss_status ss__dense_ckpt_read(const char *path, ss__dense_ckpt_file **out) {
    if (!path || !out)
        return SS_ERR_INVALID_ARGUMENT;
    uint8_t *buf = NULL;
    size_t len = 0;
    /* An operator may restore one from a backup, as a link too. */
    ss_status st = ss__read_file(path, SS_FILE_OPERATORS, SIZE_MAX, &buf, &len);
    if (st != SS_OK)
        return st;
    return ss__dense_ckpt_parse(buf, len, true, out);
}

size_t ss__dense_ckpt_count(const ss__dense_ckpt_file *f) {
    return f ? f->count : 0;
}

const ss__dense_ckpt_group *ss__dense_ckpt_group_at(const ss__dense_ckpt_file *f, size_t i) {
    return f && i < f->count ? &f->groups[i] : NULL;
}

void ss__dense_ckpt_close(ss__dense_ckpt_file *f) {
    if (!f)
        return;
    free(f->buf);
    free(f->groups);
    free(f->names);
    free(f);
}
