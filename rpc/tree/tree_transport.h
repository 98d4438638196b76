/* Topology-adaptive aggregation: an ss__transport whose S-MA rounds are
 * summed up a forest of trees between the members, no PS on the path.
 *
 * Each group is cut into partitions (one per member by default); partition
 * p has its own tree (shadow/forest.h), packed over the links of a
 * topology file so that no link is over-used, each rooted at a different
 * member. In a round every member sends each partition's subtree sum to
 * its parent as soon as its children's have arrived; the root divides by
 * the count and the mean goes back down the same edges. Partitions move
 * independently, so a slow tree does not hold up the others' pipelines.
 * Everything is pushed (rpc/tree/tree_sync.proto) and a receiver only
 * buffers, so no server thread ever waits.
 *
 * A round needs every member, like the PS's S-MA rounds: one that is down
 * fails the round at its deadline (timeout_ms) for everyone, and training
 * goes on. Round numbers advance only on success, so the members retry
 * the same round; a member that restarts (or gave up on a round the
 * others finished) joins the others' round from the first push it
 * refuses. S-MA and S-BMUF: each partition's root keeps that partition's
 * block state and sends b down instead of the mean (a partition whose root
 * moves starts its block again). No S-EASGD: no member holds a central
 * variable. */
#ifndef SS_RPC_TREE_TRANSPORT_H
#define SS_RPC_TREE_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "rpc/rpc.h"

/* A member's membership version rises by one per event (a leave, a
 * finding that it is unreachable, a return), so a version more than this
 * past the one known is forged (or from a very different history) and is
 * refused: versions can never be pushed near their limit (2^62, so that
 * version << 1 | gone fits 64 bits) and wrap. */
#define SS_TREE_MAX_VERSION_STEP 1024u
#include "shadow/forest.h"
#include "shadow/transport.h"

typedef struct ss__tree_config {
    const char *peers;      /* "host:port,..." every member, the same order everywhere */
    uint32_t rank;          /* this member: peers[rank] */
    const char *listen;     /* default peers[rank]; "127.0.0.1:0" picks a port (tests);
                               "-": serve nothing (a fuzzer calls the handler itself) */
    const char *topology;   /* file for ss__topology_load; NULL or "": every link alike */
    uint32_t parts;         /* partitions per group; 0: one per member */
    uint32_t timeout_ms;    /* a round's deadline */
    const ss__rpc_tls *tls; /* optional, client side; the file names must outlive it */
    /* Serve on a loopback address without SHADOWSYNC_AUTH_TOKEN_FILE:
     * every local user may push (demos, tests). */
    bool insecure_loopback;
} ss__tree_config;

/* Starts serving. why: which setting is wrong (the topology file's line).
 * Without SHADOWSYNC_AUTH_TOKEN_FILE it is refused (SS_ERR_PERMISSION:
 * the pushes carry the model) unless it listens on loopback and
 * cfg->insecure_loopback says so. */
ss_status ss__tree_transport_create(const ss__tree_config *cfg, ss__transport **out, char *why,
                                    size_t whylen);
int ss__tree_transport_port(ss__transport *t);
/* Replaces the member list (same rank, same count) before the first join:
 * for members that learn the others' ports after starting. */
ss_status ss__tree_transport_set_peers(ss__transport *t, const char *peers);
/* Serves one request as the member's gRPC server would, for the fuzz
 * target: `method` 0 is TreeSync.Push, 1 Leave, 2 Probe. */
void ss__tree_transport_serve(ss__transport *t, int method, const uint8_t *req, size_t len,
                              ss__rpc_reply *reply);
/* The forest of a joined group (NULL: none): read-only, for tools and
 * tests; valid until the group is left. */
const ss__forest *ss__tree_transport_forest(ss__transport *t, const char *group);

/* ---- for tests: a member's state, read and set under its lock ---- */
/* 1 when this member counts member m gone from group, 0 when not, -1 when
 * it has no such group. */
int ss__tree_transport_counts_gone(ss__transport *t, const char *group, uint32_t m);
/* Probes member m as a round that ran out of time would. */
ss_status ss__tree_transport_probe(ss__transport *t, const char *group, uint32_t m,
                                   uint32_t timeout_ms);
/* Buffers `round` by hand, as if the means of its first parts_in
 * partitions (of mean, all n floats) had come down, each of count
 * members; the rest of the round is empty. */
ss_status ss__tree_transport_buffer_means(ss__transport *t, const char *group, uint64_t round,
                                          const float *mean, uint32_t parts_in, uint32_t count);
/* What is buffered for `round`: false when it is not. *means_in: the
 * partitions whose mean is in; *fewest: the fewest members a mean counts
 * (0 when one is missing); *sum_from: whether member `from` sent a sum of
 * any partition. */
bool ss__tree_transport_buffered(ss__transport *t, const char *group, uint64_t round, uint32_t from,
                                 uint32_t *means_in, uint32_t *fewest, bool *sum_from);

#endif
