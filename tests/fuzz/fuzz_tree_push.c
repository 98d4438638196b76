/* The TreeSync Push handler (rpc/tree_transport.c) from raw bytes: the
 * request message exactly as gRPC would hand it over, against a member of
 * 4 that has joined groups "w" (10 floats) and "v" (3). State (the rounds'
 * buffers, the round numbers seen) lives across inputs, as on a member. */
#include <stdint.h>
#include <stdlib.h>

#include "rpc/tree_transport.h"

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
    ss__tree_transport_serve_push(t, data, size, &reply);
    free(reply.data_block ? reply.data_block : reply.data);
    return 0;
}
