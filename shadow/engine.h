/* The sync engine: a pool of shadow threads that keeps running rounds over
 * many parameter groups while trainer workers write the replicas.
 *
 * One engine belongs to one trainer. Each group binds a replica to a name
 * and an algorithm; a round snapshots the replica, asks the transport for
 * the others' state and applies the resulting delta to the live replica.
 * The same round function runs in the background (ss__engine_start) or in
 * the foreground (ss__engine_run_round, for the FR-X baselines). */
#ifndef SHADOWSYNC_ENGINE_H
#define SHADOWSYNC_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/metrics.h"
#include "shadow/algorithms.h"
#include "shadow/replica.h"
#include "shadow/transport.h"
#include "shadowsync/status.h"

typedef struct ss__engine ss__engine;
typedef struct ss__engine_group ss__engine_group;

typedef struct ss__engine_config {
    ss__transport *transport; /* required; not owned */
    ss__metrics *metrics;     /* optional; not owned (NULL: a private registry) */
    const char *trainer;      /* label value for metrics, e.g. "t0" */
    uint32_t threads;         /* shadow threads, >= 1 */
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
    /* The engine's series (label trainer) leave the shared registry with
     * it (the last engine of that trainer name): for the agent, whose
     * trainers come and go. */
    bool drop_metrics_at_destroy;
} ss__engine_config;

typedef struct ss__sync_params {
    ss__algo algo;
    float alpha;          /* S-EASGD elastic rate, (0, 1] */
    ss__bmuf_params bmuf; /* S-BMUF only */
    /* The member's own key at the other side (0: none), the same at each
     * of its joins: an agent's trainer through a restarted agent replaces
     * its dead self there (ss__transport_ops.join). */
    uint64_t member_key;
} ss__sync_params;

/* The one check of a group's sync parameters, for every mode (in-process,
 * agent, foreground): a known algorithm; S-EASGD alpha in (0, 1]; S-BMUF
 * eta in [0, 1) and zeta in (0, 1 / (1 - eta)]. SS_ERR_INVALID_ARGUMENT says which
 * in why. */
ss_status ss__sync_params_check(const ss__sync_params *p, char *why, size_t whylen);

typedef struct ss__group_stats {
    uint64_t rounds;        /* completed rounds */
    uint64_t failed_rounds; /* abandoned whole (transport error) */
    uint64_t rejoins;       /* joined again after the other side forgot us */
    double gap_mean;        /* trainer iterations between completed rounds */
    uint64_t gap_p50, gap_p99, gap_max;
    double divergence;      /* |s - c| / |c| at the last completed round */
    uint64_t last_round_ns; /* duration of the last completed round */
    uint64_t last_done_ns;  /* ss__now_ns() when it completed (0: none yet) */
} ss__group_stats;

ss_status ss__engine_create(const ss__engine_config *cfg, ss__engine **out, char *why,
                            size_t whylen);
/* Stops the engine if running, leaves every group, frees everything. */
void ss__engine_destroy(ss__engine *e);

/* Joins the transport for `name`. The replica is not owned. Groups can be
 * added while the engine runs. */
ss_status ss__engine_add_group(ss__engine *e, const char *name, ss__replica *replica,
                               const ss__sync_params *params, ss__engine_group **out);

/* Starts the shadow threads (background mode). */
ss_status ss__engine_start(ss__engine *e, char *why, size_t whylen);
/* Waits until no round is in flight, then holds the threads. */
ss_status ss__engine_pause(ss__engine *e);
ss_status ss__engine_resume(ss__engine *e);
/* Rounds in flight complete; threads exit and are joined. Idempotent. */
ss_status ss__engine_stop(ss__engine *e);

/* Runs one round of a group in the calling thread (foreground mode, or a
 * final round at shutdown). Blocks while another thread runs this group. */
ss_status ss__engine_run_round(ss__engine *e, ss__engine_group *g);

/* After ss__engine_stop: runs rounds of every group in the calling thread,
 * at least `rounds` each and for at least min_ms, so that replicas that
 * no longer move converge on the consensus. Gives up after 3 failed
 * passes in a row (a PS that is away that long will not be back in
 * time). Returns the last pass's first error: SS_OK only when the last
 * pass synced every group (a round that closed on its deadline without
 * every member is SS_OK; a PS that does not answer is SS_ERR_TIMEOUT). */
ss_status ss__engine_final_rounds(ss__engine *e, uint32_t rounds, uint32_t min_ms);

ss_status ss__engine_group_stats(ss__engine_group *g, ss__group_stats *out);
const char *ss__engine_group_name(const ss__engine_group *g);
/* Rounds completed by the engine over all groups. */
uint64_t ss__engine_rounds(const ss__engine *e);

#endif
