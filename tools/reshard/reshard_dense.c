/* Offline resharding, the dense part (reshard.h): every chunk group
 * "name[lo:hi)" of every input's dense.ckpt put back into its whole group
 * (centre, last round's result, S-BMUF w and m), each whole group cut
 * again for the outputs as trainers cut it (one contiguous range per
 * shard, chunks of chunk_floats), and one dense.ckpt written per output. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "shadow/dense_checkpoint.h"
#include "tools/reshard/reshard_internal.h"

#define PARTS 4 /* central, mean, bmuf w, bmuf m */

typedef struct whole {
    char name[128];
    size_t n;
    float *part[PARTS]; /* n floats each, or NULL: not in the group */
    uint64_t covered;   /* floats seen (each exactly once) */
    uint64_t mean_round;
    float eta, zeta;
    bool nesterov;
} whole;

typedef struct wholes {
    whole *w;
    size_t n, cap;
} wholes;

/* "name[lo:hi)": the name's length, lo and hi; false for another name. */
static bool parse_chunk(const char *s, size_t *len, size_t *lo, size_t *hi) {
    const char *b = strrchr(s, '[');
    int used = 0;
    if (!b || b == s || sscanf(b, "[%zu:%zu)%n", lo, hi, &used) != 2 || b[used] != '\0' ||
        *hi <= *lo)
        return false;
    *len = (size_t)(b - s);
    return *len < sizeof((whole *)0)->name;
}

/* The whole group a chunk belongs to, made on first sight; its size is
 * only known once every chunk is in, so parts grow as chunks come. */
static whole *find_whole(wholes *ws, const char *name, size_t len) {
    for (size_t i = 0; i < ws->n; i++)
        if (strlen(ws->w[i].name) == len && !strncmp(ws->w[i].name, name, len))
            return &ws->w[i];
    if (!SS_GROW(ws->w, ws->cap, ws->n, 16))
        return NULL;
    whole *w = &ws->w[ws->n++];
    *w = (whole){0};
    memcpy(w->name, name, len);
    return w;
}

static ss_status grow_to(whole *w, size_t n) {
    if (n <= w->n)
        return SS_OK;
    for (int p = 0; p < PARTS; p++) {
        if (!w->part[p])
            continue;
        float *np = realloc(w->part[p], n * sizeof(float));
        if (!np)
            return SS_ERR_NO_MEMORY;
        memset(np + w->n, 0, (n - w->n) * sizeof(float));
        w->part[p] = np;
    }
    w->n = n;
    return SS_OK;
}

static ss_status put_part(whole *w, int p, const void *src, size_t lo, size_t n) {
    if (!src)
        return SS_OK;
    if (!w->part[p] && !(w->part[p] = calloc(w->n ? w->n : 1, sizeof(float))))
        return SS_ERR_NO_MEMORY;
    memcpy(w->part[p] + lo, src, n * sizeof(float)); /* src may be unaligned: memcpy */
    return SS_OK;
}

static ss_status add_chunk(wholes *ws, const ss__dense_ckpt_group *g, const char *file, char *why,
                           size_t whylen) {
    size_t len, lo, hi;
    if (!parse_chunk(g->name, &len, &lo, &hi) || hi - lo != g->n) {
        snprintf(why, whylen,
                 "%s: group %s is not a chunk of a sharded group (name[lo:hi) of hi - lo floats)",
                 file, g->name);
        return SS_ERR_PARSE;
    }
    whole *w = find_whole(ws, g->name, len);
    if (!w || grow_to(w, hi) != SS_OK)
        return SS_ERR_NO_MEMORY;
    const void *src[PARTS] = {g->central, g->mean, g->bmuf_w, g->bmuf_m};
    for (int p = 0; p < PARTS; p++)
        if (put_part(w, p, src[p], lo, g->n) != SS_OK)
            return SS_ERR_NO_MEMORY;
    /* The round as the file says it (a group without a result keeps the
     * file's "none" value too): the first chunk's, the newest result's. */
    if (w->covered == 0 || (g->mean && g->mean_round > w->mean_round))
        w->mean_round = g->mean_round;
    w->covered += g->n;
    if (g->bmuf_w) {
        w->eta = g->bmuf_eta;
        w->zeta = g->bmuf_zeta;
        w->nesterov = g->bmuf_nesterov;
    }
    return SS_OK;
}

static ss_status read_inputs(const ss__reshard_config *cfg, wholes *ws, char *why, size_t whylen) {
    char path[4200];
    for (size_t i = 0; i < cfg->n_in_ckpt; i++) {
        snprintf(path, sizeof path, "%s/dense.ckpt", cfg->in_ckpt[i]);
        ss__dense_ckpt_file *f;
        ss_status s = ss__dense_ckpt_read(path, &f);
        if (s == SS_ERR_NOT_FOUND)
            continue; /* a shard that held no dense group */
        if (s != SS_OK) {
            snprintf(why, whylen, "%s: %s", path, ss_strerror(s));
            return s;
        }
        for (size_t k = 0; k < ss__dense_ckpt_count(f) && s == SS_OK; k++)
            s = add_chunk(ws, ss__dense_ckpt_group_at(f, k), path, why, whylen);
        ss__dense_ckpt_close(f);
        if (s != SS_OK)
            return s;
    }
    for (size_t i = 0; i < ws->n; i++)
        if (ws->w[i].covered != ws->w[i].n) {
            snprintf(why, whylen,
                     "dense group %s: its chunks cover %" PRIu64 " of %zu floats (a shard's "
                     "dense.ckpt missing from --in-checkpoint-dir, or two of the same)",
                     ws->w[i].name, ws->w[i].covered, ws->w[i].n);
            return SS_ERR_STATE;
        }
    return SS_OK;
}

/* The chunks of w on output shard s of m, as trainers cut them. */
static size_t count_chunks(const whole *w, size_t s, size_t m, size_t chunk) {
    const size_t lo = w->n * s / m, hi = w->n * (s + 1) / m;
    return (hi - lo + chunk - 1) / chunk;
}

static ss_status write_output(const ss__reshard_config *cfg, const wholes *ws, size_t s,
                              size_t chunk, char *why, size_t whylen) {
    uint32_t groups = 0;
    for (size_t i = 0; i < ws->n; i++)
        groups += (uint32_t)count_chunks(&ws->w[i], s, cfg->n_out_ckpt, chunk);
    char path[4200];
    snprintf(path, sizeof path, "%s/dense.ckpt", cfg->out_ckpt[s]);
    ss__dense_ckpt_writer *wr;
    ss_status st = ss__dense_ckpt_begin(path, groups, &wr);
    if (st != SS_OK) {
        snprintf(why, whylen, "cannot write %s: %s", path, ss_strerror(st));
        return st;
    }
    for (size_t i = 0; i < ws->n; i++) {
        const whole *w = &ws->w[i];
        const size_t lo = w->n * s / cfg->n_out_ckpt, hi = w->n * (s + 1) / cfg->n_out_ckpt;
        for (size_t at = lo; at < hi; at += chunk) {
            const size_t end = hi - at < chunk ? hi : at + chunk;
            char name[160];
            snprintf(name, sizeof name, "%s[%zu:%zu)", w->name, at, end);
            const ss__dense_ckpt_group g = {.name = name,
                                            .n = end - at,
                                            .central = w->part[0] ? w->part[0] + at : NULL,
                                            .mean = w->part[1] ? w->part[1] + at : NULL,
                                            .mean_round = w->mean_round,
                                            .bmuf_w = w->part[2] ? w->part[2] + at : NULL,
                                            .bmuf_m = w->part[3] ? w->part[3] + at : NULL,
                                            .bmuf_eta = w->eta,
                                            .bmuf_zeta = w->zeta,
                                            .bmuf_nesterov = w->nesterov};
            ss__dense_ckpt_put(wr, &g);
        }
    }
    if ((st = ss__dense_ckpt_commit(wr)) != SS_OK)
        snprintf(why, whylen, "cannot write %s: %s", path, ss_strerror(st));
    return st;
}

ss_status ss__reshard_dense(const ss__reshard_config *cfg, ss__reshard_report *rep, char *why,
                            size_t whylen) {
    wholes ws = {0};
    const size_t chunk = cfg->chunk_floats ? cfg->chunk_floats : ((size_t)1 << 17);
    ss_status s = read_inputs(cfg, &ws, why, whylen);
    for (size_t j = 0; j < cfg->n_out_ckpt && s == SS_OK; j++)
        s = write_output(cfg, &ws, j, chunk, why, whylen);
    for (size_t i = 0; i < ws.n; i++) {
        rep->floats += ws.w[i].n;
        for (int p = 0; p < PARTS; p++)
            free(ws.w[i].part[p]);
    }
    rep->groups = ws.n;
    free(ws.w);
    return s;
}
