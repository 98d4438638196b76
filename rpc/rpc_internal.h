/* Shared by the rpc/ sources; not installed. */
#ifndef SS_RPC_INTERNAL_H
#define SS_RPC_INTERNAL_H

/* Until chunked streaming lands, a whole group travels in one message. */
#define SS_RPC_DEFAULT_MAX_MESSAGE (256u << 20)

#endif
