/* The follower's side of the Deltas service (embedding.proto; the server
 * is ps/deltas_service.c): what a training PS holds past a sequence
 * number, and an entry's files fetched whole in parts. */
#ifndef SS_RPC_EMB_DELTA_CLIENT_H
#define SS_RPC_EMB_DELTA_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rpc/rpc.h"

#define SS_DELTA_M_INDEX "/shadowsync.v1.Deltas/Index"
#define SS_DELTA_M_READ  "/shadowsync.v1.Deltas/Read"

#define SS_DELTA_PART_MAX (4u << 20) /* bytes of one Read reply */

/* An entry's two files. */
typedef enum ss__delta_part { SS_DELTA_EMB = 0, SS_DELTA_DENSE = 1 } ss__delta_part;

/* What a delta directory holds past `after`. */
typedef struct ss__delta_index {
    uint64_t next; /* after + 1 when held, else 0 */
    bool next_is_base;
    uint64_t newest_base; /* 0: none */
    uint64_t newest;
} ss__delta_index;

ss_status ss__delta_client_index(ss__rpc_channel *ch, uint64_t after, uint32_t timeout_ms,
                                 ss__delta_index *out);

/* File `part` of entry seq, whole, into *buf (malloc'd, caller frees):
 * parts of SS_DELTA_PART_MAX until the size the server states.
 * SS_ERR_TOO_LARGE past max_size; SS_ERR_PARSE when the parts do not add
 * up; the server's status otherwise. why says which. */
ss_status ss__delta_client_fetch(ss__rpc_channel *ch, uint64_t seq, bool base, ss__delta_part part,
                                 uint32_t timeout_ms, size_t max_size, unsigned char **buf,
                                 size_t *len, char *why, size_t whylen);

#endif
