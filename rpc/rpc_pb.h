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

/* A typed method's request (rpc.h's ss__rpc_method.request). The server
 * unpacks it as desc, runs serve with the message, and frees it; a
 * request that is not one is refused (SS_ERR_PARSE, reply says which
 * type) and refused(ctx) called, when given, to count it. With
 * tail_field set, that bytes field (at tail_offset) is read in place when
 * it ends the message (ss__rpc_unpack_tail): serve sees it in the
 * message either way, pointing into the request. */
typedef struct ss__rpc_request_type {
    const ProtobufCMessageDescriptor *desc;
    void (*serve)(void *ctx, void *request, ss__rpc_reply *reply);
    void (*refused)(void *ctx);
    uint32_t tail_field; /* 0: none */
    size_t tail_offset;
} ss__rpc_request_type;

/* Serves one request of type t (as a typed method does); for raw handlers
 * that forward to a typed one. */
void ss__rpc_serve_request(const ss__rpc_request_type *t, void *ctx, const uint8_t *req, size_t len,
                           ss__rpc_reply *reply);

/* A request whose tail bytes field `field` (at field_offset in the
 * unpacked struct) is read in place when it ends the message (rpc/pb_wire.h:
 * only the small fields are unpacked), else from the whole message
 * unpacked the ordinary way; *tail points into req or into the message.
 * NULL: not a message of this type (reply set, as ss__rpc_unpack). */
void *ss__rpc_unpack_tail(const ProtobufCMessageDescriptor *desc, uint32_t field,
                          size_t field_offset, const uint8_t *req, size_t len,
                          ProtobufCBinaryData *tail, ss__rpc_reply *reply);

/* The small fields of m packed, then the tag and length of its tail bytes
 * field `field` (payload_len bytes, sent after them from where they lie:
 * ss__rpc_request.payload, rpc/pb_wire.h); NULL: no memory. Free it. */
uint8_t *ss__rpc_pack_tail_head(const ProtobufCMessage *m, uint32_t field, size_t payload_len,
                                size_t *len);

/* One unary call of message req, its reply unpacked as desc into *reply
 * (free with protobuf_c_message_free_unpacked): ss__rpc_call's status, or
 * SS_ERR_PARSE when the reply is not a desc (said in msg when given). */
ss_status ss__rpc_call_message(ss__rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                               uint32_t timeout_ms, bool wait_for_ready,
                               const ProtobufCMessageDescriptor *desc, ProtobufCMessage **reply,
                               char *msg, size_t msglen);

/* Packs a message into reply->data (SS_ERR_NO_MEMORY in reply on failure). */
void ss__rpc_reply_pack(const ProtobufCMessage *m, ss__rpc_reply *reply);

/* A reply whose last field is tail bytes (the floats), built in place (rpc/pb_wire.h):
 * alloc gives room for `bytes` (aligned for floats) in one block with room
 * in front for the message's small fields and the tail field's header
 * (NULL: no memory); the handler writes the payload there; seal packs
 * head (the reply message without its tail field) and the header right in
 * front of it and hands the block to reply, so the payload is never
 * copied. Seal refuses (SS_ERR_INTERNAL, block freed) small fields that
 * do not fit the room: no message of ours comes near. */
void *ss__rpc_tail_reply_alloc(size_t bytes, uint8_t **block);
ss_status ss__rpc_tail_reply_seal(const ProtobufCMessage *head, uint32_t field, uint8_t *block,
                                  size_t bytes, ss__rpc_reply *reply);

/* The client side of a reply of type desc whose tail bytes field `field`
 * (at field_offset in the unpacked struct) must hold exactly `want` bytes:
 * copied into dest straight from gRPC's slices when the field ends the
 * message (rpc/pb_wire.h), else from the whole message unpacked the
 * ordinary way (another implementation's field order). small, optional,
 * sees the reply's other fields. SS_ERR_SIZE_MISMATCH for another length,
 * SS_ERR_PARSE for a message that is not one. (pb_wire.c) */
ss_status ss__rpc_read_tail_reply(const ss__rpc_message *msg,
                                  const ProtobufCMessageDescriptor *desc, uint32_t field,
                                  size_t field_offset, void *dest, size_t want,
                                  void (*small)(const ProtobufCMessage *m, void *arg),
                                  void *small_arg);

#endif
