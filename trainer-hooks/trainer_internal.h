/* The trainer and its dense groups as hooks.c and trainer_metrics.c
 * (its metrics and HTTP endpoint) both see them. Private to
 * trainer-hooks/. */
#ifndef SS_TRAINER_INTERNAL_H
#define SS_TRAINER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/metrics.h"
#include "rpc/agent/agent_client.h"
#include "rpc/agent/agent_wire.h"
#include "shadow/engine.h"
#include "shadow/replica.h"
#include "shadowsync/shadowsync.h"
#include "trainer-hooks/hooks_internal.h"

#define MAX_GROUPS   256
#define MAX_ATTACHED 64

struct ss_dense {
    ss_trainer *trainer;
    char *name;
    ss__replica *replica;
    ss__engine_group *group; /* NULL in mode NONE, agent mode and after finish */
    ss__shm_group shm;       /* agent mode: the memory the agent maps too */
    ss_dense_stats final;    /* stats frozen by finish */
    /* The PS's central model as the final rounds left it, read by finish
     * before it leaves the PS (NULL: none read; central_final_st why). */
    float *central_final;
    ss_status central_final_st;
    char central_final_why[256];
};

struct ss_trainer {
    ss_trainer_config cfg;
    char *ps, *name, *tls_ca, *tls_cert, *tls_key, *agent; /* owned copies of cfg's strings */
    uint64_t epoch;                 /* of the shard map ps came from (shard_map); 0: none */
    char *shard_map;                /* its path (tables route by it again when it moves) */
    ss__agent_client *agent_client; /* agent mode until finish */
    ss__sync_params params;
    ss__transport *transport;
    bool to_ps; /* transport is the PS shards' (not peers') */
    ss__engine *engine;
    pthread_mutex_t lock; /* guards groups / ngroups */
    ss_dense *groups[MAX_GROUPS];
    _Atomic size_t ngroups;
    ss__hooks_attachment attached[MAX_ATTACHED]; /* under lock: embedding tables */
    size_t nattached;
    void *shared; /* under lock: what the tables share (ss__hooks_shared) */
    void (*shared_destroy)(void *obj);
    bool attached_finished;
    _Atomic uint64_t steps;
    ss__metrics *metrics;         /* the engine's series, the tables', the steps */
    ss__counter *steps_metric;    /* mirrors steps at each render */
    pthread_mutex_t render_lock;  /* one refresh + render at a time */
    struct ss__http_server *http; /* cfg.http_listen: /metrics, /status, /healthz; NULL: none */
    uint64_t start_ns;
};

/* trainer_metrics.c: the trainer's registry (its steps series), its
 * render (the tables' series brought up to date first), and its HTTP
 * endpoint when cfg.http_listen is set (started last by open, stopped first by
 * close). */
ss_status ss__trainer_metrics_create(ss_trainer *t, char *why, size_t whylen);
ss_status ss__trainer_http_start(ss_trainer *t, char *why, size_t whylen);
void ss__trainer_http_stop(ss_trainer *t);

#endif
