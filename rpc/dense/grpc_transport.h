/* The DenseSync client: an ss__transport over S shadowsync-ps shards, so
 * the engine runs unchanged over the network (the server side is
 * ps/dense_service.c). */
#ifndef SS_RPC_GRPC_TRANSPORT_H
#define SS_RPC_GRPC_TRANSPORT_H

#include "rpc/rpc.h"
#include "shadow/codec.h"
#include "shadow/transport.h"

/* Floats per chunk when the config gives none: 512 KiB of payload. gRPC
 * moves several messages of 512 KiB-1 MiB in parallel faster than one of
 * 4 MiB, and 512 KiB chunks two at a time faster than 1 MiB chunks four
 * at a time, on loopback and on a 10 Gbit/s link.
 * Every member of a group must use the same value (it names the chunks;
 * a PS refuses another cut). Before 0.2 it was 1u << 18. */
#define SS_GRPC_CHUNK_FLOATS (1u << 17)
/* The largest chunk a config may ask for (256 MiB per call). */
#define SS_GRPC_MAX_CHUNK_FLOATS (64u << 20)
#define SS_GRPC_MAX_SHARDS       64
/* S-EASGD chunk calls in flight per shard on a short path (the adapted
 * window's floor): one chunk is answered while the next is on its way up,
 * so both directions of the link are busy at once, and a chunk's upload is
 * not interleaved with many others'. */
#define SS_GRPC_WINDOW 2
/* MA/BMUF round calls in flight per shard, at least: a round's replies wait
 * at the PS until every member's chunk is in, so a member should have its
 * whole shard (up to this many chunks: 4 MiB) on the way before it waits,
 * or it pays one wait for the slowest member per window. */
#define SS_GRPC_ROUND_WINDOW 8
/* On a path that holds half a chunk or more, the adapted window is what
 * the path holds plus this many: 4 MiB of chunks, what 4 chunks of 1 MiB
 * were before 0.2, for the chunks being sent and answered at the ends. */
#define SS_GRPC_WINDOW_MARGIN 8
/* The most an adapted window grows to: 64 MiB of chunks (a 40 ms round
 * trip at 10 Gbit/s holds 95 chunks of 512 KiB). */
#define SS_GRPC_WINDOW_MAX 128

typedef struct ss__grpc_transport_config {
    /* "host:port[,host:port...]": the S shadowsync-ps shards, in the same
     * order on every trainer. Shard s holds floats [n s / S, n (s+1) / S)
     * of every group. */
    const char *targets;
    uint32_t timeout_ms; /* per call; RoundMean adds round_wait_ms */
    uint32_t round_wait_ms;
    size_t chunk_floats;    /* 0 = SS_GRPC_CHUNK_FLOATS */
    uint32_t window;        /* S-EASGD chunk calls in flight per shard; 0 = adapted to the
                               path's round trip (from SS_GRPC_ROUND_WINDOW, SS_GRPC_WINDOW at
                               least). MA/BMUF rounds take it or SS_GRPC_ROUND_WINDOW, the
                               larger. */
    uint32_t retries;       /* idempotent calls (ReadCentral, Heartbeat, Leave)
                               retried this often on UNAVAILABLE, with backoff */
    const ss__rpc_tls *tls; /* optional */
    /* Compressed sync (shadow/codec.h): S-EASGD exchanges and MA/BMUF
     * rounds send and receive this encoding, each chunk with its mirror.
     * SS_ENC_F32 (0): plain floats. */
    ss__encoding encoding;
    /* The shard map epoch targets came from (common/shard_map.h): every
     * call carries it (ss__rpc_channel_set_epoch). 0: none. */
    uint64_t epoch;
    /* Joins re-cut their groups (a shard map change, rpc/dense/recut_transport.h):
     * the PS retires chunks of the old cut that overlap and have no members
     * left, instead of refusing the join (JoinRequest.recut). */
    bool recut;
    /* The channels' calls on each shard's bulk streams when its PS has
     * a bulk port (rpc.h ss__rpc_channel_set_streams): S-EASGD and MA/BMUF
     * chunks; false: gRPC only. */
    bool bulk;
} ss__grpc_transport_config;

ss_status ss__grpc_transport_create(const ss__grpc_transport_config *cfg, ss__transport **out,
                                    char *why, size_t whylen);

/* The adapted window (config window 0): enough chunk calls in flight per
 * shard to keep a long path full (Little's law): while one call makes its
 * round trip (rtt_ns, the channels' shortest small call), the link carries
 * held = rtt / interval chunks, where interval_ns is how often the last
 * batch's chunk calls ended, over all its channels. Under half a chunk (a
 * short path) the estimate is SS_GRPC_WINDOW, which overlaps the two
 * directions; else held (rounded) + SS_GRPC_WINDOW_MARGIN. A path not yet
 * full ends calls about rtt / cur apart (held near cur), so the estimate
 * grows batch by batch until the interval is the link's own. The result
 * moves halfway from cur toward the estimate, so one odd batch does not
 * swing it, and never passes SS_GRPC_WINDOW_MAX. Returns cur when rtt or
 * interval is 0. */
uint32_t ss__grpc_window_next(uint32_t cur, uint64_t rtt_ns, double interval_ns, size_t channels);

/* A re-cutting member's join (config recut): a chunk of the new cut whose
 * group exists on its PS with no members is made anew there (the member
 * brings its centre; the chunk may have sat unsynced through an earlier
 * cut). JoinRequest.fresh. */
ss_status ss__grpc_transport_join_fresh(ss__transport *t, const char *group, size_t n, uint64_t key,
                                        uint64_t *member);

/* Every later call of t carries this shard map epoch (0: none, served by
 * a PS of any epoch: what the old cut's last calls, its reads and leaves,
 * need once the PS serve the new map). No-op when t is not a gRPC
 * transport. */
void ss__grpc_transport_set_epoch(ss__transport *t, uint64_t epoch);

/* t's window now (0 when t is not a gRPC transport). */
uint32_t ss__grpc_transport_window(ss__transport *t);
/* S-EASGD and MA/BMUF batches sent on bulk streams so far (config bulk). */
uint64_t ss__grpc_transport_bulk_batches(ss__transport *t);

/* Asks one shadowsync-ps to write its checkpoint now. */
ss_status ss__grpc_checkpoint(const char *target, const ss__rpc_tls *tls, uint32_t timeout_ms,
                              char *path, size_t pathlen, size_t *groups);

#endif
