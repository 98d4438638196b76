/* The DenseSync client: an ss__transport over S shadowsync-ps shards, so
 * the engine runs unchanged over the network (the server side is
 * ps/dense_service.c). */
#ifndef SS_RPC_GRPC_TRANSPORT_H
#define SS_RPC_GRPC_TRANSPORT_H

#include "rpc/rpc.h"
#include "shadow/codec.h"
#include "shadow/transport.h"

/* Floats per chunk when the config gives none: 1 MiB of payload (gRPC
 * moves several 1 MiB messages in parallel ~2x faster than one 4 MiB
 * message on loopback; see BENCHMARKS.md). Every
 * member of a group must use the same value (it names the chunks). */
#define SS_GRPC_CHUNK_FLOATS (1u << 18)
#define SS_GRPC_MAX_SHARDS   64
/* Chunk calls in flight per shard when the config gives none: enough that
 * the server answers one chunk while the next ones are on their way up
 * (both directions of the link busy at once), few enough that a chunk's
 * upload is not interleaved with every other chunk's (BENCHMARKS.md). */
#define SS_GRPC_WINDOW 4
/* The most an adapted window grows to (a 20 ms round trip at 10 Gbit/s
 * holds 24 chunks of 1 MiB). */
#define SS_GRPC_WINDOW_MAX 64

typedef struct ss__grpc_transport_config {
    /* "host:port[,host:port...]": the S shadowsync-ps shards, in the same
     * order on every trainer. Shard s holds floats [n s / S, n (s+1) / S)
     * of every group. */
    const char *targets;
    uint32_t timeout_ms; /* per call; RoundMean adds round_wait_ms */
    uint32_t round_wait_ms;
    size_t chunk_floats;    /* 0 = SS_GRPC_CHUNK_FLOATS */
    uint32_t window;        /* chunk calls in flight per shard; 0 = S-EASGD adapts it to the
                               path's round trip, from SS_GRPC_WINDOW up */
    uint32_t retries;       /* idempotent calls (ReadCentral, Heartbeat, Leave)
                               retried this often on UNAVAILABLE, with backoff */
    const ss__rpc_tls *tls; /* optional */
    /* Compressed sync (shadow/codec.h): S-EASGD exchanges and MA/BMUF
     * rounds send and receive this encoding, each chunk with its mirror.
     * SS_ENC_F32 (0): plain floats. */
    ss__encoding encoding;
} ss__grpc_transport_config;

ss_status ss__grpc_transport_create(const ss__grpc_transport_config *cfg, ss__transport **out);

/* The adapted window (config window 0): enough chunk calls in flight per
 * shard to keep a long path full (Little's law): while one call makes its
 * round trip (rtt_ns, the channels' shortest small call), the link can
 * carry rtt / interval more chunks (rounded), where interval_ns is how often the
 * last batch's chunk calls ended, over all its channels. SS_GRPC_WINDOW
 * stays the floor, since on a short path rtt / interval is about 0 and the
 * floor is what overlaps the two directions. A path not yet full ends
 * calls rtt / window apart, so the estimate grows batch by batch until
 * the interval is the link's own. The result moves halfway from cur
 * toward the estimate, so one odd batch does not swing it, and never
 * passes SS_GRPC_WINDOW_MAX. Returns cur when rtt or interval is 0. */
uint32_t ss__grpc_window_next(uint32_t cur, uint64_t rtt_ns, double interval_ns, size_t channels);

/* t's window now (0 when t is not a gRPC transport). */
uint32_t ss__grpc_transport_window(ss__transport *t);

/* Asks one shadowsync-ps to write its checkpoint now. */
ss_status ss__grpc_checkpoint(const char *target, const ss__rpc_tls *tls, uint32_t timeout_ms,
                              char *path, size_t pathlen, size_t *groups);

#endif
