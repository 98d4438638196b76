/* The members of the decentralized transports (gossip, trees): the list
 * "host:port,host:port,...", the same order on every member, and the
 * mesh both transports keep over it. */
#ifndef SS_RPC_PEER_LIST_H
#define SS_RPC_PEER_LIST_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rpc/auth.h"
#include "rpc/rpc.h"
#include "shadowsync/status.h"

/* Splits list into *n strdup'd addresses (*out, free with
 * ss__peer_list_free). SS_ERR_INVALID_ARGUMENT: empty, fewer than 2 or
 * more than max entries. */
ss_status ss__peer_list_parse(const char *list, uint32_t max, char ***out, uint32_t *n);
void ss__peer_list_free(char **peers, uint32_t n);
/* Sends one small message to each of n channels at once, best effort (a
 * member telling the others that it leaves): replies and failures are
 * dropped, and it waits at most timeout_ms or a second, the shorter. */
void ss__peer_tell_all(ss__rpc_channel *const *ch, size_t n, const char *method,
                       const ProtobufCMessage *msg, uint32_t timeout_ms);

/* A member's view of the others: the list, a channel to each (made on
 * first use), its own rank, its TLS files and token, and its server.
 * Guarded by its transport's lock. */
typedef struct ss__peer_mesh {
    char **peers;
    ss__rpc_channel **ch; /* per member; NULL for self and until first used */
    uint32_t npeers, rank;
    ss__rpc_tls tls; /* a copy: channels are made later (the files' names must outlive it) */
    bool has_tls;
    ss__rpc_server *srv;
    char auth[SS_AUTH_HEADER_MAX];
} ss__peer_mesh;

/* An empty mesh with tls's files (NULL: plain) and the token's header
 * from the environment. */
ss_status ss__peer_mesh_init(ss__peer_mesh *m, const ss__rpc_tls *tls, char *why, size_t whylen);
/* peers (n of them, the mesh's from now on, freed on failure) in place of
 * the old list, with rank this member's: SS_ERR_INVALID_ARGUMENT when
 * rank is not one of them. */
ss_status ss__peer_mesh_set(ss__peer_mesh *m, char **peers, uint32_t n, uint32_t rank);
/* The channel to member i (messages up to 1 GiB: a whole group), made on
 * first use; NULL when it cannot be made. */
ss__rpc_channel *ss__peer_mesh_channel(ss__peer_mesh *m, uint32_t i);
/* Serves methods (with ctx) on listen (NULL: this member's own address)
 * once the listener rule allows it (rpc/auth.h; who names the member in
 * a refusal), with threads and messages of at most max_message bytes. */
ss_status ss__peer_mesh_serve(ss__peer_mesh *m, const char *who, const char *listen,
                              bool insecure_loopback, uint32_t threads, size_t max_message,
                              const ss__rpc_method *methods, size_t nmethods, void *ctx, char *why,
                              size_t whylen);
/* The port served (0: none). */
int ss__peer_mesh_port(const ss__peer_mesh *m);
/* The server stopped (a call in a handler finishes first). */
void ss__peer_mesh_stop(ss__peer_mesh *m);
/* The list and its channels freed. */
void ss__peer_mesh_clear(ss__peer_mesh *m);

/* A request from another member of a group: true when the group's name
 * is valid and `from` is a member other than `rank` (of npeers); else the
 * refusal, saying which, is in reply. */
bool ss__peer_sender_ok(const char *group, uint32_t from, uint32_t npeers, uint32_t rank,
                        ss__rpc_reply *reply);

#endif
