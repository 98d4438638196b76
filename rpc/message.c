/* ss__rpc_message: a received gRPC message read from its slices. A 1 MiB
 * message arrives in about 17 slices; reading the part a caller needs
 * straight from them saves gathering the whole message into one buffer
 * (grpc_byte_buffer_reader_readall) and copying it again from there. */
#include <grpc/byte_buffer_reader.h>
#include <string.h>

#include "common/strbuf.h"
#include "rpc/message.h"

ss_status ss__rpc_message_open(grpc_byte_buffer *bb, ss__rpc_message *m, char *why, size_t whylen) {
    memset(m, 0, sizeof *m);
    m->flat = grpc_empty_slice();
    if (!bb)
        return SS_OK; /* an empty message */
    if (bb->type == GRPC_BB_RAW && bb->data.raw.compression == GRPC_COMPRESS_NONE) {
        m->slices = bb->data.raw.slice_buffer.slices;
        m->count = bb->data.raw.slice_buffer.count;
        m->length = bb->data.raw.slice_buffer.length;
        return SS_OK;
    }
    /* Compressed by the peer: the reader inflates it, into one slice. */
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return ss__fail(why, whylen, SS_ERR_PARSE, "a compressed message gRPC cannot read");
    m->flat = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    m->slices = &m->flat;
    m->count = 1;
    m->length = GRPC_SLICE_LENGTH(m->flat);
    return SS_OK;
}

void ss__rpc_message_close(ss__rpc_message *m) {
    grpc_slice_unref(m->flat);
    memset(m, 0, sizeof *m);
    m->flat = grpc_empty_slice();
}

size_t ss__rpc_message_length(const ss__rpc_message *m) {
    return m->length;
}

bool ss__rpc_message_copy(const ss__rpc_message *m, size_t off, void *dst, size_t len) {
    if (off > m->length || len > m->length - off)
        return false;
    uint8_t *out = dst;
    for (size_t i = 0; i < m->count && len > 0; i++) {
        size_t k = GRPC_SLICE_LENGTH(m->slices[i]);
        if (off >= k) {
            off -= k;
            continue;
        }
        size_t take = k - off < len ? k - off : len;
        memcpy(out, GRPC_SLICE_START_PTR(m->slices[i]) + off, take);
        out += take;
        len -= take;
        off = 0;
    }
    return len == 0;
}
