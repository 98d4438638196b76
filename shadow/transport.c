#include "shadow/transport.h"

#include <stdlib.h>
#include <string.h>

#include "common/finite.h"
#include "common/strbuf.h"

struct ss__transport {
    const ss__transport_ops *ops;
    void *impl;
};

ss_status ss__transport_create(const ss__transport_ops *ops, void *impl, ss__transport **out,
                               char *why, size_t whylen) {
    if (!ops || !out || !ops->join || !ops->leave || !ops->easgd_exchange || !ops->round ||
        !ops->read_central || !ops->destroy)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "a transport needs every operation");
    ss__transport *t = malloc(sizeof *t);
    if (!t)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for a transport");
    t->ops = ops;
    t->impl = impl;
    *out = t;
    return SS_OK;
}

void ss__transport_destroy(ss__transport *t) {
    if (!t)
        return;
    t->ops->destroy(t->impl);
    free(t);
}

/* The wrappers check arguments once so implementations can trust them. */
ss_status ss__transport_join_keyed(ss__transport *t, const char *group, size_t n, uint64_t key,
                                   uint64_t *member) {
    if (!t || !group || !*group || n == 0 || !member)
        return SS_ERR_INVALID_ARGUMENT;
    return t->ops->join(t->impl, group, n, key, member);
}

ss_status ss__transport_join(ss__transport *t, const char *group, size_t n, uint64_t *member) {
    return ss__transport_join_keyed(t, group, n, 0, member);
}

ss_status ss__transport_leave(ss__transport *t, const char *group, uint64_t member) {
    if (!t || !group)
        return SS_ERR_INVALID_ARGUMENT;
    return t->ops->leave(t->impl, group, member);
}

ss_status ss__transport_easgd_exchange(ss__transport *t, const char *group, uint64_t member,
                                       const float *s, float alpha, float *d, size_t n) {
    if (!t || !group || !s || !d || n == 0 || !ss__alpha_valid(alpha)) {
        if (d)
            memset(d, 0, n * sizeof *d); /* nothing applied */
        return SS_ERR_INVALID_ARGUMENT;
    }
    /* The transport writes all of d (not zeroed here first: at 10M floats
     * that memset was 6% of a PS's CPU in an S-EASGD round). */
    return t->ops->easgd_exchange(t->impl, group, member, s, alpha, d, n);
}

ss_status ss__transport_round(ss__transport *t, const char *group, uint64_t member, const float *s,
                              const ss__bmuf_params *bmuf, float *out, size_t n,
                              ss__round_result *result) {
    if (!t || !group || !s || !out || n == 0 || !result)
        return SS_ERR_INVALID_ARGUMENT;
    if (bmuf && !ss__bmuf_params_valid(bmuf))
        return SS_ERR_INVALID_ARGUMENT;
    return t->ops->round(t->impl, group, member, s, bmuf, out, n, result);
}

ss_status ss__transport_allreduce_mean(ss__transport *t, const char *group, uint64_t member,
                                       const float *s, float *avg, size_t n,
                                       ss__round_result *result) {
    return ss__transport_round(t, group, member, s, NULL, avg, n, result);
}

ss_status ss__transport_read_central(ss__transport *t, const char *group, float *c, size_t n) {
    if (!t || !group || !c || n == 0)
        return SS_ERR_INVALID_ARGUMENT;
    return t->ops->read_central(t->impl, group, c, n);
}

ss_status ss__transport_heartbeat(ss__transport *t, const char *group, uint64_t member) {
    if (!t || !group || !*group)
        return SS_ERR_INVALID_ARGUMENT;
    return t->ops->heartbeat ? t->ops->heartbeat(t->impl, group, member) : SS_OK;
}

size_t ss__transport_wire_bytes(ss__transport *t, size_t n) {
    return t && t->ops->wire_bytes ? t->ops->wire_bytes(t->impl, n) : n * sizeof(float);
}

bool ss__transport_round_waiting(ss__transport *t, const char *group, uint64_t member) {
    return t && group && t->ops->round_waiting && t->ops->round_waiting(t->impl, group, member);
}

void *ss__transport_impl(ss__transport *t, const ss__transport_ops *ops) {
    return t && t->ops == ops ? t->impl : NULL;
}
