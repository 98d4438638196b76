#include "embedding-store/delta_file.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/byte_reader.h"
#include "common/fd_io.h"
#include "common/finite.h"
#include "common/read_file.h"
#include "common/strbuf.h"
#include <zlib.h>

static const char delta_magic[8] = {'S', 'S', 'E', 'M', 'B', 'D', '0', '1'};
#define HEADER_BYTES (8 + 8 + 1 + 8)
#define WBUF         (1u << 20)

struct ss__emb_delta_writer {
    int fd;
    char path[4096];
    uLong crc;               /* zlib's CRC-32 of every byte written so far */
    size_t row_floats;       /* of the current table */
    ss__emb_delta_info info; /* what it holds so far */
    bool failed;
    size_t len;
    unsigned char buf[WBUF];
};

/* zlib's CRC-32 moved over n bytes, in the parts crc32() takes. */
static uLong crc_update(uLong c, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t off = 0; off < n;) {
        const size_t k = n - off < ((size_t)1 << 30) ? n - off : ((size_t)1 << 30);
        c = crc32(c, b + off, (uInt)k);
        off += k;
    }
    return c;
}

static void flush_buf(ss__emb_delta_writer *w) {
    if (!w->failed && !ss__write_all(w->fd, w->buf, w->len))
        w->failed = true;
    w->len = 0;
}

static void put(ss__emb_delta_writer *w, const void *p, size_t n) {
    w->crc = crc_update(w->crc, p, n);
    const unsigned char *b = p;
    while (n) {
        if (w->len == WBUF)
            flush_buf(w);
        size_t k = n < WBUF - w->len ? n : WBUF - w->len;
        memcpy(w->buf + w->len, b, k);
        w->len += k;
        b += k;
        n -= k;
    }
}

static void put_u32(ss__emb_delta_writer *w, uint32_t v) {
    put(w, &v, 4);
}

static void put_u64(ss__emb_delta_writer *w, uint64_t v) {
    put(w, &v, 8);
}

ss_status ss__emb_delta_begin(const char *path, uint64_t seq, bool base, uint64_t written_ms,
                              ss__emb_delta_writer **out) {
    ss__emb_delta_writer *w = malloc(sizeof *w);
    if (!w)
        return SS_ERR_NO_MEMORY;
    snprintf(w->path, sizeof w->path, "%s", path);
    w->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (w->fd < 0) {
        free(w);
        return SS_ERR_IO;
    }
    w->crc = crc32(0L, Z_NULL, 0);
    w->failed = false;
    w->len = 0;
    w->row_floats = 0;
    w->info = (ss__emb_delta_info){.seq = seq, .base = base, .written_ms = written_ms};
    put(w, delta_magic, sizeof delta_magic);
    put_u64(w, seq);
    const unsigned char b = base;
    put(w, &b, 1);
    put_u64(w, written_ms);
    *out = w;
    return SS_OK;
}

void ss__emb_delta_table(ss__emb_delta_writer *w, const ss__emb_spec *spec) {
    const uint32_t nlen = (uint32_t)strlen(spec->name);
    put(w, "S", 1);
    put_u32(w, nlen);
    put(w, spec->name, nlen);
    put_u32(w, spec->dim);
    put_u32(w, (uint32_t)spec->optimizer);
    put(w, &spec->lr, 4);
    put(w, &spec->eps, 4);
    put(w, &spec->init_scale, 4);
    w->row_floats = ss__emb_row_floats(spec);
    w->info.tables++;
}

void ss__emb_delta_written(const ss__emb_delta_writer *w, ss__emb_delta_info *out) {
    *out = w->info;
}

ss_status ss__emb_delta_put(void *ctx, const uint64_t *ids, const float *rows, size_t n) {
    ss__emb_delta_writer *w = ctx;
    for (size_t off = 0; off < n;) { /* records of at most 2^20 rows */
        const size_t k = n - off < ((size_t)1 << 20) ? n - off : ((size_t)1 << 20);
        put(w, rows ? "R" : "D", 1);
        put_u32(w, (uint32_t)k);
        put(w, ids + off, k * 8);
        if (rows)
            put(w, rows + off * w->row_floats, k * w->row_floats * sizeof(float));
        off += k;
    }
    if (rows)
        w->info.rows += n;
    else
        w->info.deletions += n;
    return w->failed ? SS_ERR_IO : SS_OK;
}

static void discard(ss__emb_delta_writer *w) {
    close(w->fd);
    unlink(w->path);
    free(w);
}

ss_status ss__emb_delta_commit(ss__emb_delta_writer *w) {
    put(w, "Z", 1);
    const uint32_t c = (uint32_t)w->crc;
    put(w, &c, 4);
    flush_buf(w);
    if (w->failed || fsync(w->fd) != 0) {
        discard(w);
        return SS_ERR_IO;
    }
    if (close(w->fd) != 0) {
        unlink(w->path);
        free(w);
        return SS_ERR_IO;
    }
    free(w);
    return SS_OK;
}

void ss__emb_delta_abort(ss__emb_delta_writer *w) {
    if (w)
        discard(w);
}

struct ss__emb_delta_file {
    unsigned char *buf;
    size_t len; /* without the checksum */
    ss__emb_delta_info info;
};

static uint32_t checksum(const unsigned char *p, size_t n) {
    return (uint32_t)crc_update(crc32(0L, Z_NULL, 0), p, n);
}

static ss_status parse_error(char *why, size_t whylen, const char *what) {
    ss__why(why, whylen, "%s", what);
    return SS_ERR_PARSE;
}

/* A table record's spec; false when it is not a valid one. */
static bool take_spec(ss__byte_reader *c, ss__emb_spec *spec) {
    uint32_t nlen, opt;
    memset(spec, 0, sizeof *spec);
    if (!ss__take(c, &nlen, 4) || nlen == 0 || nlen >= sizeof spec->name ||
        !ss__take(c, spec->name, nlen) || !ss__take(c, &spec->dim, 4) || !ss__take(c, &opt, 4) ||
        !ss__take(c, &spec->lr, 4) || !ss__take(c, &spec->eps, 4) ||
        !ss__take(c, &spec->init_scale, 4))
        return false;
    if (opt > SS_EMB_ADAGRAD)
        return false;
    spec->optimizer = (ss__emb_optimizer)opt;
    return ss__emb_spec_check(spec, NULL, 0) == SS_OK;
}

/* One pass over the records: checks them all (v NULL), or visits them. */
static ss_status walk(const ss__emb_delta_file *f, const ss__emb_delta_visitor *v,
                      ss__emb_delta_info *counts, char *why, size_t whylen) {
    ss__byte_reader c = {f->buf + HEADER_BYTES, f->buf + f->len};
    size_t row_floats = 0;
    uint64_t *ids = NULL;
    float *rows = NULL;
    ss_status st = SS_OK;
    for (;;) {
        char kind;
        if (!ss__take(&c, &kind, 1)) {
            st = parse_error(why, whylen, "no end record: truncated");
            break;
        }
        if (kind == 'Z') {
            if (c.p != c.end)
                st = parse_error(why, whylen, "bytes after the end record");
            break;
        }
        if (kind == 'S') {
            ss__emb_spec spec;
            if (!take_spec(&c, &spec)) {
                st = parse_error(why, whylen, "a table record is not a valid table spec");
                break;
            }
            row_floats = ss__emb_row_floats(&spec);
            counts->tables++;
            if (v && (st = v->table(v->ctx, &spec)) != SS_OK)
                break;
            continue;
        }
        uint32_t n;
        if ((kind != 'R' && kind != 'D') || !row_floats || !ss__take(&c, &n, 4)) {
            st = parse_error(why, whylen, "a record of no known kind, or rows before a table");
            break;
        }
        const size_t fl = kind == 'R' ? (size_t)n * row_floats : 0;
        if ((size_t)(c.end - c.p) < (size_t)n * 8 + fl * sizeof(float)) {
            st = parse_error(why, whylen, "a record runs past the end: truncated");
            break;
        }
        free(ids);
        free(rows);
        ids = malloc(((size_t)n + 1) * 8);
        rows = malloc((fl + 1) * sizeof(float));
        if (!ids || !rows) {
            st = SS_ERR_NO_MEMORY;
            break;
        }
        ss__take(&c, ids, (size_t)n * 8);
        ss__take(&c, rows, fl * sizeof(float));
        if (fl && !ss__all_finite(rows, fl)) {
            st = parse_error(why, whylen, "a row holds NaN or Inf");
            break;
        }
        if (kind == 'R')
            counts->rows += n;
        else
            counts->deletions += n;
        if (v && (st = v->rows(v->ctx, ids, kind == 'R' ? rows : NULL, n)) != SS_OK)
            break;
    }
    free(ids);
    free(rows);
    return st;
}

ss_status ss__emb_delta_parse(unsigned char *buf, size_t len, bool check_hash,
                              ss__emb_delta_file **out, char *why, size_t whylen) {
    uint32_t stored;
    if (len < HEADER_BYTES + 1 + 4 || memcmp(buf, delta_magic, 8) != 0) {
        free(buf);
        return parse_error(why, whylen, "not a delta file (no SSEMBD01 header), or truncated");
    }
    memcpy(&stored, buf + len - 4, 4);
    if (check_hash && checksum(buf, len - 4) != stored) {
        free(buf);
        return parse_error(why, whylen, "checksum mismatch: torn or corrupted");
    }
    ss__emb_delta_file *f = calloc(1, sizeof *f);
    if (!f) {
        free(buf);
        return SS_ERR_NO_MEMORY;
    }
    f->buf = buf;
    f->len = len - 4;
    memcpy(&f->info.seq, buf + 8, 8);
    f->info.base = buf[16] != 0;
    memcpy(&f->info.written_ms, buf + 17, 8);
    ss_status st = walk(f, NULL, &f->info, why, whylen);
    if (st != SS_OK) {
        ss__emb_delta_close(f);
        return st;
    }
    *out = f;
    return SS_OK;
}

ss_status ss__emb_delta_read(const char *path, ss__emb_delta_file **out, char *why, size_t whylen) {
    unsigned char *buf;
    size_t len;
    ss_status st = ss__read_file(path, SS_FILE_OURS, SIZE_MAX, &buf, &len);
    if (st != SS_OK) {
        ss__why(why, whylen, "%s", st == SS_ERR_NOT_FOUND ? "no such file" : "cannot be read");
        return st;
    }
    return ss__emb_delta_parse(buf, len, true, out, why, whylen);
}

void ss__emb_delta_info_of(const ss__emb_delta_file *f, ss__emb_delta_info *out) {
    *out = f->info;
}

ss_status ss__emb_delta_walk(const ss__emb_delta_file *f, const ss__emb_delta_visitor *v) {
    ss__emb_delta_info counts = {0};
    return walk(f, v, &counts, NULL, 0);
}

void ss__emb_delta_close(ss__emb_delta_file *f) {
    if (!f)
        return;
    free(f->buf);
    free(f);
}
