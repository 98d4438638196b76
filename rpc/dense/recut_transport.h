/* A DenseSync client that follows a shard map file (common/shard_map.h):
 * an ss__transport over the gRPC transport of the map's PS list, cut
 * again when the map changes, while the engine above it goes on.
 *
 * When a call fails and the map file holds a newer epoch (the PS serve it
 * and refuse calls routed by the old one), the transport re-cuts: for each
 * joined group it reads the centre through the old cut (S-EASGD groups),
 * leaves the old cut's chunks (both without an epoch, which a PS of any
 * epoch serves), joins the new cut's chunks as a re-cut (the PS retires
 * old chunks that overlap and have no member left; every join of this
 * transport is one, so a trainer started after the fleet changed finds
 * its way too) and, for an S-EASGD group, sends the old centre as an
 * exchange with alpha 1, so every chunk's centre is where the old cut's
 * was. MA/BMUF rounds form again on the new cut (a new chunk's BMUF block
 * state starts at its first round; a chunk whose range did not change
 * keeps its state on its PS, which is stale when the chunk sat unused
 * through an earlier cut: 1 -> 2 -> 1 PS).
 * Then the call is made again on the new cut. A group the new cut cannot
 * join yet (another member still in an overlapping old chunk) is joined at
 * its next call; until then its calls fail with SS_ERR_STATE.
 *
 * The engine's member ids stay the same across cuts. */
#ifndef SS_RPC_RECUT_TRANSPORT_H
#define SS_RPC_RECUT_TRANSPORT_H

#include "rpc/dense/grpc_transport.h"

/* map_path: the shard map file; its ps list and epoch replace
 * cfg->targets and cfg->epoch (cfg's other fields serve every cut).
 * SS_ERR_INVALID_ARGUMENT / SS_ERR_NOT_FOUND / SS_ERR_IO: the map cannot
 * be read now. */
ss_status ss__recut_transport_create(const char *map_path, const ss__grpc_transport_config *cfg,
                                     ss__transport **out, char *why, size_t whylen);

/* The epoch t serves now and how often it re-cut (0 when t is not one). */
uint64_t ss__recut_transport_epoch(ss__transport *t);
uint64_t ss__recut_transport_recuts(ss__transport *t);

#endif
