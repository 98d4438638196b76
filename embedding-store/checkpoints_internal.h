/* Where the store's checkpoints go: one directory per checkpoint under the
 * root the server was started with, named by a client (the name rule, so
 * never a path) or by the time, and only the newest `keep` are kept. A
 * client can choose a name, never a place. */
#ifndef SS_EMBEDDING_STORE_CHECKPOINTS_INTERNAL_H
#define SS_EMBEDDING_STORE_CHECKPOINTS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "shadowsync/status.h"

/* root/name into path; name "" becomes "emb-<UTC time>". Refuses a name
 * outside the name rule (SS_ERR_INVALID_ARGUMENT) and one that exists
 * (SS_ERR_EXISTS), saying why. */
ss_status ss__emb_ckpt_path(const char *root, const char *name, char *path, size_t pathlen,
                            char *why, size_t whylen);

/* Removes the oldest checkpoints under root (directories holding a RocksDB
 * CURRENT file; anything else is left alone) until `keep` remain. Returns
 * how many it removed; a failure is logged, not returned (the checkpoint
 * that was just cut stays good). */
size_t ss__emb_ckpt_prune(const char *root, uint32_t keep);

#endif
