/* How the client reads a reply where gRPC keeps it: the input cut into
 * slices (ss__rpc_message_copy must read exactly the bytes of the whole
 * message, from any offset, across any cut), and the head finder of a
 * trailing tail field (ss__pb_find_trailing_bytes_in on the first `have`
 * bytes must never claim more than the whole-message finder). The first
 * three bytes steer: how many slices, the tail field's number, and how
 * much of the head is read. */
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/message.h"
#include "rpc/pb_wire.h"

static void check_copy(const ss__rpc_message *m, const uint8_t *flat, size_t len, size_t off,
                       size_t n) {
    uint8_t *out = malloc(n + 1);
    bool ok = ss__rpc_message_copy(m, off, out, n);
    if (ok != (off <= len && n <= len - off))
        abort(); /* refused a range inside, or took one outside */
    if (ok && memcmp(out, flat + off, n) != 0)
        abort(); /* other bytes than the message's */
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int inited;
    if (!inited) {
        grpc_init();
        inited = 1;
    }
    if (size < 3)
        return 0;
    const size_t cuts = data[0] % 24, field = data[1] % 8 + 1, peek = data[2];
    const uint8_t *msg = data + 3;
    const size_t len = size - 3;
    grpc_slice sl[25];
    size_t ns = 0, at = 0;
    for (size_t k = 0; k < cuts && at < len; k++) { /* slice lengths from the message's bytes */
        size_t piece = (size_t)msg[(at * 7 + k) % len] % 13 + 1;
        if (piece > len - at)
            piece = len - at;
        sl[ns++] = grpc_slice_from_copied_buffer((const char *)msg + at, piece);
        at += piece;
    }
    if (at < len || ns == 0)
        sl[ns++] = grpc_slice_from_copied_buffer((const char *)msg + at, len - at);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(sl, ns);
    for (size_t i = 0; i < ns; i++)
        grpc_slice_unref(sl[i]);
    ss__rpc_message m;
    if (ss__rpc_message_open(bb, &m, NULL, 0) != SS_OK || ss__rpc_message_length(&m) != len)
        abort();
    check_copy(&m, msg, len, 0, len);
    check_copy(&m, msg, len, len / 3, len - len / 3);
    check_copy(&m, msg, len, len / 2, len); /* past the end: refused */
    check_copy(&m, msg, len, len + 1, 0);
    const size_t have = peek < len ? peek : len;
    uint8_t *head = malloc(have + 1);
    if (!ss__rpc_message_copy(&m, 0, head, have))
        abort();
    size_t p1, o1, p2, o2;
    if (ss__pb_find_trailing_bytes_in(head, have, len, (uint32_t)field, &p1, &o1) &&
        (!ss__pb_find_trailing_bytes(msg, len, (uint32_t)field, &p2, &o2) || p1 != p2 || o1 != o2))
        abort(); /* the head alone claimed what the whole message does not say */
    free(head);
    ss__rpc_message_close(&m);
    grpc_byte_buffer_destroy(bb);
    return 0;
}
