/* Deltas over gRPC: Index, then Read in parts until the file is whole. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/emb/delta_client.h"
#include "rpc/emb/embedding.pb-c.h"
#include "rpc/rpc_pb.h"

ss_status ss__delta_client_index(ss__rpc_channel *ch, uint64_t after, uint32_t timeout_ms,
                                 ss__delta_index *out) {
    Shadowsync__V1__DeltaIndexRequest req = SHADOWSYNC__V1__DELTA_INDEX_REQUEST__INIT;
    req.after = after;
    ProtobufCMessage *r;
    char why[256];
    ss_status st =
        ss__rpc_call_message(ch, SS_DELTA_M_INDEX, &req.base, timeout_ms, false,
                             &shadowsync__v1__delta_index_reply__descriptor, &r, why, sizeof why);
    if (st != SS_OK)
        return st;
    const Shadowsync__V1__DeltaIndexReply *x = (const Shadowsync__V1__DeltaIndexReply *)r;
    *out = (ss__delta_index){.next = x->next,
                             .next_is_base = x->next_is_base,
                             .newest_base = x->newest_base,
                             .newest = x->newest};
    protobuf_c_message_free_unpacked(r, NULL);
    return SS_OK;
}

ss_status ss__delta_client_fetch(ss__rpc_channel *ch, uint64_t seq, bool base, ss__delta_part part,
                                 uint32_t timeout_ms, size_t max_size, unsigned char **buf,
                                 size_t *len, char *why, size_t whylen) {
    *buf = NULL;
    *len = 0;
    unsigned char *data = NULL;
    uint64_t size = 0, at = 0;
    ss_status st = SS_OK;
    do {
        Shadowsync__V1__DeltaReadRequest req = SHADOWSYNC__V1__DELTA_READ_REQUEST__INIT;
        req.seq = seq;
        req.is_base = base;
        req.file = (uint32_t)part;
        req.offset = at;
        req.max_bytes = SS_DELTA_PART_MAX;
        ProtobufCMessage *r;
        if ((st = ss__rpc_call_message(ch, SS_DELTA_M_READ, &req.base, timeout_ms, false,
                                       &shadowsync__v1__delta_read_reply__descriptor, &r, why,
                                       whylen)) != SS_OK)
            break;
        const Shadowsync__V1__DeltaReadReply *x = (const Shadowsync__V1__DeltaReadReply *)r;
        if (at == 0) {
            size = x->size;
            if (size > max_size) {
                snprintf(why, whylen, "entry %llu: a file of %llu bytes, over %zu",
                         (unsigned long long)seq, (unsigned long long)size, max_size);
                st = SS_ERR_TOO_LARGE;
            } else if (!(data = malloc(size ? size : 1))) {
                st = SS_ERR_NO_MEMORY;
            }
        }
        if (st == SS_OK &&
            (x->size != size || x->data.len > size - at || (x->data.len == 0 && at < size))) {
            snprintf(why, whylen, "entry %llu: parts that do not add up (size %llu, then %llu)",
                     (unsigned long long)seq, (unsigned long long)size,
                     (unsigned long long)x->size);
            st = SS_ERR_PARSE;
        }
        if (st == SS_OK) {
            memcpy(data + at, x->data.data, x->data.len);
            at += x->data.len;
        }
        protobuf_c_message_free_unpacked(r, NULL);
    } while (st == SS_OK && at < size);
    if (st != SS_OK) {
        free(data);
        return st;
    }
    *buf = data;
    *len = (size_t)size;
    return SS_OK;
}
