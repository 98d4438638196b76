/* A PS's shard map (--shard-map FILE, common/shard_map.h): read at start,
 * read again every 200 ms; its epoch only grows (a file with an older one
 * is logged and ignored). The gRPC server refuses calls routed by another
 * epoch (ss__rpc_server_config.map_epoch). */
#ifndef SS_PS_MAP_WATCH_H
#define SS_PS_MAP_WATCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/metrics.h"
#include "common/shard_map.h"

typedef struct ss__ps_map_watch ss__ps_map_watch;

/* SS_ERR_NOT_FOUND / SS_ERR_INVALID_ARGUMENT / SS_ERR_IO with why (the
 * file, the line) when the map cannot be read at start. */
ss_status ss__ps_map_watch_start(const char *path, ss__metrics *metrics, ss__ps_map_watch **out,
                                 char *why, size_t whylen);
/* The epoch served now (for the server; lives as long as w). */
const _Atomic uint64_t *ss__ps_map_watch_epoch(const ss__ps_map_watch *w);
/* The server's map_gate (ss__rpc_server_config): the epoch and the map
 * change under it. */
pthread_rwlock_t *ss__ps_map_watch_gate(ss__ps_map_watch *w);
/* fn(arg) runs on the watch's thread right after each change of the
 * epoch served (NULL: nothing). */
void ss__ps_map_watch_on_change(ss__ps_map_watch *w, void (*fn)(void *arg), void *arg);
/* The map served now. */
void ss__ps_map_watch_get(ss__ps_map_watch *w, ss__shard_map *out);
void ss__ps_map_watch_stop(ss__ps_map_watch *w);

#endif
