/* The in-process transport: the ss__transport interface over a dense
 * centre (shadow/central.h) in this process, for tests, benchmarks and
 * single-process training. What it adds to the centre is what a wire
 * would do to the calls: an emulated link's delay, and with an encoding,
 * each member's own side of compressed sync (its mirror and message
 * buffer), so that the calls go through the same encoded bytes as they
 * would to a PS. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/finite.h"
#include "common/strbuf.h"
#include "shadow/central.h"
#include "shadow/codec.h"
#include "shadow/inproc_transport.h"
#include "shadow/transport.h"

/* One in-process member's side of compressed sync. */
typedef struct member_side {
    struct member_side *next;
    char *group;
    uint64_t member;
    ss__codec_mirror mirror;
    uint8_t *wire; /* an upload (ss__codec_upload_max), then a reply */
} member_side;

typedef struct inproc {
    ss__central *central; /* owned */
    uint64_t link_latency_ns;
    double link_ns_per_byte; /* 0 = no bandwidth limit */
    ss__encoding encoding;   /* of the members' calls */
    bool no_feedback;        /* their mirrors' (an ablation) */
    pthread_mutex_t lock;    /* guards sides */
    member_side *sides;
} inproc;

/* Emulated wire time of one exchange: request and reply of `bytes` each. */
static void link_delay(const inproc *ip, size_t n) {
    size_t bytes = ss__codec_size(ip->encoding, n);
    uint64_t ns = 2 * ip->link_latency_ns + (uint64_t)(2.0 * (double)bytes * ip->link_ns_per_byte);
    if (ns)
        ss__sleep_ns(ns);
}

static void side_free(member_side *m) {
    ss__codec_mirror_free(&m->mirror);
    free(m->group);
    free(m->wire);
    free(m);
}

/* Unlinks and frees the member's side, if it has one. */
static void side_drop(inproc *ip, const char *group, uint64_t member) {
    pthread_mutex_lock(&ip->lock);
    for (member_side **p = &ip->sides; *p; p = &(*p)->next) {
        if ((*p)->member == member && !strcmp((*p)->group, group)) {
            member_side *m = *p;
            *p = m->next;
            side_free(m);
            break;
        }
    }
    pthread_mutex_unlock(&ip->lock);
}

static member_side *side_new(const inproc *ip, const char *group, uint64_t member, size_t n) {
    member_side *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->member = member;
    m->group = strdup(group);
    if (!m->group || ss__codec_mirror_init(&m->mirror, ip->encoding, n) != SS_OK) {
        free(m->group);
        free(m);
        return NULL;
    }
    m->mirror.no_feedback = ip->no_feedback;
    m->wire = malloc(ss__codec_upload_max(&m->mirror) + ss__codec_size(ip->encoding, n));
    if (!m->wire) {
        side_free(m);
        return NULL;
    }
    return m;
}

/* The member's side for a group of n floats, made on its first call.
 * NULL: out of memory. A member's calls come one at a time (its engine's
 * shadow thread), so the side is used outside the lock. */
static member_side *side_of(inproc *ip, const char *group, uint64_t member, size_t n) {
    pthread_mutex_lock(&ip->lock);
    member_side *m = ip->sides;
    while (m && (m->member != member || strcmp(m->group, group)))
        m = m->next;
    pthread_mutex_unlock(&ip->lock);
    if (m && m->mirror.n == n)
        return m;
    if (m)
        side_drop(ip, group, member); /* a call of another size: start over */
    if (!(m = side_new(ip, group, member, n)))
        return NULL;
    pthread_mutex_lock(&ip->lock);
    m->next = ip->sides;
    ip->sides = m;
    pthread_mutex_unlock(&ip->lock);
    return m;
}

/* An in-process member's S-EASGD exchange (alpha given) or round (bmuf,
 * result) through the encoded bytes, as over a wire: its side encodes s,
 * the centre serves the upload, the side decodes the reply into out. On a
 * failure the side is told to reset, or dropped when the member is no
 * longer one (it expired). */
static ss_status encoded_call(inproc *ip, const char *name, uint64_t member, const float *s,
                              size_t n, const float *alpha, const ss__bmuf_params *bmuf, float *out,
                              ss__round_result *result) {
    if (!ss__all_finite(s, n))
        return SS_ERR_NON_FINITE;
    member_side *m = side_of(ip, name, member, n);
    if (!m)
        return SS_ERR_NO_MEMORY;
    ss__codec_upload up;
    ss__codec_member_upload(&m->mirror, s, m->wire, &up);
    uint8_t *reply = m->wire + ss__codec_upload_max(&m->mirror);
    size_t len = ss__codec_size(m->mirror.enc, n);
    ss_status st =
        alpha ? ss__central_easgd_encoded(ip->central, name, member, n, *alpha, &up, reply)
              : ss__central_round_encoded(ip->central, name, member, n, &up, bmuf, reply, result);
    if (st == SS_OK)
        st = alpha ? ss__codec_member_easgd_reply(&m->mirror, reply, len, out)
                   : ss__codec_member_round_reply(&m->mirror, reply, len, out);
    else if (st == SS_ERR_NOT_FOUND)
        side_drop(ip, name, member);
    else
        ss__codec_member_invalidate(&m->mirror);
    return st;
}

static ss_status ip_join(void *impl, const char *name, size_t n, uint64_t key, uint64_t *member) {
    return ss__central_join(((inproc *)impl)->central, name, n, key, member);
}

static ss_status ip_leave(void *impl, const char *name, uint64_t member) {
    inproc *ip = impl;
    side_drop(ip, name, member);
    return ss__central_leave(ip->central, name, member);
}

static ss_status ip_heartbeat(void *impl, const char *name, uint64_t member) {
    return ss__central_heartbeat(((inproc *)impl)->central, name, member);
}

static bool ip_round_waiting(void *impl, const char *name, uint64_t member) {
    return ss__central_round_waiting(((inproc *)impl)->central, name, member);
}

static ss_status ip_read_central(void *impl, const char *name, float *c, size_t n) {
    return ss__central_read(((inproc *)impl)->central, name, c, n);
}

static ss_status ip_easgd(void *impl, const char *name, uint64_t member, const float *s,
                          float alpha, float *d, size_t n) {
    inproc *ip = impl;
    link_delay(ip, n);
    if (ip->encoding == SS_ENC_F32)
        return ss__central_easgd(ip->central, name, member, s, alpha, d, n);
    ss_status st = encoded_call(ip, name, member, s, n, &alpha, NULL, d, NULL);
    if (st != SS_OK)
        memset(d, 0, n * sizeof *d); /* nothing applied */
    return st;
}

static ss_status ip_round(void *impl, const char *name, uint64_t member, const float *s,
                          const ss__bmuf_params *bmuf, float *avg, size_t n,
                          ss__round_result *result) {
    inproc *ip = impl;
    link_delay(ip, n);
    if (ip->encoding == SS_ENC_F32)
        return ss__central_round(ip->central, name, member, s, bmuf, avg, n, result);
    return encoded_call(ip, name, member, s, n, NULL, bmuf, avg, result);
}

static size_t ip_wire_bytes(void *impl, size_t n) {
    return ss__codec_size(((inproc *)impl)->encoding, n);
}

static void ip_destroy(void *impl) {
    inproc *ip = impl;
    while (ip->sides) {
        member_side *next = ip->sides->next;
        side_free(ip->sides);
        ip->sides = next;
    }
    ss__central_destroy(ip->central);
    pthread_mutex_destroy(&ip->lock);
    free(ip);
}

static const ss__transport_ops inproc_ops = {
    .join = ip_join,
    .leave = ip_leave,
    .easgd_exchange = ip_easgd,
    .round = ip_round,
    .read_central = ip_read_central,
    .heartbeat = ip_heartbeat,
    .wire_bytes = ip_wire_bytes,
    .round_waiting = ip_round_waiting,
    .destroy = ip_destroy,
};

ss_status ss__inproc_transport_create(const ss__inproc_config *cfg, ss__transport **out, char *why,
                                      size_t whylen) {
    if (!out || (cfg && (!(cfg->link_gbps >= 0.0) || cfg->link_latency_us > 10000000 ||
                         !ss__encoding_name(cfg->encoding))))
        return ss__fail(
            why, whylen, SS_ERR_INVALID_ARGUMENT,
            "an in-process link needs a rate >= 0, a latency of at most 10 s and a known encoding");
    inproc *ip = calloc(1, sizeof *ip);
    if (!ip)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for an in-process transport");
    pthread_mutex_init(&ip->lock, NULL);
    ss__central_config cc = {.round_deadline_ms = 1000};
    if (cfg) {
        cc = (ss__central_config){.round_deadline_ms = cfg->round_deadline_ms,
                                  .member_timeout_ms = cfg->member_timeout_ms,
                                  .max_groups = cfg->max_groups,
                                  .max_members = cfg->max_members,
                                  .max_total_floats = cfg->max_total_floats,
                                  .no_error_feedback = cfg->no_error_feedback};
        ip->link_latency_ns = (uint64_t)cfg->link_latency_us * 1000ull;
        /* gbps Gbit/s = gbps/8 bytes per ns. */
        ip->link_ns_per_byte = cfg->link_gbps > 0.0 ? 8.0 / cfg->link_gbps : 0.0;
        ip->encoding = cfg->encoding;
        ip->no_feedback = cfg->no_error_feedback;
    }
    ss_status st = ss__central_create(&cc, &ip->central, why, whylen);
    if (st == SS_OK)
        st = ss__transport_create(&inproc_ops, ip, out, why, whylen);
    if (st != SS_OK)
        ip_destroy(ip);
    return st;
}

ss__central *ss__inproc_central(ss__transport *t) {
    inproc *ip = t ? ss__transport_impl(t, &inproc_ops) : NULL;
    return ip ? ip->central : NULL;
}
