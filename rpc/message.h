/* The inside of ss__rpc_message (rpc/rpc.h), for client.c and server.c. */
#ifndef SS_RPC_MESSAGE_H
#define SS_RPC_MESSAGE_H

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>

#include "rpc/rpc.h"

struct ss__rpc_message {
    const grpc_slice *slices; /* the byte buffer's (owned by it) or &flat */
    size_t count;
    size_t length;
    grpc_slice flat; /* a compressed message, inflated */
};

/* Reads bb (NULL: an empty message); bb must outlive m. SS_ERR_PARSE when
 * a compressed message cannot be inflated. */
ss_status ss__rpc_message_open(grpc_byte_buffer *bb, ss__rpc_message *m, char *why, size_t whylen);
void ss__rpc_message_close(ss__rpc_message *m);

#endif
