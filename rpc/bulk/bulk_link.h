/* A channel's bulk streams (rpc/bulk/bulk.h): the one place in the call
 * layer that knows about streams. Every batch of calls (rpc.h
 * ss__rpc_call_many and the windowed ones) is offered here first; it
 * runs on streams when each call's channel has its streams on and its
 * server's ticket named the call's method, and over gRPC otherwise. The
 * protocols' clients never choose.
 *
 * A link learns what its server streams from its first ticket, asked for
 * over the channel (Bulk/Ticket) at its first call, and keeps that
 * stream for the calls that may go there (control calls, a Join or a
 * heartbeat, stay on gRPC). Idle streams are kept (a few per channel),
 * each of the shard map epoch it was opened in. A batch's calls to one server run on two streams
 * at once when there are several (the server computes one's call while it reads the other's),
 * and calls that wait at the server for other callers' (ss__rpc_request.waits: an MA round's)
 * each on its own, up to 8 (a stream's server takes its calls one after another: they must all
 * be there before one waits, as gRPC's window has them). A server that has no
 * bulk port (UNIMPLEMENTED), or gives this caller no ticket (a read-only certificate), is not asked
 * again for a minute; a stream that cannot be opened (a firewall, a restart) sends the calls over
 * gRPC for a second, doubling to 30 s while it keeps failing. */
#ifndef SS_RPC_BULK_LINK_H
#define SS_RPC_BULK_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rpc/rpc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ss__bulk_link ss__bulk_link;

/* A link for the channel to target ("host:port", "[v6]:port"), off until
 * ss__bulk_link_enable; tls: the channel's files (copied; NULL: plain),
 * max_reply: the channel's largest message. NULL *out and SS_OK when the
 * target is not host:port (a gRPC URI): that channel has no streams. */
ss_status ss__bulk_link_create(const char *target, const ss__rpc_tls *tls, size_t max_reply,
                               ss__bulk_link **out, char *why, size_t whylen);
void ss__bulk_link_destroy(ss__bulk_link *l);
/* Streams on or off for the link's channel (off: idle streams closed). */
void ss__bulk_link_enable(ss__bulk_link *l, bool on);
/* The channel routes by epoch now: idle streams of the old one are
 * closed (one in use is closed when it comes back). */
void ss__bulk_link_set_epoch(ss__bulk_link *l, uint64_t epoch);
/* Batches that ran on the link's streams so far. */
uint64_t ss__bulk_link_batches(const ss__bulk_link *l);

/* The link of ch (rpc/client.c); NULL: none. */
ss__bulk_link *ss__rpc_channel_link(const ss__rpc_channel *ch);

/* Runs the calls rq[0 .. n) on streams when every call may go there
 * (see above): true, *st the first failure, each call with its own
 * status and reply as ss__rpc_call_many gives them; a call that failed in
 * transit closes its channel's streams. false: nothing was sent (send
 * them over gRPC). */
bool ss__bulk_links_call(ss__rpc_request *rq, size_t n, uint32_t timeout_ms, ss_status *st);

#ifdef __cplusplus
}
#endif

#endif
