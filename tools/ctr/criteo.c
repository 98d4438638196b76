#include "tools/ctr/criteo.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "common/log.h"

#define NUM_FIELDS (1 + SS_CTR_NUM_DENSE + SS_CTR_NUM_CAT)

static int hexval(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

ss_status ss__criteo_parse_line(const char *line, size_t len, ss__ctr_example *ex, char *err,
                                size_t errlen) {
    if (!line || !ex || !err)
        return SS_ERR_INVALID_ARGUMENT;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        len--;
    const char *start[NUM_FIELDS];
    size_t flen[NUM_FIELDS];
    size_t nf = 0, pos = 0;
    for (;;) {
        size_t end = pos;
        while (end < len && line[end] != '\t')
            end++;
        if (nf < NUM_FIELDS) {
            start[nf] = line + pos;
            flen[nf] = end - pos;
        }
        nf++;
        if (end >= len)
            break;
        pos = end + 1;
    }
    if (nf != NUM_FIELDS) {
        snprintf(err, errlen, "expected %d tab-separated fields, found %zu", NUM_FIELDS, nf);
        return SS_ERR_PARSE;
    }
    if (flen[0] != 1 || (start[0][0] != '0' && start[0][0] != '1')) {
        snprintf(err, errlen, "label must be 0 or 1, found '%.*s'",
                 (int)(flen[0] > 20 ? 20 : flen[0]), start[0]);
        return SS_ERR_PARSE;
    }
    ex->label = (float)(start[0][0] - '0');
    for (int j = 0; j < SS_CTR_NUM_DENSE; j++) {
        const char *s = start[1 + j];
        size_t n = flen[1 + j];
        if (n == 0) {
            ex->dense[j] = 0.0f;
            continue;
        }
        size_t i = (s[0] == '-') ? 1 : 0;
        if (i == n || n > 20) {
            snprintf(err, errlen, "integer feature I%d: bad value '%.*s'", j + 1,
                     (int)(n > 20 ? 20 : n), s);
            return SS_ERR_PARSE;
        }
        double v = 0.0;
        for (; i < n; i++) {
            if (s[i] < '0' || s[i] > '9') {
                snprintf(err, errlen, "integer feature I%d: bad value '%.*s'", j + 1,
                         (int)(n > 20 ? 20 : n), s);
                return SS_ERR_PARSE;
            }
            v = v * 10.0 + (s[i] - '0');
        }
        if (s[0] == '-')
            v = 0.0; /* negatives carry no magnitude signal after the log transform */
        ex->dense[j] = (float)log1p(v);
    }
    ex->cat_missing = 0;
    for (int f = 0; f < SS_CTR_NUM_CAT; f++) {
        const char *s = start[1 + SS_CTR_NUM_DENSE + f];
        size_t n = flen[1 + SS_CTR_NUM_DENSE + f];
        if (n == 0) {
            ex->cat[f] = 0;
            ex->cat_missing |= 1u << f;
            continue;
        }
        if (n > 8) {
            snprintf(err, errlen, "categorical feature C%d: more than 8 hex digits", f + 1);
            return SS_ERR_PARSE;
        }
        uint32_t v = 0;
        for (size_t i = 0; i < n; i++) {
            int h = hexval(s[i]);
            if (h < 0) {
                snprintf(err, errlen, "categorical feature C%d: '%.*s' is not hex", f + 1, (int)n,
                         s);
                return SS_ERR_PARSE;
            }
            v = (v << 4) | (uint32_t)h;
        }
        ex->cat[f] = v;
    }
    return SS_OK;
}

/* Grows out's rows to room for at least one more; SS_ERR_NO_MEMORY. */
static ss_status make_room(ss__ctr_dataset *out, size_t *cap) {
    if (!out->rows)
        *cap = 0; /* a new dataset's: an empty file's rows are still an array */
    return SS_GROW(out->rows, *cap, out->nrows, 4096) ? SS_OK : SS_ERR_NO_MEMORY;
}

ss_status ss__ctr_dataset_read(FILE *f, const char *name, size_t max_rows, ss__ctr_reader *rd,
                               ss__ctr_dataset *out) {
    ss_status st = SS_OK;
    ssize_t len;
    while ((max_rows == 0 || out->nrows < max_rows) &&
           (len = getline(&rd->line, &rd->linecap, f)) >= 0) {
        rd->lineno++;
        if ((st = make_room(out, &rd->cap)) != SS_OK)
            break;
        char err[160];
        if (ss__criteo_parse_line(rd->line, (size_t)len, &out->rows[out->nrows], err, sizeof err) ==
            SS_OK) {
            out->nrows++;
            continue;
        }
        if (out->skipped++ == 0) {
            out->first_bad_line = rd->lineno;
            snprintf(out->first_error, sizeof out->first_error, "%s", err);
        }
        if (out->skipped <= 5)
            SS_LOG_WARNF("criteo", "event=line_skipped path=%s line=%zu reason=\"%s\"", name,
                         rd->lineno, err);
    }
    if (st == SS_OK && ferror(f) && errno != EINTR)
        st = SS_ERR_IO;
    return st;
}

ss_status ss__ctr_dataset_load(const char *path, size_t max_rows, ss__ctr_dataset *out) {
    if (!path || !out)
        return SS_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "r");
    if (!f) {
        SS_LOG_ERRORF("criteo", "event=open_failed path=%s error=\"%s\"", path, strerror(errno));
        return SS_ERR_IO;
    }
    ss__ctr_reader rd = {0};
    ss_status st = ss__ctr_dataset_read(f, path, max_rows, &rd, out);
    if (st == SS_OK && !out->rows)
        st = make_room(out, &rd.cap); /* an empty file: rows is still an array */
    free(rd.line);
    fclose(f);
    if (st != SS_OK) {
        ss__ctr_dataset_free(out);
        return st;
    }
    if (out->skipped > 5)
        SS_LOG_WARNF("criteo", "event=lines_skipped path=%s skipped=%zu", path, out->skipped);
    return SS_OK;
}

double ss__ctr_dataset_ctr(const ss__ctr_dataset *ds) {
    double pos = 0.0;
    for (size_t i = 0; i < ds->nrows; i++)
        pos += ds->rows[i].label > 0.5f;
    return ds->nrows ? pos / (double)ds->nrows : 0.0;
}

void ss__ctr_dataset_free(ss__ctr_dataset *ds) {
    if (!ds)
        return;
    free(ds->rows);
    ds->rows = NULL;
    ds->nrows = 0;
}
