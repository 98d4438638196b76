#include "shadowsync/transport.h"

#include <stdlib.h>

struct ss_transport {
    const ss_transport_ops *ops;
    void *impl;
};

ss_status ss_transport_create(const ss_transport_ops *ops, void *impl, ss_transport **out) {
    if (!ops || !out || !ops->join || !ops->leave || !ops->easgd_exchange || !ops->allreduce_mean ||
        !ops->read_central || !ops->destroy)
        return SS_ERR_INVALID_ARGUMENT;
    ss_transport *t = malloc(sizeof *t);
    if (!t)
        return SS_ERR_NO_MEMORY;
    t->ops = ops;
    t->impl = impl;
    *out = t;
    return SS_OK;
}

void ss_transport_destroy(ss_transport *t) {
    if (!t)
        return;
    t->ops->destroy(t->impl);
    free(t);
}

/* The wrappers check arguments once so implementations can trust them. */
ss_status ss_transport_join(ss_transport *t, const char *group, size_t n, uint64_t *member) {
    if (!t || !group || !*group || n == 0 || !member)
        return SS_ERR_INVALID_ARGUMENT;
    return t->ops->join(t->impl, group, n, member);
}

ss_status ss_transport_leave(ss_transport *t, const char *group, uint64_t member) {
    if (!t || !group)
        return SS_ERR_INVALID_ARGUMENT;
    return t->ops->leave(t->impl, group, member);
}

ss_status ss_transport_easgd_exchange(ss_transport *t, const char *group, uint64_t member,
                                      const float *s, float alpha, float *d, size_t n) {
    if (!t || !group || !s || !d || n == 0 || !(alpha > 0.0f && alpha <= 1.0f))
        return SS_ERR_INVALID_ARGUMENT;
    return t->ops->easgd_exchange(t->impl, group, member, s, alpha, d, n);
}

ss_status ss_transport_allreduce_mean(ss_transport *t, const char *group, uint64_t member,
                                      const float *s, float *avg, size_t n,
                                      ss_round_result *result) {
    if (!t || !group || !s || !avg || n == 0 || !result)
        return SS_ERR_INVALID_ARGUMENT;
    return t->ops->allreduce_mean(t->impl, group, member, s, avg, n, result);
}

ss_status ss_transport_read_central(ss_transport *t, const char *group, float *c, size_t n) {
    if (!t || !group || !c || n == 0)
        return SS_ERR_INVALID_ARGUMENT;
    return t->ops->read_central(t->impl, group, c, n);
}

ss_status ss_transport_heartbeat(ss_transport *t, const char *group, uint64_t member) {
    if (!t || !group || !*group)
        return SS_ERR_INVALID_ARGUMENT;
    return t->ops->heartbeat ? t->ops->heartbeat(t->impl, group, member) : SS_OK;
}

void *ss_transport_impl(ss_transport *t, const ss_transport_ops *ops) {
    return t && t->ops == ops ? t->impl : NULL;
}
