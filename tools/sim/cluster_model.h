/* The ShadowSync cluster model of the simulator (shadowsync-sim).
 *
 * N trainers on hosts of k, S PS shards. Each trainer steps on a paced
 * schedule (a step every step_s, a late step made up by the next, as
 * shadowsync-emu-trainer --compute paced), each step costing step_cpu_s
 * of its machine's CPU. Its dense group of D floats is synced:
 *  - background (easgd, ma, bmuf): a shadow loop per trainer (the agent's
 *    shadow thread) starts a round once the trainer ran min_round_gap
 *    steps since the last round ended, as the engine does;
 *  - foreground: the trainer itself runs an S-EASGD round every K steps
 *    and waits for it (its next step's compute starts after the round);
 *  - none.
 * A round sends D/S floats to each shard, cut into chunks of at most
 * chunk_floats, at most `window` of them in flight per shard (one RPC
 * each; the next starts when one ends, as the transport does). Each chunk: client CPU on the
 * trainer's one shadow thread (half before sending, half after the reply), the transfer over the
 * host's and the PS's links (fair-shared, both must carry it), a fixed software cost and the link
 * latency, the PS's CPU (on one of its ps_threads request threads, first come first served), and
 * the same way back. S-MA and S-BMUF rounds also wait at each chunk group for every trainer's
 * snapshot (or the round deadline after the first one), as the PS does.
 *
 * Machines are processor-sharing pools: with shared_cores > 0 every
 * process shares one machine of that many cores (the emulated cluster on
 * one box); else each trainer host has host_cores for its steps and sync
 * work, and each PS ps_cores. Links are pools of one server, the work of
 * a transfer its bytes / link_bytes_per_s.
 *
 * The costs come from measurements (bench/sim-calibrate.sh). */
#ifndef SS_SIM_CLUSTER_MODEL_H
#define SS_SIM_CLUSTER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "shadowsync/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ss__sim_mode {
    SS_SIM_NONE = 0,
    SS_SIM_EASGD,
    SS_SIM_MA,
    SS_SIM_BMUF,
    SS_SIM_FOREGROUND, /* S-EASGD every sync_every steps, the trainer waits */
} ss__sim_mode;

typedef struct ss__sim_costs {
    double step_cpu_s;             /* CPU of one trainer step */
    double client_cpu_s_per_float; /* agent (or trainer) CPU per float of a round */
    double ps_cpu_s_per_float;     /* PS CPU per float of a round, per member */
    double rpc_fixed_s;            /* software latency of one RPC */
} ss__sim_costs;

typedef struct ss__sim_config {
    uint32_t trainers, per_host, ps;
    double dense_floats;
    double step_s;
    uint32_t batch;
    ss__sim_mode mode;
    uint32_t sync_every;    /* foreground: K */
    uint32_t min_round_gap; /* background: steps before a trainer's next round */
    double ma_deadline_s;   /* MA/BMUF: a round closes this long after its first snapshot */
    ss__sim_costs costs;
    double link_bytes_per_s;    /* every link, each direction */
    double ps_link_bytes_per_s; /* the PS hosts' links (0: link_bytes_per_s) */
    double wire_ratio;          /* bytes on the wire / float32's (compressed sync; 1) */
    double latency_s;           /* one way */
    double shared_cores;        /* > 0: one machine for everything */
    double host_cores, ps_cores;
    uint32_t ps_threads;   /* a PS's request threads (shadowsync-ps --threads) */
    double chunk_floats;   /* the transport's chunk: one RPC (and one PS group) each */
    uint32_t window;       /* chunk RPCs in flight per shard (0: all at once) */
    uint32_t round_window; /* MA/BMUF rounds: at least this many (SS_GRPC_ROUND_WINDOW) */
    double start_spread_s; /* trainers start spread over this long */
    double seconds;        /* simulated training time */
} ss__sim_config;

typedef struct ss__sim_result {
    double examples_per_s; /* all trainers */
    double efficiency;     /* examples_per_s / (N x batch / step_s) */
    /* Sync gap in steps, as bench/emu-cluster.sh reports it: the median
     * over trainers of their median, the largest p99 and max. */
    double gap_p50, gap_p99, gap_max;
    double rounds;        /* completed rounds, all trainers */
    double round_s_mean;  /* mean round time */
    double ps_cpu_util;   /* busiest PS: its cores' busy fraction */
    double ps_link_util;  /* busiest PS link direction */
    double host_cpu_util; /* busiest trainer host (the machine with shared_cores) */
    uint64_t events;
} ss__sim_result;

/* Defaults: 1 trainer, 8 per host, 1 PS, 1M floats, a 10 ms step, batch
 * 1024, S-EASGD, K = 10, min_round_gap 4, MA deadline 1 s, 10 Gbit/s
 * links, 50 us, per-host machines of 16 cores and PS of 16 with 2 request
 * threads (shadowsync-ps's default), chunks of 256k floats, trainers
 * starting spread over 100 ms, 10 s, and
 * the costs measured on the emulated cluster (bench/sim-calibrate.sh). */
void ss__sim_config_init(ss__sim_config *cfg);

/* Runs one simulation. SS_ERR_INVALID_ARGUMENT with why naming the
 * setting, or SS_ERR_NO_MEMORY. */
ss_status ss__sim_cluster(const ss__sim_config *cfg, ss__sim_result *out, char *why, size_t whylen);

/* "none", "easgd", "ma", "bmuf", "fg" -> mode; -1 if unknown. */
int ss__sim_mode_parse(const char *s);

#ifdef __cplusplus
}
#endif

#endif
