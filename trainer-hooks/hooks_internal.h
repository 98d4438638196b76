/* What tables.c (embedding tables) needs of hooks.c (trainers); hooks.c
 * needs nothing of tables.c: a trainer keeps a record per attached object
 * (how to finish it, how to destroy it) and knows no more of it. Not
 * exported (the version script keeps only the public names). */
#ifndef SS_HOOKS_INTERNAL_H
#define SS_HOOKS_INTERNAL_H

#include "common/metrics.h"
#include "rpc/rpc.h"
#include "shadowsync/shadowsync.h"

typedef struct ss__hooks_endpoint {
    const char *ps; /* NULL when the trainer has none */
    ss__rpc_tls tls;
    uint32_t timeout_ms;
    uint64_t epoch;        /* of the shard map ps came from; 0: none */
    const char *shard_map; /* its path; NULL: none */
    bool bulk;             /* the trainer's bulk setting: rows on the PS's bulk streams too */
} ss__hooks_endpoint;

void ss__hooks_endpoint_of(ss_trainer *t, ss__hooks_endpoint *out);

/* Something the trainer owns from now on: ss_trainer_finish() calls
 * finish(obj) (before the dense final rounds), ss_trainer_close() calls
 * destroy(obj). */
typedef struct ss__hooks_attachment {
    void *obj;
    ss_status (*finish)(void *obj);
    void (*destroy)(void *obj);
    /* Optional: brings obj's series in the trainer's registry up to date
     * (before every render of its metrics). */
    void (*export_metrics)(void *obj, ss__metrics *reg, const char *trainer);
} ss__hooks_attachment;

ss_status ss__hooks_attach(ss_trainer *t, const ss__hooks_attachment *a);

/* The one object a trainer's tables share (tables.c: the row-sync thread
 * of every cached table): made by make() on the first call (NULL: no
 * memory), destroyed by destroy(obj) when the trainer is freed, after
 * every attachment. */
void *ss__hooks_shared(ss_trainer *t, void *(*make)(void), void (*destroy)(void *obj));

#endif
