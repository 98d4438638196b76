/* Decentralized averaging: an ss__transport with no PS on the dense path.
 *
 * Every member (a trainer's shadow pool) serves the latest snapshot of each
 * of its groups over gRPC (rpc/peer/peer_sync.proto) and, in a round,
 * pulls one peer's: the round's result is the mean of its own snapshot and
 * the peer's, so the engine moves the replica by half the difference (S-MA
 * with one peer at a time, the pull form of gossip averaging). Peers are
 * taken by a ring schedule (rank+1, rank+2, ... a different one each
 * round) or at random. A peer that is down, partitioned or has no snapshot
 * yet is skipped for the next one within the round, so a dead peer never
 * stalls a round; with every peer away the round fails (the engine counts
 * it) and training goes on. S-MA only: S-EASGD needs a central variable and
 * S-BMUF a global block state, which no member holds here. */
#ifndef SS_RPC_GOSSIP_TRANSPORT_H
#define SS_RPC_GOSSIP_TRANSPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "rpc/rpc.h"
#include "shadow/transport.h"

#define SS_GOSSIP_MAX_PEERS 1024

typedef struct ss__gossip_config {
    /* "host:port,..." every member's address, in the same order on every
     * member; this one is peers[rank]. */
    const char *peers;
    uint32_t rank;
    /* Where to serve (default: peers[rank]); "127.0.0.1:0" picks a port
     * (tests: see ss__gossip_transport_port/set_peers). */
    const char *listen;
    uint32_t timeout_ms;    /* per pull */
    bool random;            /* peer schedule: false = ring, true = random */
    uint64_t seed;          /* of the random schedule */
    const ss__rpc_tls *tls; /* optional, for the pulls (client side); the struct is
                               copied, the file names it points to must outlive the
                               transport */
    /* Serve on a loopback address without SHADOWSYNC_AUTH_TOKEN_FILE:
     * every local user may pull the model (demos, tests). */
    bool insecure_loopback;
} ss__gossip_config;

/* Starts serving. SS_ERR_INVALID_ARGUMENT for a bad list or rank; a
 * non-loopback address without an authorization token
 * (SHADOWSYNC_AUTH_TOKEN_FILE) is refused: the snapshots are the model.
 * why (may be NULL) says what was wrong, as ss__tree_transport_create's. */
ss_status ss__gossip_transport_create(const ss__gossip_config *cfg, ss__transport **out, char *why,
                                      size_t whylen);
/* The port it serves on (0: not a gossip transport). */
int ss__gossip_transport_port(ss__transport *t);
/* Replaces the peer list (same rank) before the first round: for members
 * that learn the others' ports after starting. */
ss_status ss__gossip_transport_set_peers(ss__transport *t, const char *peers);

#endif
