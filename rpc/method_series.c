/* The per-method series of a server's calls (method_series.h). */
#include "rpc/method_series.h"

#include "common/clock.h"

void ss__rpc_method_series_register(ss__metrics *m, const char *path, const char *transport,
                                    ss__rpc_method_series *out) {
    const char *ok[] = {"method",  path, "result", "ok", transport ? "transport" : NULL,
                        transport, NULL};
    const char *err[] = {"method",  path, "result", "error", transport ? "transport" : NULL,
                         transport, NULL};
    const char *by_method[] = {"method", path, transport ? "transport" : NULL, transport, NULL};
    const char *help = "RPC requests served, by method and result (transport=\"bulk\": on a bulk "
                       "stream, rpc/bulk/bulk.h).";
    ss__metrics_counter(m, "shadowsync_rpc_requests_total", help, ok, &out->ok);
    ss__metrics_counter(m, "shadowsync_rpc_requests_total", help, err, &out->error);
    ss__metrics_counter(m, "shadowsync_rpc_received_bytes_total",
                        "Request message bytes received, by method.", by_method,
                        &out->received_bytes);
    ss__metrics_counter(m, "shadowsync_rpc_sent_bytes_total",
                        "Reply message bytes sent, by method.", by_method, &out->sent_bytes);
    /* 100 us (a small call on loopback) to 10 s (an MA round waiting for
     * its members). */
    static const double bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                    0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
    ss__metrics_histogram(m, "shadowsync_rpc_server_seconds",
                          "Seconds from a call's arrival to its reply (the request read and "
                          "handled; refusals too), by method.",
                          by_method, bounds, sizeof bounds / sizeof *bounds, &out->seconds);
}

void ss__rpc_method_series_count(const ss__rpc_method_series *s, ss_status result, size_t received,
                                 size_t sent, uint64_t arrived_ns) {
    ss__counter *counter = result == SS_OK ? s->ok : s->error;
    if (counter)
        ss__counter_add(counter, 1);
    if (s->received_bytes && received)
        ss__counter_add(s->received_bytes, received);
    if (s->sent_bytes && result == SS_OK)
        ss__counter_add(s->sent_bytes, sent);
    if (s->seconds && arrived_ns)
        ss__histogram_observe(s->seconds, (double)(ss__now_ns() - arrived_ns) / 1e9);
}
