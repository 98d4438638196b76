/* protobuf-c helpers for service handlers (kept out of rpc.h so that its
 * users need not see protobuf-c). */
#ifndef SHADOWSYNC_RPC_PB_H
#define SHADOWSYNC_RPC_PB_H

#include <protobuf-c/protobuf-c.h>

#include "rpc/rpc.h"

/* Unpacks a request of type desc; NULL when it is not one, with reply set
 * to SS_ERR_PARSE "request is not a valid <type> message" (the caller
 * counts the refusal). Free with protobuf_c_message_free_unpacked. */
void *ss__rpc_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *req, size_t len,
                     ss__rpc_reply *reply);

/* Packs a message into reply->data (SS_ERR_NO_MEMORY in reply on failure). */
void ss__rpc_reply_pack(const ProtobufCMessage *m, ss__rpc_reply *reply);

#endif
