/* See pb_wire.h (and ss__rpc_read_tail_reply in rpc_pb.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/pb_wire.h"
#include "rpc/rpc_pb.h"

static size_t put_varint(uint64_t v, uint8_t *out) {
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

size_t ss__pb_bytes_header(uint32_t field, uint64_t len, uint8_t *out) {
    size_t n = put_varint(((uint64_t)field << 3) | 2u, out);
    return n + put_varint(len, out + n);
}

/* Reads a varint at *at (at most 10 bytes, no overflow); false at the end
 * of buf or on a malformed one. */
static bool get_varint(const uint8_t *buf, size_t len, size_t *at, uint64_t *v) {
    uint64_t x = 0;
    for (unsigned shift = 0, i = 0; i < 10; i++, shift += 7) {
        if (*at >= len)
            return false;
        uint8_t b = buf[(*at)++];
        if (i == 9 && b > 1)
            return false; /* more than 64 bits */
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

bool ss__pb_find_trailing_bytes_in(const uint8_t *buf, size_t have, size_t len, uint32_t field,
                                   size_t *prefix_len, size_t *payload_off) {
    size_t at = 0;
    bool seen = false; /* the field before its last occurrence: not ours */
    if (!buf || field == 0 || have > len)
        return false;
    while (at < have) {
        const size_t start = at;
        uint64_t tag, v;
        if (!get_varint(buf, have, &at, &tag) || (tag >> 3) == 0 || (tag >> 3) > 0x1fffffff)
            return false;
        if ((tag >> 3) == field && (tag & 7) != 2)
            return false;
        switch (tag & 7) {
        case 0: /* varint */
            if (!get_varint(buf, have, &at, &v))
                return false;
            break;
        case 1: /* 64-bit */
        case 5: /* 32-bit */
            if (have - at < ((tag & 7) == 1 ? 8u : 4u))
                return false;
            at += (tag & 7) == 1 ? 8 : 4;
            break;
        case 2: /* length-delimited */
            if (!get_varint(buf, have, &at, &v) || v > len - at)
                return false;
            if ((tag >> 3) == field && at + v == len) { /* the last field of the message */
                if (seen)
                    return false;
                *prefix_len = start;
                *payload_off = at;
                return true;
            }
            if ((tag >> 3) == field)
                seen = true;
            if (v > have - at)
                return false; /* runs past what we have, and is not the field */
            at += (size_t)v;
            break;
        default: /* groups (3, 4) and unknown types: not ours */
            return false;
        }
    }
    return false;
}

bool ss__pb_find_trailing_bytes(const uint8_t *buf, size_t len, uint32_t field, size_t *prefix_len,
                                size_t *payload_off) {
    return ss__pb_find_trailing_bytes_in(buf, len, len, field, prefix_len, payload_off);
}

/* A reply's small fields and its tail field's tag and length fit in its
 * first bytes (pb_wire.h): read them, then the tail bytes where they lie. */
uint8_t *ss__rpc_pack_tail_head(const ProtobufCMessage *m, uint32_t field, size_t payload_len,
                                size_t *len) {
    size_t h = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(h + SS_PB_BYTES_HEADER_MAX);
    if (buf) {
        protobuf_c_message_pack(m, buf);
        *len = h + ss__pb_bytes_header(field, payload_len, buf + h);
    }
    return buf;
}

void *ss__rpc_unpack_tail(const ProtobufCMessageDescriptor *desc, uint32_t field,
                          size_t field_offset, const uint8_t *req, size_t len,
                          ProtobufCBinaryData *tail, ss__rpc_reply *reply) {
    size_t prefix, off;
    if (ss__pb_find_trailing_bytes(req, len, field, &prefix, &off)) {
        void *m = ss__rpc_unpack(desc, req, prefix, reply);
        *tail = (ProtobufCBinaryData){.len = len - off, .data = (uint8_t *)req + off};
        return m;
    }
    void *m = ss__rpc_unpack(desc, req, len, reply);
    if (m)
        *tail = *(const ProtobufCBinaryData *)((const char *)m + field_offset);
    return m;
}

void ss__rpc_serve_request(const ss__rpc_request_type *t, void *ctx, const uint8_t *req, size_t len,
                           ss__rpc_reply *reply) {
    ProtobufCBinaryData tail = {0};
    ProtobufCMessage *m =
        t->tail_field
            ? ss__rpc_unpack_tail(t->desc, t->tail_field, t->tail_offset, req, len, &tail, reply)
            : ss__rpc_unpack(t->desc, req, len, reply);
    if (!m) {
        if (t->refused)
            t->refused(ctx);
        return;
    }
    ProtobufCBinaryData *field =
        t->tail_field ? (ProtobufCBinaryData *)(void *)((char *)m + t->tail_offset) : NULL;
    const ProtobufCBinaryData own = field ? *field : (ProtobufCBinaryData){0};
    if (field)
        *field = tail; /* read in place: points into req */
    t->serve(ctx, m, reply);
    if (field)
        *field = own; /* what free_unpacked may free */
    protobuf_c_message_free_unpacked(m, NULL);
}

#define REPLY_HEAD_PEEK 128

ss_status ss__rpc_read_tail_reply(const ss__rpc_message *msg,
                                  const ProtobufCMessageDescriptor *desc, uint32_t field,
                                  size_t field_offset, void *dest, size_t want,
                                  void (*small)(const ProtobufCMessage *m, void *arg),
                                  void *small_arg) {
    const size_t len = ss__rpc_message_length(msg);
    const size_t have = len < REPLY_HEAD_PEEK ? len : REPLY_HEAD_PEEK;
    uint8_t head[REPLY_HEAD_PEEK];
    size_t prefix, off;
    if (ss__rpc_message_copy(msg, 0, head, have) &&
        ss__pb_find_trailing_bytes_in(head, have, len, field, &prefix, &off)) {
        if (len - off != want)
            return SS_ERR_SIZE_MISMATCH;
        if (small) {
            ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, prefix, head);
            if (!m)
                return SS_ERR_PARSE;
            small(m, small_arg);
            protobuf_c_message_free_unpacked(m, NULL);
        }
        return ss__rpc_message_copy(msg, off, dest, want) ? SS_OK : SS_ERR_PARSE;
    }
    /* Another field order (another server): the ordinary path. */
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return SS_ERR_NO_MEMORY;
    ss_status st = SS_ERR_PARSE;
    ProtobufCMessage *m = NULL;
    if (ss__rpc_message_copy(msg, 0, buf, len) &&
        (m = protobuf_c_message_unpack(desc, NULL, len, buf))) {
        const ProtobufCBinaryData *b =
            (const ProtobufCBinaryData *)(const void *)((const char *)m + field_offset);
        st = b->len == want ? SS_OK : SS_ERR_SIZE_MISMATCH;
        if (st == SS_OK) {
            memcpy(dest, b->data, want);
            if (small)
                small(m, small_arg);
        }
        protobuf_c_message_free_unpacked(m, NULL);
    }
    free(buf);
    return st;
}

/* Room for a reply's small fields and its tail field's tag and length. */
#define BULK_HEAD 64

void *ss__rpc_tail_reply_alloc(size_t bytes, uint8_t **block) {
    *block = malloc(BULK_HEAD + bytes);
    return *block ? *block + BULK_HEAD : NULL;
}

ss_status ss__rpc_tail_reply_seal(const ProtobufCMessage *head, uint32_t field, uint8_t *block,
                                  size_t bytes, ss__rpc_reply *r) {
    uint8_t trailer[SS_PB_BYTES_HEADER_MAX];
    size_t h2 = ss__pb_bytes_header(field, bytes, trailer);
    size_t h1 = protobuf_c_message_get_packed_size(head);
    if (h1 + h2 > BULK_HEAD) {
        free(block);
        return SS_ERR_INTERNAL;
    }
    uint8_t *start = block + BULK_HEAD - h1 - h2;
    protobuf_c_message_pack(head, start);
    memcpy(start + h1, trailer, h2);
    r->data = start;
    r->len = h1 + h2 + bytes;
    r->data_block = block;
    return SS_OK;
}

ss_status ss__rpc_call_message(ss__rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                               uint32_t timeout_ms, bool wait_for_ready,
                               const ProtobufCMessageDescriptor *desc, ProtobufCMessage **reply,
                               char *msg, size_t msglen) {
    size_t len = protobuf_c_message_get_packed_size(req);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return SS_ERR_NO_MEMORY;
    protobuf_c_message_pack(req, buf);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    ss_status st =
        ss__rpc_call(ch, method, buf, len, timeout_ms, wait_for_ready, &resp, &rlen, msg, msglen);
    free(buf);
    if (st != SS_OK)
        return st;
    *reply = protobuf_c_message_unpack(desc, NULL, rlen, resp);
    free(resp);
    if (!*reply && msg)
        snprintf(msg, msglen, "%s: the reply is not a %s", method, desc->name);
    return *reply ? SS_OK : SS_ERR_PARSE;
}
