/* Who is in a tree group, and how the members come to agree on it
 * (tree_internal.h).
 *
 * Every member keeps, per member, a flag (gone) and a version. A member
 * that leaves for good says so (TreeLeave) at a version one higher; a
 * member that a failed round waited for and that does not answer a probe
 * is marked gone by the one that probed it, at a version one higher. Views
 * travel with every push and probe, and a merge keeps, of each member, the
 * higher version. A member that finds itself gone in another's view (it
 * was slow, or it restarted) comes back at a version higher still, which
 * then wins everywhere. Pushes carry a hash of the gone flags (the epoch)
 * and are refused when it differs, so a round only ever sums over trees
 * that both ends agree on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "rpc/rpc_pb.h"
#include "rpc/tree/tree_internal.h"
#include "rpc/tree/tree_sync.pb-c.h"

ss__rpc_channel *ss__tree_channel(ss__tree *t, uint32_t i) {
    pthread_mutex_lock(&t->lock);
    ss__rpc_channel *ch = ss__peer_mesh_channel(&t->mesh, i);
    pthread_mutex_unlock(&t->lock);
    return ch;
}

size_t ss__tree_view_bytes(const ss__tree *t) {
    return (size_t)t->mesh.npeers * 8;
}

void ss__tree_view_pack(const ss__tree *t, const ss__tree_group *tg, uint8_t *out) {
    for (uint32_t i = 0; i < t->mesh.npeers; i++) {
        const uint64_t v = tg->ver[i] << 1 | (tg->gone[i] ? 1u : 0u);
        for (int b = 0; b < 8; b++)
            out[8 * i + (size_t)b] = (uint8_t)(v >> (8 * b));
    }
}

/* The trees again after tg->gone changed; what arrived for the rounds
 * ahead was routed by the old trees and is dropped, except a round whose
 * every mean has come down: its result is known, and the member only has
 * to hand it on to its children in the new trees. Without that, a member
 * that has the means but whose thread has not taken them yet (or has not
 * pushed them down yet) when a finished member leaves would redo the
 * round on the new trees while the others are past it, and wait for it to
 * its deadline. On failure the caller's change is undone by the caller. */
static ss_status rebuild(ss__tree *t, ss__tree_group *tg) {
    const uint32_t parts = tg->forest.parts;
    uint32_t keep[2]; /* a buffered round's participants once every mean is in, else 0 */
    for (int k = 0; k < 2; k++)
        keep[k] = tg->slots[k].round ? ss__tree_slot_fewest(&tg->slots[k], parts) : 0;
    ss_status st = ss__tree_build_forest(t, tg);
    if (st == SS_OK) {
        for (int k = 0; k < 2; k++) {
            ss__tree_slot *s = &tg->slots[k];
            if (!keep[k] || tg->forest.parts != parts) {
                s->round = 0;
                continue;
            }
            /* The partitions' bounds may have moved; the means cover all
             * n floats either way. */
            for (uint32_t p = 0; p < parts; p++)
                s->mean_count[p] = keep[k];
        }
        pthread_cond_broadcast(&t->arrived);
    }
    return st;
}

ss_status ss__tree_mark(ss__tree *t, ss__tree_group *tg, uint32_t m, bool gone, uint64_t v,
                        const char *why) {
    if (m >= t->mesh.npeers || m == t->mesh.rank)
        return SS_ERR_INVALID_ARGUMENT;
    const uint8_t was = tg->gone[m];
    const uint64_t was_ver = tg->ver[m];
    if (v == 0)
        v = was_ver + 1;
    if (v <= was_ver)
        return SS_OK; /* old news */
    if (!ss__tree_version_plausible(was_ver, v))
        return SS_ERR_INVALID_ARGUMENT; /* forged: see SS_TREE_MAX_VERSION_STEP */
    tg->ver[m] = v;
    if (was == (gone ? 1 : 0))
        return SS_OK;
    tg->gone[m] = gone ? 1 : 0;
    ss_status st = rebuild(t, tg);
    if (st != SS_OK) {
        tg->gone[m] = was;
        tg->ver[m] = was_ver;
        return st;
    }
    SS_LOG_INFOF("tree", "event=%s group=%s member=%u version=%llu why=\"%s\"",
                 gone ? "member_gone" : "member_back", tg->name, m, (unsigned long long)v, why);
    return SS_OK;
}

bool ss__tree_view_merge(ss__tree *t, ss__tree_group *tg, const uint8_t *view, size_t len) {
    if (len == 0)
        return true; /* a sender that sends no view */
    if (len != ss__tree_view_bytes(t))
        return false;
    bool moved = false;
    uint8_t *was = malloc(t->mesh.npeers);
    uint64_t *was_ver = malloc(t->mesh.npeers * sizeof *was_ver);
    if (!was || !was_ver) {
        free(was);
        free(was_ver);
        return true; /* merged next time */
    }
    memcpy(was, tg->gone, t->mesh.npeers);
    memcpy(was_ver, tg->ver, t->mesh.npeers * sizeof *was_ver);
    for (uint32_t i = 0; i < t->mesh.npeers; i++) {
        uint64_t x = 0;
        for (int b = 0; b < 8; b++)
            x |= (uint64_t)view[8 * i + (size_t)b] << (8 * b);
        const uint64_t v = x >> 1;
        const bool gone = x & 1u;
        /* A version past the step is forged: ignored, so that it can
         * neither push this member's own version towards its limit nor
         * keep another out. */
        if (v != tg->ver[i] && !ss__tree_version_plausible(tg->ver[i], v))
            continue;
        if (i == t->mesh.rank) {
            if (gone) { /* here after all: back, at a version that wins */
                tg->ver[i] = v + 1;
                SS_LOG_INFOF("tree", "event=back group=%s member=%u version=%llu", tg->name, i,
                             (unsigned long long)tg->ver[i]);
            }
            continue;
        }
        if (v <= tg->ver[i])
            continue;
        tg->ver[i] = v;
        if (tg->gone[i] != (gone ? 1 : 0)) {
            tg->gone[i] = gone ? 1 : 0;
            moved = true;
        }
    }
    if (moved && rebuild(t, tg) != SS_OK) {
        memcpy(tg->gone, was, t->mesh.npeers);
        memcpy(tg->ver, was_ver, t->mesh.npeers * sizeof *was_ver);
    } else if (moved) {
        for (uint32_t i = 0; i < t->mesh.npeers; i++)
            if (was[i] != tg->gone[i])
                SS_LOG_INFOF("tree", "event=%s group=%s member=%u version=%llu why=\"heard\"",
                             tg->gone[i] ? "member_gone" : "member_back", tg->name, i,
                             (unsigned long long)tg->ver[i]);
    }
    free(was);
    free(was_ver);
    return true;
}

ss_status ss__tree_probe(ss__tree *t, const char *group, uint32_t m, uint32_t timeout_ms) {
    const size_t vb = ss__tree_view_bytes(t);
    uint8_t *view = malloc(vb);
    if (!view)
        return SS_ERR_NO_MEMORY;
    pthread_mutex_lock(&t->lock);
    ss__tree_group *tg = ss__tree_find_group(t, group);
    if (tg)
        ss__tree_view_pack(t, tg, view);
    pthread_mutex_unlock(&t->lock);
    ss__rpc_channel *ch = tg ? ss__tree_channel(t, m) : NULL;
    if (!ch) {
        free(view);
        return tg ? SS_ERR_IO : SS_ERR_NOT_FOUND;
    }
    Shadowsync__V1__TreeProbe pr = SHADOWSYNC__V1__TREE_PROBE__INIT;
    pr.group = (char *)group;
    pr.from = t->mesh.rank;
    pr.membership = (ProtobufCBinaryData){vb, view};
    const size_t len = shadowsync__v1__tree_probe__get_packed_size(&pr);
    uint8_t *req = malloc(len ? len : 1);
    ss_status st = req ? SS_OK : SS_ERR_NO_MEMORY;
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    char msg[160];
    if (st == SS_OK) {
        shadowsync__v1__tree_probe__pack(&pr, req);
        st = ss__rpc_call(ch, SS_TREE_PROBE_METHOD, req, len, timeout_ms, false, &resp, &resp_len,
                          msg, sizeof msg);
    }
    Shadowsync__V1__TreePushReply *r =
        st == SS_OK ? shadowsync__v1__tree_push_reply__unpack(NULL, resp_len, resp) : NULL;
    if (r) {
        pthread_mutex_lock(&t->lock);
        if ((tg = ss__tree_find_group(t, group)))
            ss__tree_view_merge(t, tg, r->membership.data, r->membership.len);
        pthread_mutex_unlock(&t->lock);
        shadowsync__v1__tree_push_reply__free_unpacked(r, NULL);
    }
    free(resp);
    free(req);
    free(view);
    /* Any answer, a refusal too, says the member is there. */
    return st == SS_ERR_IO || st == SS_ERR_TIMEOUT ? st : SS_OK;
}
