/* The PS's DenseSync handlers from raw bytes: the first byte picks the
 * method, the rest is the request message exactly as gRPC would hand it
 * over. State (groups, members) lives across inputs, as on a real PS. */
#include <stdint.h>
#include <stdlib.h>

#include "common/metrics.h"
#include "ps/dense_service.h"
#include "shadow/inproc_transport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static ss__dense_service svc;
    static const ss__rpc_method *methods;
    static size_t nmethods;
    static ss__transport *backend; /* statics: reachable until exit, not leaks */
    static ss__metrics *m;
    if (!methods) {
        ss__inproc_config cfg = {.round_deadline_ms = 1,
                                 .max_groups = 256,
                                 .max_members = 64,
                                 .max_total_floats = 1 << 20};
        if (ss__inproc_transport_create(&cfg, &backend, NULL, 0) != SS_OK ||
            ss__metrics_create(&m, NULL, 0) != SS_OK)
            abort();
        svc = (ss__dense_service){.centre = ss__inproc_central(backend), .max_floats = 4096};
        ss__metrics_counter(m, "rejected", "r", NULL, &svc.rejected);
        methods = ss__dense_service_methods(&nmethods);
    }
    if (size < 1)
        return 0;
    const ss__rpc_method *mt = &methods[data[0] % nmethods];
    ss__rpc_reply reply = {.status = SS_OK};
    ss__rpc_method_run(mt, &svc, data + 1, size - 1, &reply);
    free(reply.data_block ? reply.data_block : reply.data);
    return 0;
}
