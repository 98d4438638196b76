/* protobuf-c helpers for service handlers (kept out of rpc.h so that its
 * users need not see protobuf-c). */
#ifndef SHADOWSYNC_RPC_PB_H
#define SHADOWSYNC_RPC_PB_H

#include <protobuf-c/protobuf-c.h>

#include "rpc/rpc.h"

/* Packs a message into reply->data (SS_ERR_NO_MEMORY in reply on failure). */
void ss__rpc_reply_pack(const ProtobufCMessage *m, ss__rpc_reply *reply);

#endif
