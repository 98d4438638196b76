/* The per-method series of a server's calls, the same for every way a
 * call arrives: over gRPC (rpc/server.c) and on a bulk stream
 * (rpc/bulk/bulk_server.c, with transport="bulk"), so that a dashboard's
 * rate or latency of a method counts both. Not installed. */
#ifndef SS_RPC_METHOD_SERIES_H
#define SS_RPC_METHOD_SERIES_H

#include <stddef.h>
#include <stdint.h>

#include "common/metrics.h"
#include "shadowsync/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ss__rpc_method_series {
    ss__counter *ok, *error;                  /* shadowsync_rpc_requests_total{result} */
    ss__counter *received_bytes, *sent_bytes; /* message payloads */
    ss__histogram *seconds;                   /* arrival to reply */
} ss__rpc_method_series;

/* Registers the method's series in m under {method=path} (and
 * transport=<transport> when not NULL). A series left NULL (no room, a
 * clash) is simply not counted. */
void ss__rpc_method_series_register(ss__metrics *m, const char *path, const char *transport,
                                    ss__rpc_method_series *out);
/* Counts one call: its result, the bytes of its request and of its reply
 * (when it succeeded), and the seconds since arrived_ns (0: not timed). */
void ss__rpc_method_series_count(const ss__rpc_method_series *s, ss_status result, size_t received,
                                 size_t sent, uint64_t arrived_ns);

#ifdef __cplusplus
}
#endif

#endif
