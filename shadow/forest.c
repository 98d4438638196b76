/* Forest packing over a measured topology (forest.h). */
#include "shadow/forest.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/names.h"

/* ---- topology ---- */

static ss_status topology_alloc(uint32_t members, uint32_t hosts, ss__topology *t) {
    memset(t, 0, sizeof *t);
    t->members = members;
    t->hosts = hosts;
    t->host = calloc(members, sizeof *t->host);
    t->link = calloc((size_t)hosts * hosts, sizeof *t->link);
    t->nic = calloc(hosts, sizeof *t->nic);
    if (!t->host || !t->link || !t->nic) {
        ss__topology_free(t);
        return SS_ERR_NO_MEMORY;
    }
    return SS_OK;
}

void ss__topology_free(ss__topology *t) {
    if (!t)
        return;
    free(t->host);
    free(t->link);
    free(t->nic);
    memset(t, 0, sizeof *t);
}

ss_status ss__topology_grouped(uint32_t members, uint32_t per_host, double gbit,
                               ss__topology *out) {
    if (!out || members == 0 || members > SS_FOREST_MAX_MEMBERS || per_host == 0 || !(gbit > 0) ||
        !isfinite(gbit))
        return SS_ERR_INVALID_ARGUMENT;
    const uint32_t hosts = (members + per_host - 1) / per_host;
    ss_status st = topology_alloc(members, hosts, out);
    if (st != SS_OK)
        return st;
    for (uint32_t m = 0; m < members; m++)
        out->host[m] = m / per_host;
    for (uint32_t a = 0; a < hosts; a++) {
        out->nic[a] = gbit;
        for (uint32_t b = 0; b < hosts; b++)
            out->link[(size_t)a * hosts + b] = gbit;
    }
    out->local = 100.0;
    return SS_OK;
}

ss_status ss__topology_uniform(uint32_t members, double gbit, ss__topology *out) {
    return ss__topology_grouped(members, 1, gbit, out);
}

/* The host part of "host:port" (all of it without a ':'), into buf. */
static void host_of(const char *member, char *buf, size_t len) {
    size_t n = ss__address_host_len(member);
    if (n >= len)
        n = len - 1;
    memcpy(buf, member, n);
    buf[n] = '\0';
}

#define HOST_NAME_MAX_LEN 256

static int find_host(char (*names)[HOST_NAME_MAX_LEN], uint32_t hosts, const char *name) {
    for (uint32_t h = 0; h < hosts; h++)
        if (!strcmp(names[h], name))
            return (int)h;
    return -1;
}

static bool parse_gbit(const char *text, double *out) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !(v > 0) || !isfinite(v))
        return false;
    *out = v;
    return true;
}

ss_status ss__topology_load(const char *path, const char *const *members, uint32_t n,
                            ss__topology *out, char *why, size_t whylen) {
#define WHY(...) (why ? (void)snprintf(why, whylen, __VA_ARGS__) : (void)0)
    if (!path || !members || !out || n == 0 || n > SS_FOREST_MAX_MEMBERS) {
        WHY("no topology file or no members (1 .. %d)", SS_FOREST_MAX_MEMBERS);
        return SS_ERR_INVALID_ARGUMENT;
    }
    char(*names)[HOST_NAME_MAX_LEN] = calloc(n, sizeof *names);
    if (!names)
        return SS_ERR_NO_MEMORY;
    uint32_t hosts = 0;
    uint32_t *host = calloc(n, sizeof *host);
    if (!host) {
        free(names);
        return SS_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < n; i++) {
        char h[HOST_NAME_MAX_LEN];
        host_of(members[i], h, sizeof h);
        int k = find_host(names, hosts, h);
        if (k < 0) {
            memcpy(names[hosts], h, sizeof h);
            k = (int)hosts++;
        }
        host[i] = (uint32_t)k;
    }
    ss_status st = topology_alloc(n, hosts, out);
    if (st != SS_OK) {
        free(names);
        free(host);
        return st;
    }
    memcpy(out->host, host, n * sizeof *host);
    free(host);
    double dflt = 10.0;
    out->local = 100.0;
    /* Links not named keep 0 until the end, then take the default. */
    FILE *f = fopen(path, "r");
    if (!f) {
        WHY("topology %s: %s", path, strerror(errno));
        st = SS_ERR_IO;
    }
    char line[1024];
    for (unsigned lineno = 1; st == SS_OK && fgets(line, sizeof line, f); lineno++) {
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *tok[5], *save = NULL;
        int ntok = 0;
        for (char *w = strtok_r(line, " \t\r\n", &save); w && ntok < 5;
             w = strtok_r(NULL, " \t\r\n", &save))
            tok[ntok++] = w;
        if (ntok == 0)
            continue;
        double v;
        if (!strcmp(tok[0], "default") && ntok == 2 && parse_gbit(tok[1], &v)) {
            dflt = v;
        } else if (!strcmp(tok[0], "local") && ntok == 2 && parse_gbit(tok[1], &v)) {
            out->local = v;
        } else if (!strcmp(tok[0], "nic") && ntok == 3 && parse_gbit(tok[2], &v)) {
            int h = find_host(names, hosts, tok[1]);
            if (h >= 0) /* a host no member is on: nothing to shape */
                out->nic[h] = v;
        } else if (!strcmp(tok[0], "link") && ntok == 4 && parse_gbit(tok[3], &v)) {
            int a = find_host(names, hosts, tok[1]), b = find_host(names, hosts, tok[2]);
            if (a >= 0 && b >= 0 && a != b)
                out->link[(size_t)a * hosts + (size_t)b] =
                    out->link[(size_t)b * hosts + (size_t)a] = v;
        } else {
            WHY("topology %s line %u: expected \"default G\", \"local G\", \"nic HOST G\" or "
                "\"link HOST HOST G\" with G > 0 Gbit/s",
                path, lineno);
            st = SS_ERR_INVALID_ARGUMENT;
        }
    }
    if (f)
        fclose(f);
    free(names);
    if (st != SS_OK) {
        ss__topology_free(out);
        return st;
    }
    for (uint32_t a = 0; a < hosts; a++) {
        double fastest = 0;
        for (uint32_t b = 0; b < hosts; b++) {
            double *l = &out->link[(size_t)a * hosts + b];
            if (a != b && *l == 0)
                *l = dflt;
            if (a != b && *l > fastest)
                fastest = *l;
        }
        if (out->nic[a] == 0)
            out->nic[a] = hosts > 1 ? fastest : out->local;
    }
    return SS_OK;
#undef WHY
}

/* ---- packing ---- */

/* Bytes each resource carries per direction so far. */
typedef struct loads {
    double *host;  /* hosts: all of a host's cross-host traffic */
    double *pair;  /* hosts * hosts */
    double *local; /* hosts: between members of the host */
} loads;

static double gbit_s(double bytes, double gbit) {
    return bytes * 8.0 / (gbit * 1e9);
}

/* Seconds the busiest resource touched by edge (a, b) would need with b
 * more bytes on it. */
static double edge_cost(const ss__topology *t, const loads *l, uint32_t a, uint32_t b,
                        double bytes) {
    const uint32_t ha = t->host[a], hb = t->host[b], H = t->hosts;
    if (ha == hb)
        return gbit_s(l->local[ha] + bytes, t->local);
    double c = gbit_s(l->host[ha] + bytes, t->nic[ha]);
    double c2 = gbit_s(l->host[hb] + bytes, t->nic[hb]);
    double c3 = gbit_s(l->pair[(size_t)ha * H + hb] + bytes, t->link[(size_t)ha * H + hb]);
    return fmax(c, fmax(c2, c3));
}

static void edge_add(const ss__topology *t, loads *l, uint32_t a, uint32_t b, double bytes) {
    const uint32_t ha = t->host[a], hb = t->host[b], H = t->hosts;
    if (ha == hb) {
        l->local[ha] += bytes;
        return;
    }
    l->host[ha] += bytes;
    l->host[hb] += bytes;
    l->pair[(size_t)ha * H + hb] += bytes;
    l->pair[(size_t)hb * H + ha] += bytes;
}

static double bottleneck(const ss__topology *t, const loads *l) {
    double worst = 0;
    for (uint32_t h = 0; h < t->hosts; h++) {
        worst = fmax(worst, gbit_s(l->host[h], t->nic[h]));
        worst = fmax(worst, gbit_s(l->local[h], t->local));
        for (uint32_t k = 0; k < t->hosts; k++)
            if (k != h)
                worst = fmax(worst, gbit_s(l->pair[(size_t)h * t->hosts + k],
                                           t->link[(size_t)h * t->hosts + k]));
    }
    return worst;
}

static void loads_copy(const ss__topology *t, loads *dst, const loads *src) {
    memcpy(dst->host, src->host, t->hosts * sizeof(double));
    memcpy(dst->local, src->local, t->hosts * sizeof(double));
    memcpy(dst->pair, src->pair, (size_t)t->hosts * t->hosts * sizeof(double));
}

/* Prim's order from root: each step attaches the member whose cheapest
 * edge into the tree is cheapest (ties: the shallower parent, then the
 * lower index). Adds the tree's loads to l; parent and depth out. */
static uint32_t grow_tree(const ss__topology *t, loads *l, uint32_t root, double bytes,
                          int32_t *parent, uint32_t *depth) {
    const uint32_t N = t->members;
    for (uint32_t m = 0; m < N; m++) {
        parent[m] = -2; /* not in the tree */
        depth[m] = 0;
    }
    parent[root] = -1;
    uint32_t height = 0;
    for (uint32_t added = 1; added < N; added++) {
        double best = INFINITY;
        uint32_t bv = 0, bu = 0, bdepth = UINT32_MAX;
        for (uint32_t v = 0; v < N; v++) {
            if (parent[v] != -2)
                continue;
            for (uint32_t u = 0; u < N; u++) {
                if (parent[u] == -2)
                    continue;
                double c = edge_cost(t, l, v, u, bytes);
                if (c < best - 1e-15 || (fabs(c - best) <= 1e-15 && depth[u] + 1 < bdepth)) {
                    best = c;
                    bv = v;
                    bu = u;
                    bdepth = depth[u] + 1;
                }
            }
        }
        parent[bv] = (int32_t)bu;
        depth[bv] = bdepth;
        if (bdepth > height)
            height = bdepth;
        edge_add(t, l, bv, bu, bytes);
    }
    return height;
}

void ss__forest_free(ss__forest *f) {
    if (!f)
        return;
    free(f->part_off);
    free(f->root);
    free(f->parent);
    free(f->depth);
    memset(f, 0, sizeof *f);
}

/* Trying every member as every partition's root costs members^5 steps;
 * past this many members the roots take turns instead (members^4). */
#define TRY_ALL_ROOTS_UPTO 16

ss_status ss__forest_pack(const ss__topology *t, size_t floats, uint32_t parts, ss__forest *out) {
    if (!t || !out || t->members == 0 || t->members > SS_FOREST_MAX_MEMBERS || floats == 0)
        return SS_ERR_INVALID_ARGUMENT;
    const uint32_t N = t->members, H = t->hosts;
    if (parts == 0)
        parts = N;
    if (parts > floats)
        parts = (uint32_t)floats;
    memset(out, 0, sizeof *out);
    out->members = N;
    out->parts = parts;
    out->part_off = calloc(parts + 1, sizeof *out->part_off);
    out->root = calloc(parts, sizeof *out->root);
    out->parent = calloc((size_t)parts * N, sizeof *out->parent);
    out->depth = calloc(parts, sizeof *out->depth);
    double *buf = calloc(4 * ((size_t)H * H + 2 * H), sizeof *buf);
    int32_t *par = calloc(N, sizeof *par);
    uint32_t *dep = calloc(N, sizeof *dep), *rooted = calloc(N, sizeof *rooted);
    if (!out->part_off || !out->root || !out->parent || !out->depth || !buf || !par || !dep ||
        !rooted) {
        ss__forest_free(out);
        free(buf);
        free(par);
        free(dep);
        free(rooted);
        return SS_ERR_NO_MEMORY;
    }
    /* Three sets of loads: committed, a trial, the best trial so far. */
    loads L[3];
    for (int k = 0; k < 3; k++) {
        double *b = buf + (size_t)k * ((size_t)H * H + 2 * H);
        L[k] = (loads){.pair = b, .host = b + (size_t)H * H, .local = b + (size_t)H * H + H};
    }
    for (uint32_t p = 0; p <= parts; p++)
        out->part_off[p] = floats * p / parts;
    for (uint32_t p = 0; p < parts; p++) {
        const double bytes = 4.0 * (double)(out->part_off[p + 1] - out->part_off[p]);
        double best = INFINITY;
        uint32_t best_root = 0;
        const bool all = N <= TRY_ALL_ROOTS_UPTO;
        for (uint32_t k = 0; k < (all ? N : 1); k++) {
            uint32_t r = all ? (p + k) % N : p % N; /* turns first, so ties spread */
            loads_copy(t, &L[1], &L[0]);
            uint32_t h = grow_tree(t, &L[1], r, bytes, par, dep);
            double b = bottleneck(t, &L[1]);
            /* Prefer the lower bottleneck, then the member rooting fewer. */
            if (b < best - 1e-15 || (fabs(b - best) <= 1e-15 && rooted[r] < rooted[best_root])) {
                best = b;
                best_root = r;
                loads_copy(t, &L[2], &L[1]);
                memcpy(out->parent + (size_t)p * N, par, N * sizeof *par);
                out->depth[p] = h;
            }
        }
        out->root[p] = best_root;
        rooted[best_root]++;
        loads_copy(t, &L[0], &L[2]);
        out->bottleneck_s = best;
    }
    free(buf);
    free(par);
    free(dep);
    free(rooted);
    return SS_OK;
}

uint32_t ss__forest_children(const ss__forest *f, uint32_t p, uint32_t m, uint32_t *kids) {
    uint32_t n = 0;
    const int32_t *par = f->parent + (size_t)p * f->members;
    for (uint32_t v = 0; v < f->members; v++)
        if (par[v] == (int32_t)m)
            kids[n++] = v;
    return n;
}
