/* shadowsync-sim: projects a ShadowSync cluster's throughput, sync gap and
 * PS load with a discrete-event simulation (tools/sim/cluster_model.h), calibrated
 * from measured costs (bench/sim-calibrate.sh writes the file that
 * --calibration reads). One line per (trainers, mode):
 *   sim: ps=S n=N mode=M examples/s=.. efficiency=.. gap_p50=.. gap_p99=..
 *     gap_max=.. rounds=.. round_ms=.. ps_cpu=.. ps_link=.. host_cpu=..
 * and with --tsv FILE the rows of bench/scaling.sh's TSV, so that
 * bench/sim-validate.sh can set them beside the emulated cluster's. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/flags.h"
#include "tools/sim/cluster_model.h"

static const ss__program program = {
    "shadowsync-sim",
    "Discrete-event simulation of a ShadowSync cluster: N trainers (paced steps, a dense group "
    "of D floats) syncing through S PS shards in the background (easgd, ma, bmuf), in the "
    "foreground every K steps (fg) or not at all (none). Machines are processor-sharing pools "
    "(--shared-cores: every process on one machine, as the emulated cluster; else cores per "
    "host and per PS), links fair-shared at --link-gbit. Costs come from --calibration (written "
    "by bench/sim-calibrate.sh) or the cost flags. Prints examples/s, scaling efficiency, the "
    "sync gap and PS load for every --trainers x --modes."};

/* A calibration file: "key value" lines, '#' comments. Keys: step_cpu_us,
 * client_ns_per_float, ps_ns_per_float, rpc_fixed_us, each optionally
 * prefixed by a mode ("ma.ps_ns_per_float") to apply to that mode only. */
static int load_costs(const char *path, const char *mode, ss__sim_costs *c, char *err,
                      size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "--calibration %s: %s", path, strerror(errno));
        return -1;
    }
    char line[256];
    int lineno = 0;
    /* Two passes: generic keys, then this mode's, so the mode's win. */
    for (int pass = 0; pass < 2; pass++) {
        rewind(f);
        lineno = 0;
        while (fgets(line, sizeof line, f)) {
            lineno++;
            char key[64];
            double v;
            if (line[0] == '#' || line[strspn(line, " \t\r\n")] == '\0')
                continue;
            if (sscanf(line, "%63s %lf", key, &v) != 2 || !(v >= 0)) {
                snprintf(err, errlen, "--calibration %s:%d: want \"key value\" (value >= 0)", path,
                         lineno);
                fclose(f);
                return -1;
            }
            const char *dot = strchr(key, '.'), *name = dot ? dot + 1 : key;
            if ((pass == 0) != (dot == NULL))
                continue;
            if (dot && (strncmp(key, mode, (size_t)(dot - key)) || mode[dot - key]))
                continue;
            if (!strcmp(name, "step_cpu_us"))
                c->step_cpu_s = v * 1e-6;
            else if (!strcmp(name, "client_ns_per_float"))
                c->client_cpu_s_per_float = v * 1e-9;
            else if (!strcmp(name, "ps_ns_per_float"))
                c->ps_cpu_s_per_float = v * 1e-9;
            else if (!strcmp(name, "rpc_fixed_us"))
                c->rpc_fixed_s = v * 1e-6;
            else {
                snprintf(err, errlen, "--calibration %s:%d: unknown key %s", path, lineno, key);
                fclose(f);
                return -1;
            }
        }
    }
    fclose(f);
    return 0;
}

/* The command line: what to simulate and the costs to charge. */
typedef struct sim_flags {
    const char *trainers, *modes, *calibration, *tsv;
    int64_t per_host, ps, batch, sync_every, min_gap, ps_threads, window, round_window;
    double dense, step_us, link_gbit, latency_us, ps_link_gbit, wire_ratio, shared_cores,
        host_cores, ps_cores, seconds, step_cpu_us, client_ns, ps_ns, fixed_us, deadline_ms, chunk,
        spread_ms;
} sim_flags;

static void sim_flags_init(sim_flags *f, const ss__sim_config *base) {
    *f = (sim_flags){.trainers = "1",
                     .modes = "easgd",
                     .calibration = "",
                     .tsv = "",
                     .per_host = base->per_host,
                     .ps = base->ps,
                     .batch = base->batch,
                     .sync_every = 10,
                     .min_gap = base->min_round_gap,
                     .ps_threads = base->ps_threads,
                     .window = base->window,
                     .round_window = base->round_window,
                     .dense = base->dense_floats,
                     .step_us = 1e4,
                     .link_gbit = 10,
                     .latency_us = 50,
                     .wire_ratio = 1,
                     .host_cores = base->host_cores,
                     .ps_cores = base->ps_cores,
                     .seconds = base->seconds,
                     .step_cpu_us = -1,
                     .client_ns = -1,
                     .ps_ns = -1,
                     .fixed_us = -1,
                     .deadline_ms = 1000,
                     .chunk = base->chunk_floats,
                     .spread_ms = base->start_spread_s * 1e3};
}

/* The flags into out; returns how many. */
static size_t sim_flag_table(sim_flags *f, ss__flag *out) {
    const ss__flag flags[] = {
        {"trainers", SS_FLAG_STRING, &f->trainers, "trainers N, or a list: 1,2,4,64", NULL, 0, 0},
        {"modes", SS_FLAG_STRING, &f->modes, "a list of none, easgd, ma, bmuf, fg", NULL, 0, 0},
        {"per-host", SS_FLAG_INT, &f->per_host, "trainers per host (one agent each)", NULL, 1, 1e6},
        {"ps", SS_FLAG_INT, &f->ps, "PS shards", NULL, 1, 100000},
        {"dense-floats", SS_FLAG_DOUBLE, &f->dense, "floats in each trainer's dense group", NULL, 1,
         1e11},
        {"step-us", SS_FLAG_DOUBLE, &f->step_us, "compute per step (paced)", NULL, 1, 1e8},
        {"batch", SS_FLAG_INT, &f->batch, "examples per step", NULL, 1, 1e9},
        {"sync-every", SS_FLAG_INT, &f->sync_every, "fg: a round every K steps", NULL, 1, 1e9},
        {"min-round-gap", SS_FLAG_INT, &f->min_gap, "background: steps before the next round", NULL,
         0, 1e9},
        {"round-deadline-ms", SS_FLAG_DOUBLE, &f->deadline_ms,
         "ma/bmuf: a round closes this long after its first snapshot", NULL, 0.001, 1e7},
        {"link-gbit", SS_FLAG_DOUBLE, &f->link_gbit, "every link, each direction", NULL, 1e-6, 1e6},
        {"ps-link-gbit", SS_FLAG_DOUBLE, &f->ps_link_gbit,
         "the PS hosts' links instead (0: --link-gbit)", NULL, 0, 1e6},
        {"wire-ratio", SS_FLAG_DOUBLE, &f->wire_ratio,
         "bytes on the wire per round / float32's (compressed sync: int8 0.26, fp16 0.5)", NULL,
         1e-3, 1},
        {"latency-us", SS_FLAG_DOUBLE, &f->latency_us, "one-way link latency", NULL, 0, 1e7},
        {"shared-cores", SS_FLAG_DOUBLE, &f->shared_cores,
         "every process on one machine of this many cores (the emulated cluster); 0 = a machine "
         "per host and per PS",
         NULL, 0, 1e6},
        {"host-cores", SS_FLAG_DOUBLE, &f->host_cores, "cores of a trainer host for sync work",
         NULL, 0.001, 1e6},
        {"ps-cores", SS_FLAG_DOUBLE, &f->ps_cores, "cores of a PS", NULL, 0.001, 1e6},
        {"start-spread-ms", SS_FLAG_DOUBLE, &f->spread_ms,
         "trainers start spread over this long (evenly), not in one instant", NULL, 0, 1e7},
        {"chunk-floats", SS_FLAG_DOUBLE, &f->chunk, "floats per chunk (one RPC each)", NULL, 1,
         1e10},
        {"window", SS_FLAG_INT, &f->window, "chunk RPCs in flight per shard (0: all at once)", NULL,
         0, 1e9},
        {"round-window", SS_FLAG_INT, &f->round_window,
         "MA/BMUF rounds: at least this many chunk RPCs in flight per shard", NULL, 0, 1e9},
        {"ps-threads", SS_FLAG_INT, &f->ps_threads, "request threads of a PS (its --threads)", NULL,
         1, 1024},
        {"seconds", SS_FLAG_DOUBLE, &f->seconds, "simulated training time", NULL, 0.001, 1e6},
        {"calibration", SS_FLAG_STRING, &f->calibration,
         "measured costs (bench/sim-calibrate.sh); the cost flags override it", NULL, 0, 0},
        {"step-cpu-us", SS_FLAG_DOUBLE, &f->step_cpu_us, "CPU of one step (-1: calibration)", NULL,
         -1, 1e8},
        {"client-ns-per-float", SS_FLAG_DOUBLE, &f->client_ns,
         "agent CPU per float of a round (-1: calibration)", NULL, -1, 1e6},
        {"ps-ns-per-float", SS_FLAG_DOUBLE, &f->ps_ns,
         "PS CPU per float of a round, per member (-1: calibration)", NULL, -1, 1e6},
        {"rpc-fixed-us", SS_FLAG_DOUBLE, &f->fixed_us,
         "software latency of one RPC (-1: calibration)", NULL, -1, 1e8},
        {"tsv", SS_FLAG_STRING, &f->tsv, "also write the rows here (bench/scaling.sh's columns)",
         NULL, 0, 0},
    };
    memcpy(out, flags, sizeof flags);
    return sizeof flags / sizeof *flags;
}

/* The simulated cluster for one mode ("fgK": foreground every K steps,
 * else --sync-every). 2 (said on stderr) or 0. */
static int config_for_mode(const sim_flags *f, const ss__sim_config *base, const char *mode,
                           ss__sim_config *cfg) {
    char *k_end = NULL;
    long k = !strncmp(mode, "fg", 2) && mode[2] ? strtol(mode + 2, &k_end, 10) : 0;
    const int m = k_end ? (*k_end || k < 1 ? -1 : SS_SIM_FOREGROUND) : ss__sim_mode_parse(mode);
    if (m < 0) {
        fprintf(stderr,
                "%s: --modes: unknown mode %s (none, easgd, ma, bmuf, fg, fgK: every K steps)\n",
                program.name, mode);
        return 2;
    }
    *cfg = *base;
    cfg->mode = (ss__sim_mode)m;
    char err[256];
    const char *cost_mode = m == SS_SIM_FOREGROUND ? "fg" : mode;
    if (*f->calibration && load_costs(f->calibration, cost_mode, &cfg->costs, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", program.name, err);
        return 2;
    }
    ss__sim_costs *c = &cfg->costs;
    c->step_cpu_s = f->step_cpu_us >= 0 ? f->step_cpu_us * 1e-6 : c->step_cpu_s;
    c->client_cpu_s_per_float = f->client_ns >= 0 ? f->client_ns * 1e-9 : c->client_cpu_s_per_float;
    c->ps_cpu_s_per_float = f->ps_ns >= 0 ? f->ps_ns * 1e-9 : c->ps_cpu_s_per_float;
    c->rpc_fixed_s = f->fixed_us >= 0 ? f->fixed_us * 1e-6 : c->rpc_fixed_s;
    cfg->per_host = (uint32_t)f->per_host;
    cfg->ps = (uint32_t)f->ps;
    cfg->dense_floats = f->dense;
    cfg->step_s = f->step_us * 1e-6;
    cfg->batch = (uint32_t)f->batch;
    cfg->sync_every = (uint32_t)(k_end ? k : f->sync_every);
    cfg->min_round_gap = (uint32_t)f->min_gap;
    cfg->ma_deadline_s = f->deadline_ms * 1e-3;
    cfg->link_bytes_per_s = f->link_gbit * 1e9 / 8;
    cfg->ps_link_bytes_per_s = f->ps_link_gbit * 1e9 / 8;
    cfg->wire_ratio = f->wire_ratio;
    cfg->latency_s = f->latency_us * 1e-6;
    cfg->shared_cores = f->shared_cores;
    cfg->host_cores = f->host_cores;
    cfg->ps_cores = f->ps_cores;
    cfg->ps_threads = (uint32_t)f->ps_threads;
    cfg->chunk_floats = f->chunk;
    cfg->window = (uint32_t)f->window;
    cfg->round_window = (uint32_t)f->round_window;
    cfg->start_spread_s = f->spread_ms * 1e-3;
    cfg->seconds = f->seconds;
    return 0;
}

/* One line (and TSV row) per trainer count of the list. */
static int run_trainer_counts(ss__sim_config *cfg, const char *trainers, const char *mode,
                              FILE *out) {
    char copy[1024], fg_label[32];
    snprintf(copy, sizeof copy, "%s", trainers);
    const char *label = mode;
    if (cfg->mode == SS_SIM_FOREGROUND) {
        snprintf(fg_label, sizeof fg_label, "fg%u", cfg->sync_every);
        label = fg_label;
    }
    char *save = NULL;
    for (char *n = strtok_r(copy, ",", &save); n; n = strtok_r(NULL, ",", &save)) {
        char *end;
        long v = strtol(n, &end, 10);
        if (*end || v < 1 || v > 1000000) {
            fprintf(stderr, "%s: --trainers: %s is not a number of trainers (1..1000000)\n",
                    program.name, n);
            return 2;
        }
        cfg->trainers = (uint32_t)v;
        ss__sim_result r;
        char why[200] = "";
        ss_status st = ss__sim_cluster(cfg, &r, why, sizeof why);
        if (st != SS_OK) {
            fprintf(stderr, "%s: %s\n", program.name, *why ? why : ss_strerror(st));
            return st == SS_ERR_INVALID_ARGUMENT ? 2 : 1;
        }
        printf("sim: ps=%u n=%u mode=%s examples/s=%.0f efficiency=%.3f gap_p50=%.1f "
               "gap_p99=%.0f gap_max=%.0f rounds=%.0f round_ms=%.2f ps_cpu=%.2f ps_link=%.2f "
               "host_cpu=%.2f events=%llu\n",
               cfg->ps, cfg->trainers, label, r.examples_per_s, r.efficiency, r.gap_p50, r.gap_p99,
               r.gap_max, r.rounds, r.round_s_mean * 1e3, r.ps_cpu_util, r.ps_link_util,
               r.host_cpu_util, (unsigned long long)r.events);
        fflush(stdout);
        if (out)
            fprintf(out, "%u\t%u\t%s\t%.0f\t%.0f\t%.0f\t%.1f\t%.0f\t%.0f\t%.0f\t0\n", cfg->ps,
                    cfg->trainers, label, r.examples_per_s, r.examples_per_s / cfg->trainers,
                    r.examples_per_s / cfg->trainers, r.gap_p50, r.gap_p99, r.gap_max, r.rounds);
    }
    return 0;
}

int main(int argc, char **argv) {
    ss__sim_config base;
    ss__sim_config_init(&base);
    sim_flags f;
    sim_flags_init(&f, &base);
    ss__flag flags[40];
    size_t nflags = sim_flag_table(&f, flags);
    int code = ss__flags_cli(&program, flags, nflags, argc, argv);
    if (code >= 0)
        return code;
    FILE *out = NULL;
    if (*f.tsv) {
        out = fopen(f.tsv, "w");
        if (!out) {
            fprintf(stderr, "%s: --tsv %s: %s\n", program.name, f.tsv, strerror(errno));
            return 1;
        }
        fprintf(out, "ps\tn\tmode\texamples_s\tper_trainer\tmin_trainer\tgap_p50\tgap_p99\tgap_"
                     "max\trounds\tfailed\n");
    }
    char modes[256];
    snprintf(modes, sizeof modes, "%s", f.modes);
    int rc = 0;
    char *save = NULL;
    for (char *mode = strtok_r(modes, ",", &save); mode && rc == 0;
         mode = strtok_r(NULL, ",", &save)) {
        ss__sim_config cfg;
        rc = config_for_mode(&f, &base, mode, &cfg);
        if (rc == 0)
            rc = run_trainer_counts(&cfg, f.trainers, mode, out);
    }
    if (out && fclose(out) != 0 && rc == 0) {
        fprintf(stderr, "%s: --tsv %s: %s\n", program.name, f.tsv, strerror(errno));
        rc = 1;
    }
    return rc;
}
