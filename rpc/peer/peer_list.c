/* See peer_list.h. */
#include "rpc/peer/peer_list.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/names.h"
#include "common/strbuf.h"

void ss__peer_tell_all(ss__rpc_channel *const *ch, size_t n, const char *method,
                       const ProtobufCMessage *msg, uint32_t timeout_ms) {
    uint8_t buf[256];
    ss__rpc_request *rq = n ? calloc(n, sizeof *rq) : NULL;
    if (!rq || protobuf_c_message_get_packed_size(msg) > sizeof buf) {
        free(rq);
        return;
    }
    size_t len = protobuf_c_message_pack(msg, buf);
    for (size_t i = 0; i < n; i++)
        rq[i] = (ss__rpc_request){.ch = ch[i], .method = method, .req = buf, .len = len};
    ss__rpc_call_many(rq, n, timeout_ms < 1000 ? timeout_ms : 1000, false);
    for (size_t i = 0; i < n; i++)
        free(rq[i].resp);
    free(rq);
}

void ss__peer_list_free(char **peers, uint32_t n) {
    for (uint32_t i = 0; peers && i < n; i++)
        free(peers[i]);
    free(peers);
}

ss_status ss__peer_list_parse(const char *list, uint32_t max, char ***out, uint32_t *n) {
    if (!list || !*list || !out || !n)
        return SS_ERR_INVALID_ARGUMENT;
    size_t cap = 1;
    for (const char *p = list; *p; p++)
        cap += *p == ',';
    if (cap > max)
        return SS_ERR_INVALID_ARGUMENT;
    char *copy = strdup(list), *save = NULL;
    char **peers = calloc(cap, sizeof *peers);
    ss_status st = copy && peers ? SS_OK : SS_ERR_NO_MEMORY;
    uint32_t k = 0;
    for (char *tok = st == SS_OK ? strtok_r(copy, ",", &save) : NULL; tok && st == SS_OK;
         tok = strtok_r(NULL, ",", &save))
        if (!ss__address_valid(tok, "peers", NULL, 0))
            st = SS_ERR_INVALID_ARGUMENT;
        else if (!(peers[k++] = strdup(tok)))
            st = SS_ERR_NO_MEMORY;
    free(copy);
    if (st == SS_OK && k < 2)
        st = SS_ERR_INVALID_ARGUMENT; /* a decentralized round needs someone to talk to */
    if (st != SS_OK) {
        ss__peer_list_free(peers, k);
        return st;
    }
    *out = peers;
    *n = k;
    return SS_OK;
}

bool ss__peer_sender_ok(const char *group, uint32_t from, uint32_t npeers, uint32_t rank,
                        ss__rpc_reply *reply) {
    reply->status = SS_ERR_INVALID_ARGUMENT;
    if (!ss__ps_group_name_valid(group)) {
        snprintf(reply->message, sizeof reply->message, "group name must be " SS_PS_GROUP_RULE);
        return false;
    }
    if (from >= npeers || from == rank) {
        snprintf(reply->message, sizeof reply->message, "from=%u: not another member", from);
        return false;
    }
    reply->status = SS_OK;
    return true;
}

ss_status ss__peer_mesh_init(ss__peer_mesh *m, const ss__rpc_tls *tls, char *why, size_t whylen) {
    *m = (ss__peer_mesh){0};
    if (tls && (tls->ca_file || tls->cert_file)) {
        m->tls = *tls;
        m->has_tls = true;
    }
    return ss__auth_header_from_env(m->auth, sizeof m->auth, why, whylen);
}

ss_status ss__peer_mesh_set(ss__peer_mesh *m, char **peers, uint32_t n, uint32_t rank) {
    ss__rpc_channel **ch = rank < n ? calloc(n, sizeof *ch) : NULL;
    if (!ch) {
        ss__peer_list_free(peers, n);
        return rank < n ? SS_ERR_NO_MEMORY : SS_ERR_INVALID_ARGUMENT;
    }
    ss__peer_mesh_clear(m);
    m->peers = peers;
    m->ch = ch;
    m->npeers = n;
    m->rank = rank;
    return SS_OK;
}

ss__rpc_channel *ss__peer_mesh_channel(ss__peer_mesh *m, uint32_t i) {
    if (!m->ch[i] && ss__rpc_channel_create(m->peers[i], 1u << 30, m->has_tls ? &m->tls : NULL,
                                            &m->ch[i], NULL, 0) != SS_OK)
        m->ch[i] = NULL;
    return m->ch[i];
}

ss_status ss__peer_mesh_serve(ss__peer_mesh *m, const char *who, const char *listen,
                              bool insecure_loopback, uint32_t threads, size_t max_message,
                              const ss__rpc_method *methods, size_t nmethods, void *ctx, char *why,
                              size_t whylen) {
    if (!listen)
        listen = m->peers[m->rank];
    char what[96];
    snprintf(what, sizeof what, "%s listening on", who);
    ss_status st =
        ss__auth_listener_check(what, listen, m->auth[0], false, insecure_loopback, why, whylen);
    if (st != SS_OK)
        return st;
    ss__rpc_server_config scfg = {.listen = listen,
                                  .threads = threads,
                                  .max_message_bytes = max_message,
                                  .auth_header = m->auth};
    return ss__rpc_server_start(&scfg, methods, nmethods, ctx, &m->srv, why, whylen);
}

int ss__peer_mesh_port(const ss__peer_mesh *m) {
    return m->srv ? ss__rpc_server_port(m->srv) : 0;
}

void ss__peer_mesh_stop(ss__peer_mesh *m) {
    if (m->srv)
        ss__rpc_server_stop(m->srv);
    m->srv = NULL;
}

void ss__peer_mesh_clear(ss__peer_mesh *m) {
    for (uint32_t i = 0; m->ch && i < m->npeers; i++)
        if (m->ch[i])
            ss__rpc_channel_destroy(m->ch[i]);
    free(m->ch);
    ss__peer_list_free(m->peers, m->npeers);
    m->ch = NULL;
    m->peers = NULL;
    m->npeers = 0;
}
