/* A tree group's state (tree_internal.h): its round slots, its forest
 * built over the members still in, the epoch of who has left. Used by the
 * push service (tree_service.c), the membership (tree_membership.c) and
 * the rounds (tree_transport.c), none of which it depends on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "rpc/tree/tree_internal.h"
#include "shadow/kernels.h"

static void slot_free(ss__tree_slot *s) {
    free(s->sum);
    free(s->count);
    free(s->got);
    free(s->got_n);
    free(s->mean);
    free(s->mean_count);
    memset(s, 0, sizeof *s);
}

ss_status ss__tree_slot_alloc(ss__tree_slot *s, size_t n, uint32_t parts, uint32_t members) {
    s->sum = malloc(n * sizeof *s->sum);
    s->mean = malloc(n * sizeof *s->mean);
    s->count = calloc(parts, sizeof *s->count);
    s->got = calloc((size_t)parts * members, 1);
    s->got_n = calloc(parts, sizeof *s->got_n);
    s->mean_count = calloc(parts, sizeof *s->mean_count);
    return s->sum && s->mean && s->count && s->got && s->got_n && s->mean_count ? SS_OK
                                                                                : SS_ERR_NO_MEMORY;
}

/* Makes s the buffer of `round`, empty. */
void ss__tree_slot_open(ss__tree_slot *s, const ss__tree_group *tg, uint64_t round) {
    const uint32_t parts = tg->forest.parts, N = tg->forest.members;
    s->round = round;
    memset(s->sum, 0, tg->n * sizeof *s->sum);
    memset(s->count, 0, parts * sizeof *s->count);
    memset(s->got, 0, (size_t)parts * N);
    memset(s->got_n, 0, parts * sizeof *s->got_n);
    memset(s->mean_count, 0, parts * sizeof *s->mean_count);
}

void ss__tree_slot_forget(ss__tree_slot *s, const ss__tree_group *tg, uint32_t p) {
    const ss__forest *f = &tg->forest;
    const size_t off = f->part_off[p], pn = f->part_off[p + 1] - off;
    memset(s->sum + off, 0, pn * sizeof *s->sum);
    memset(s->got + (size_t)p * f->members, 0, f->members);
    s->count[p] = 0;
    s->got_n[p] = 0;
    s->mean_count[p] = 0;
}

uint32_t ss__tree_slot_fewest(const ss__tree_slot *s, uint32_t parts) {
    uint32_t fewest = UINT32_MAX;
    for (uint32_t p = 0; p < parts; p++)
        if (s->mean_count[p] < fewest)
            fewest = s->mean_count[p];
    return parts ? fewest : 0;
}

void ss__tree_group_free(ss__tree_group *tg) {
    if (!tg)
        return;
    free(tg->name);
    ss__forest_free(&tg->forest);
    free(tg->nkids);
    free(tg->kids);
    slot_free(&tg->slots[0]);
    slot_free(&tg->slots[1]);
    free(tg->latest);
    free(tg->gone);
    free(tg->ver);
    free(tg->bmuf_w);
    free(tg->bmuf_started);
    free(tg->bmuf_root);
    free(tg);
}

ss__tree_group *ss__tree_find_group(ss__tree *t, const char *name) {
    ss__tree_group *tg = t->groups;
    while (tg && strcmp(tg->name, name))
        tg = tg->next;
    return tg;
}

/* 0 while every member is in; else a hash of who left (FNV-1a over the
 * flags). */
static uint64_t epoch_of(const uint8_t *gone, uint32_t n) {
    uint64_t h = 1469598103934665603ull, left = 0;
    for (uint32_t i = 0; i < n; i++) {
        h = (h ^ gone[i]) * 1099511628211ull;
        left += gone[i];
    }
    return left ? h | 1 : 0;
}

/* The trees over the members still in the group (all at first), packed
 * over their part of the topology, with every index a rank: a member
 * that left has parent -2 in every tree. The partitions stay those of the
 * whole membership. Caller holds the lock (or owns tg). */
ss_status ss__tree_build_forest(const ss__tree *t, ss__tree_group *tg) {
    const uint32_t N = t->mesh.npeers;
    uint32_t *rank_of = malloc(N * sizeof *rank_of), *host = malloc(N * sizeof *host), k = 0;
    ss_status st = rank_of && host ? SS_OK : SS_ERR_NO_MEMORY;
    for (uint32_t m = 0; st == SS_OK && m < N; m++)
        if (!tg->gone[m]) {
            rank_of[k] = m;
            host[k++] = t->topo.host[m];
        }
    ss__topology sub = t->topo; /* the same hosts and links, fewer members */
    sub.members = k;
    sub.host = host;
    ss__forest sf = {0}, g = {0};
    if (st == SS_OK)
        st = ss__forest_pack(&sub, tg->n, t->parts ? t->parts : N, &sf);
    if (st == SS_OK) {
        g = (ss__forest){.members = N,
                         .parts = sf.parts,
                         .part_off = sf.part_off,
                         .depth = sf.depth,
                         .bottleneck_s = sf.bottleneck_s,
                         .root = malloc(sf.parts * sizeof *g.root),
                         .parent = malloc((size_t)sf.parts * N * sizeof *g.parent)};
        sf.part_off = NULL;
        sf.depth = NULL;
        if (!g.root || !g.parent)
            st = SS_ERR_NO_MEMORY;
    }
    for (uint32_t p = 0; st == SS_OK && p < g.parts; p++) {
        g.root[p] = rank_of[sf.root[p]];
        for (uint32_t m = 0; m < N; m++)
            g.parent[(size_t)p * N + m] = -2;
        for (uint32_t j = 0; j < k; j++) {
            int32_t up = sf.parent[(size_t)p * k + j];
            g.parent[(size_t)p * N + rank_of[j]] = up < 0 ? -1 : (int32_t)rank_of[up];
        }
    }
    if (st == SS_OK && !tg->nkids) {
        tg->nkids = calloc(g.parts, sizeof *tg->nkids);
        tg->kids = calloc((size_t)g.parts * N, sizeof *tg->kids);
        if (!tg->nkids || !tg->kids)
            st = SS_ERR_NO_MEMORY;
    }
    if (st == SS_OK) {
        /* S-BMUF block state stays with a partition's root: where the root
         * moves, the partition's block starts again. */
        for (uint32_t p = 0; tg->bmuf_started && tg->forest.root && p < g.parts; p++)
            if (g.root[p] != tg->forest.root[p])
                tg->bmuf_started[p] = false;
        ss__forest_free(&tg->forest);
        tg->forest = g;
        for (uint32_t p = 0; p < g.parts; p++)
            tg->nkids[p] = ss__forest_children(&g, p, t->mesh.rank, tg->kids + (size_t)p * N);
        tg->epoch = epoch_of(tg->gone, N);
    } else {
        ss__forest_free(&g);
    }
    ss__forest_free(&sf);
    free(rank_of);
    free(host);
    return st;
}
