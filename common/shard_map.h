/* The shard map: which parameter servers a fleet has, with an epoch that
 * grows each time the list changes. One small text file every daemon and
 * trainer reads (SHADOWSYNC_SHARD_MAP / --shard-map), e.g.
 *
 *     # the fleet, epoch 3
 *     epoch 3
 *     ps ps-0.ps:7070,ps-1.ps:7070,ps-2.ps:7070
 *
 * Every call a trainer routes by the map carries its epoch; a PS serving
 * another epoch refuses it, saying so (rpc/rpc.h), so a stale router is
 * told to reload and never served rows or centres routed by an old list.
 *
 * A map that changes the list while training runs says what it was:
 *
 *     epoch 4
 *     ps ps-0.ps:7070,ps-1.ps:7070,ps-2.ps:7070
 *     from ps-0.ps:7070,ps-1.ps:7070
 *
 * and the PS fleet moves the embedding rows whose shard changed from the
 * "from" shards to their new owners while serving (ps/row_moves.h). */
#ifndef SS_COMMON_SHARD_MAP_H
#define SS_COMMON_SHARD_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shadowsync/status.h"

#define SS_SHARD_MAP_PS_MAX 4096 /* bytes of the ps list */
/* A map's epoch: 1 .. 2^53 (shown exactly as a Prometheus value and in
 * JSON); one change moves it up by at most 2^32 (ss__shard_map_newer), so
 * that a forged or mistyped epoch near the top cannot make every later
 * map look older. */
#define SS_SHARD_MAP_EPOCH_MAX  ((uint64_t)1 << 53)
#define SS_SHARD_MAP_EPOCH_JUMP ((uint64_t)1 << 32)

typedef struct ss__shard_map {
    uint64_t epoch; /* >= 1 */
    char ps[SS_SHARD_MAP_PS_MAX];
    char from[SS_SHARD_MAP_PS_MAX]; /* the list before this epoch; "" = none */
} ss__shard_map;

/* Reads path (checked as ss__operator_file_open says: SS_ERR_PERMISSION
 * when another user could have written it): "epoch N" (1 .. 2^53) and
 * "ps host:port,..." (each address
 * as every flag takes one), once each, in any order, and optionally
 * "from host:port,..." once; blank lines and "#" comments skipped. SS_ERR_NOT_FOUND / SS_ERR_IO /
 * SS_ERR_INVALID_ARGUMENT with why naming the file, the line and what is wrong. */
ss_status ss__shard_map_read(const char *path, ss__shard_map *out, char *why, size_t whylen);
/* The same from text (a NUL-terminated map), name for the messages. */
ss_status ss__shard_map_parse(const char *text, const char *name, ss__shard_map *out, char *why,
                              size_t whylen);

/* An epoch as calls carry it (rpc/rpc.h SS_RPC_EPOCH_KEY): len decimal
 * digits, >= 1, within 64 bits. false for anything else. */
bool ss__shard_map_epoch_parse(const char *text, size_t len, uint64_t *epoch);

/* Whether a map of epoch follows the one served: newer, by at most
 * SS_SHARD_MAP_EPOCH_JUMP (serving 0, none yet: any epoch). */
bool ss__shard_map_newer(uint64_t serving, uint64_t epoch);

/* The addresses of a comma-separated list, at most max: each a pointer
 * into buf (a copy of list, bufsize bytes). Returns how many. */
size_t ss__shard_map_split(const char *list, char *buf, size_t bufsize, const char **out,
                           size_t max);
/* The place of address in list, or -1. */
int ss__shard_map_index(const char *list, const char *address);

#endif
