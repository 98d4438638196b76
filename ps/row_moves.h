/* Embedding rows moving between PS shards while training runs (a shard
 * map with a "from" line, common/shard_map.h). Every PS of the new map
 * takes the rows it now owns from the shards of the old one:
 *
 * - in the background, a batch at a time (Embedding/Handoff without ids)
 *   until every old shard has none left for it;
 * - on demand, before a Lookup, Push or Elastic reads or updates a row it
 *   does not hold yet (ss__ps_row_moves_ensure): the request waits for
 *   its rows instead of answering an initial row that the old owner
 *   still holds. A row is never served by two shards: the old owner
 *   gives it away only once it serves the new epoch (the call carries it),
 *   and the server's map gate (rpc.h map_gate) lets no call routed by the
 *   old epoch run past that point.
 *
 * A taken row leaves the giver's memory at once and its database once the
 * taker has it durably (the taker's next call says so): nothing
 * acknowledged is lost when either side dies mid-move. Handoff is served
 * only to other PS (the fleet's peer token, --peer-token-file: trainers
 * do not hold it), and a giver forgets rows only once the taker that the
 * map names for that shard, called back by the giver on a channel of its
 * own, says it holds them: a PS that asks for another shard's rows, or a
 * caller that got the token, cannot make rows disappear. One move at a time
 * per PS (a lock); the PS shrunk out of the map (in "from", not in "ps")
 * gives all its rows away and can then be stopped (its
 * shadowsync_emb_resident_rows at 0). */
#ifndef SS_PS_ROW_MOVES_H
#define SS_PS_ROW_MOVES_H

#include "common/metrics.h"
#include "embedding-store/emb_store.h"
#include "ps/map_watch.h"
#include "rpc/rpc.h"

typedef struct ss__ps_row_moves ss__ps_row_moves;

typedef struct ss__ps_row_moves_config {
    ss__emb_store *store;
    ss__ps_map_watch *map;
    const ss__rpc_tls *tls; /* for the calls to other shards (optional) */
    uint32_t batch_rows;    /* rows per background call, 1 .. 65536 */
    uint32_t pause_ms;      /* between background calls (0: none) */
    uint32_t timeout_ms;    /* of a call to another shard */
    const char *peer_auth;  /* "Bearer <peer token>" sent to other shards ("": none) */
    ss__metrics *metrics;
} ss__ps_row_moves_config;

ss_status ss__ps_row_moves_create(const ss__ps_row_moves_config *cfg, ss__ps_row_moves **out,
                                  char *why, size_t whylen);
/* self: this PS's address as the map writes it (--advertise); starts the
 * background mover. Until then requests that may need a moving row are
 * refused (SS_ERR_STATE). */
ss_status ss__ps_row_moves_run(ss__ps_row_moves *mv, const char *self);
void ss__ps_row_moves_destroy(ss__ps_row_moves *mv);

/* Before a request reads or updates rows of table (ctx: the mover): the
 * ids this PS owns under the map whose old owner may still hold them are
 * taken from it first. SS_ERR_IO / SS_ERR_TIMEOUT with why when an old
 * owner cannot give them (the request must fail: answering without them
 * would lose the old owner's row). */
ss_status ss__ps_row_moves_ensure(void *ctx, const char *table, const uint64_t *ids, size_t n,
                                  char *why, size_t whylen);
/* The giving side: Embedding/Handoff's handler (ctx: the mover). */
void ss__ps_row_moves_handoff(void *ctx, const uint8_t *req, size_t len, ss__rpc_reply *reply);

#endif
