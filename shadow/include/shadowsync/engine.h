/* The sync engine: a pool of shadow threads that keeps running rounds over
 * many parameter groups while trainer workers write the replicas.
 *
 * One engine belongs to one trainer. Each group binds a replica to a name
 * and an algorithm; a round snapshots the replica, asks the transport for
 * the others' state and applies the resulting delta to the live replica.
 * The same round function runs in the background (ss_engine_start) or in
 * the foreground (ss_engine_run_round, for the FR-X baselines). */
#ifndef SHADOWSYNC_ENGINE_H
#define SHADOWSYNC_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shadowsync/algorithms.h"
#include "shadowsync/metrics.h"
#include "shadowsync/replica.h"
#include "shadowsync/status.h"
#include "shadowsync/transport.h"

typedef struct ss_engine ss_engine;
typedef struct ss_engine_group ss_engine_group;

typedef struct ss_engine_config {
    ss_transport *transport; /* required; not owned */
    ss_metrics *metrics;     /* optional; not owned (NULL: a private registry) */
    const char *trainer;     /* label value for metrics, e.g. "t0" */
    uint32_t threads;        /* shadow threads, >= 1 */
    /* Pause between two rounds of one thread (0 = back to back). Lets a
     * deployment trade sync gap for CPU and network. */
    uint64_t round_interval_us;
    /* A background round of a group starts only once its replica has run
     * this many iterations since the last completed round: syncing a
     * replica that has not changed costs the workers cache traffic and
     * buys nothing. 0 = rounds back to back. Foreground rounds ignore it. */
    uint64_t min_round_gap;
    /* A group with nothing to sync for this long sends a heartbeat, so the
     * server does not expire it. 0 = never. */
    uint32_t heartbeat_interval_ms;
} ss_engine_config;

typedef struct ss_sync_params {
    ss_algo algo;
    float alpha;         /* S-EASGD elastic rate, (0, 1] */
    ss_bmuf_params bmuf; /* S-BMUF only */
} ss_sync_params;

typedef struct ss_group_stats {
    uint64_t rounds;        /* completed rounds */
    uint64_t failed_rounds; /* abandoned whole (transport error) */
    uint64_t rejoins;       /* joined again after the other side forgot us */
    double gap_mean;        /* trainer iterations between completed rounds */
    uint64_t gap_p50, gap_p99, gap_max;
    double divergence;      /* |s - c| / |c| at the last completed round */
    uint64_t last_round_ns; /* duration of the last completed round */
    uint64_t last_done_ns;  /* ss_now_ns() when it completed (0: none yet) */
} ss_group_stats;

ss_status ss_engine_create(const ss_engine_config *cfg, ss_engine **out);
/* Stops the engine if running, leaves every group, frees everything. */
void ss_engine_destroy(ss_engine *e);

/* Joins the transport for `name`. The replica is not owned. Groups can be
 * added while the engine runs. */
ss_status ss_engine_add_group(ss_engine *e, const char *name, ss_replica *replica,
                              const ss_sync_params *params, ss_engine_group **out);

/* Starts the shadow threads (background mode). */
ss_status ss_engine_start(ss_engine *e);
/* Waits until no round is in flight, then holds the threads. */
ss_status ss_engine_pause(ss_engine *e);
ss_status ss_engine_resume(ss_engine *e);
/* Rounds in flight complete; threads exit and are joined. Idempotent. */
ss_status ss_engine_stop(ss_engine *e);

/* Runs one round of a group in the calling thread (foreground mode, or a
 * final round at shutdown). Blocks while another thread runs this group. */
ss_status ss_engine_run_round(ss_engine *e, ss_engine_group *g);

/* After ss_engine_stop: runs rounds of every group in the calling thread,
 * at least `rounds` each and for at least min_ms, so that replicas that
 * no longer move converge on the consensus. Gives up after 3 failed
 * passes in a row (a PS that is away that long will not be back in
 * time). Returns the last pass's first error (SS_ERR_TIMEOUT counts as
 * done: a round closed without everyone). */
ss_status ss_engine_final_rounds(ss_engine *e, uint32_t rounds, uint32_t min_ms);

ss_status ss_engine_group_stats(ss_engine_group *g, ss_group_stats *out);
const char *ss_engine_group_name(const ss_engine_group *g);
/* Rounds completed by the engine over all groups. */
uint64_t ss_engine_rounds(const ss_engine *e);

#endif
