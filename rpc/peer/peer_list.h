/* The member list of the decentralized transports (gossip, trees):
 * "host:port,host:port,...", the same order on every member. */
#ifndef SS_RPC_PEER_LIST_H
#define SS_RPC_PEER_LIST_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* A request from another member of a group: true when the group's name
 * is valid and `from` is a member other than `rank` (of npeers); else the
 * refusal, saying which, is in reply. */
bool ss__peer_sender_ok(const char *group, uint32_t from, uint32_t npeers, uint32_t rank,
                        ss__rpc_reply *reply);

#endif
