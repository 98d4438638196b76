/* The TreeSync handlers (rpc/tree/tree_service.c) from raw bytes: the request
 * message exactly as gRPC would hand it over, against a member of 4 that
 * has joined groups "w" (10 floats) and "v" (3). An input that starts
 * with 0xfd is a Leave, 0xfe a Probe (the rest of it the message); any
 * other a Push. State (the rounds' buffers, the round numbers seen, the
 * membership) lives across inputs, as on a member. */
#include <stdint.h>
#include <stdlib.h>

#include "rpc/tree/tree_transport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static ss__transport *t; /* a static: reachable until exit, not a leak */
    if (!t) {
        ss__tree_config cfg = {.peers = "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,127.0.0.1:4",
                               .rank = 1,
                               .listen = "-",
                               .timeout_ms = 1};
        uint64_t id;
        if (ss__tree_transport_create(&cfg, &t, NULL, 0) != SS_OK ||
            ss__transport_join(t, "w", 10, &id) != SS_OK ||
            ss__transport_join(t, "v", 3, &id) != SS_OK)
            abort();
    }
    ss__rpc_reply reply = {.status = SS_OK};
    int method = 0;
    if (size > 0 && (data[0] == 0xfd || data[0] == 0xfe)) {
        method = data[0] == 0xfd ? 1 : 2;
        data++, size--;
    }
    ss__tree_transport_serve(t, method, data, size, &reply);
    free(reply.data_block ? reply.data_block : reply.data);
    return 0;
}
