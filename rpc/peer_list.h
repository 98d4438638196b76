/* The member list of the decentralized transports (gossip, trees):
 * "host:port,host:port,...", the same order on every member. */
#ifndef SS_RPC_PEER_LIST_H
#define SS_RPC_PEER_LIST_H

#include <stdint.h>

#include "shadowsync/status.h"

/* Splits list into *n strdup'd addresses (*out, free with
 * ss__peer_list_free). SS_ERR_INVALID_ARGUMENT: empty, fewer than 2 or
 * more than max entries. */
ss_status ss__peer_list_parse(const char *list, uint32_t max, char ***out, uint32_t *n);
void ss__peer_list_free(char **peers, uint32_t n);

#endif
