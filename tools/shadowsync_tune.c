/* shadowsync-tune: picks a sync strategy for a model and a cluster
 * (after AutoSync: predicted candidates, the best few measured).
 *
 * Candidates: S-EASGD or S-MA through 1, 2 or 4 PS shards with float32 or
 * int8 (compressed) rounds, S-MA between the trainers by ring gossip or by
 * aggregation trees, each with a minimum round gap of 1 or 4 steps. Every
 * candidate gets a predicted examples/s and sync gap: the PS ones from the
 * cluster simulator (tools/sim, calibrated), the decentralized ones from a
 * model of their bytes (the trees' packed bottleneck, shadow/forest.h)
 * and CPU (the calibrated cost per float). The best few predicted, and
 * the defaults, then run as short trials on the emulated cluster
 * (bench/emu-cluster.sh, as root); the pick is the measured best: full
 * examples/s (within 3% of the best trial) at the lowest sync gap, ties to
 * fewer PS hosts and to float32. --sweep runs every candidate (the
 * exhaustive search the pick is judged by). The pick can be written as a
 * SHADOWSYNC_* environment file. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/flags.h"
#include "shadow/forest.h"
#include "tools/sim/cluster_model.h"

static const ss__program program = {
    "shadowsync-tune",
    "Picks the sync strategy for a cluster: algorithm (S-EASGD, S-MA), PS shards, encoding "
    "(float32, int8), aggregation (PS, ring gossip, trees) and the minimum round gap. Predicts "
    "each candidate's examples/s and sync gap (the calibrated simulator for the PS path, a "
    "bytes-and-CPU model for the decentralized ones), runs the best few and the defaults as "
    "short trials on the emulated cluster (--emu, as root; --trials 0: predictions only), "
    "prints predicted against measured and the pick, and writes it as SHADOWSYNC_* lines "
    "(--env-out)."};

typedef enum path { PATH_PS, PATH_RING, PATH_TREE } path;

typedef struct candidate {
    path via;
    const char *algo;     /* easgd | ma */
    uint32_t ps;          /* PS shards (PS path) */
    const char *encoding; /* f32 | int8 */
    uint32_t gap;         /* min round gap */
    double pred_rate, pred_gap;
    bool tried;
    double rate, gap_p50; /* measured */
} candidate;

typedef struct cluster {
    uint32_t trainers, per_host, hosts, slow_hosts;
    double dense, step_s, link_gbit, ps_link_gbit, slow_gbit, shared_cores, latency_s;
    uint32_t batch;
    ss__sim_costs costs;
} cluster;

static const char *path_name(path p) {
    return p == PATH_PS ? "ps" : p == PATH_RING ? "ring" : "tree";
}

/* int8 moves 0.259 of float32's bytes per round (bench/compression.sh). */
static double wire_ratio(const char *encoding) {
    return strcmp(encoding, "int8") ? 1.0 : 0.259;
}

static void predict_ps(const cluster *cl, candidate *c) {
    ss__sim_config cfg;
    ss__sim_config_init(&cfg);
    cfg.trainers = cl->trainers;
    cfg.per_host = cl->per_host;
    cfg.ps = c->ps;
    cfg.dense_floats = cl->dense;
    cfg.step_s = cl->step_s;
    cfg.batch = cl->batch;
    cfg.mode = strcmp(c->algo, "ma") ? SS_SIM_EASGD : SS_SIM_MA;
    cfg.min_round_gap = c->gap;
    cfg.costs = cl->costs;
    /* The simulator has one rate for every trainer link: slow hosts hold
     * up an MA round (a barrier) but not the median S-EASGD trainer. */
    double trainer_gbit = cl->slow_hosts && cfg.mode == SS_SIM_MA
                              ? fmin(cl->slow_gbit, cl->link_gbit)
                              : cl->link_gbit;
    cfg.link_bytes_per_s = trainer_gbit * 1e9 / 8;
    cfg.ps_link_bytes_per_s = cl->ps_link_gbit * 1e9 / 8;
    cfg.wire_ratio = wire_ratio(c->encoding);
    cfg.latency_s = cl->latency_s;
    cfg.shared_cores = cl->shared_cores;
    cfg.seconds = 10;
    ss__sim_result r;
    char why[200] = "failed";
    if (ss__sim_cluster(&cfg, &r, why, sizeof why) != SS_OK) {
        fprintf(stderr, "shadowsync-tune: simulator: %s\n", why);
        c->pred_rate = c->pred_gap = NAN;
        return;
    }
    c->pred_rate = r.examples_per_s;
    c->pred_gap = r.gap_p50;
}

/* The trainers' hosts and links as the trees see them: each host's own
 * link at its rate, two hosts meeting at the slower of the two. */
static ss_status cluster_topology(const cluster *cl, ss__topology *t) {
    ss_status st = ss__topology_grouped(cl->trainers, cl->per_host, cl->link_gbit, t);
    if (st != SS_OK)
        return st;
    for (uint32_t a = 0; a < t->hosts; a++) { /* the slow hosts are the last ones */
        const bool slow_a = a >= t->hosts - cl->slow_hosts;
        t->nic[a] = slow_a ? cl->slow_gbit : cl->link_gbit;
        for (uint32_t b = 0; b < t->hosts; b++) {
            const bool slow_b = b >= t->hosts - cl->slow_hosts;
            t->link[(size_t)a * t->hosts + b] = slow_a || slow_b ? cl->slow_gbit : cl->link_gbit;
        }
    }
    t->local = 100;
    return SS_OK;
}

/* Decentralized rounds: the slower of their bytes on the busiest link and
 * the CPU they take (every member both sends and takes in about a group a
 * round: the client's and the server's cost per float, on shared cores or
 * the host's), plus the software cost and latency of each hop. A ring
 * round pulls one peer's whole group; a tree round moves 2 (N - 1) / N of
 * it each way and waits for the slowest member (a barrier: one step). */
static void predict_decentralized(const cluster *cl, candidate *c) {
    const double cpu_per_member =
        cl->dense * (cl->costs.client_cpu_s_per_float + cl->costs.ps_cpu_s_per_float);
    const double cpu_s = cl->shared_cores > 0 ? cpu_per_member * cl->trainers / cl->shared_cores
                                              : cpu_per_member * cl->per_host / 16.0;
    double net_s, hop_s = cl->latency_s + cl->costs.rpc_fixed_s, barrier = 0;
    const double slowest = cl->slow_hosts ? fmin(cl->slow_gbit, cl->link_gbit) : cl->link_gbit;
    if (c->via == PATH_RING) {
        /* A host's link takes its per_host pulls; the median trainer is on
         * a fast host unless most are slow. */
        double gbit = cl->slow_hosts * 2 > cl->hosts ? slowest : cl->link_gbit;
        net_s = cl->per_host * cl->dense * 4 / (gbit * 1e9 / 8);
    } else {
        ss__topology t;
        ss__forest f;
        if (cluster_topology(cl, &t) != SS_OK || ss__forest_pack(&t, (size_t)cl->dense, 0, &f)) {
            c->pred_rate = c->pred_gap = NAN;
            return;
        }
        net_s = f.bottleneck_s;
        uint32_t depth = 0;
        for (uint32_t p = 0; p < f.parts; p++)
            if (f.depth[p] > depth)
                depth = f.depth[p];
        hop_s *= 2.0 * depth;
        barrier = 1;
        ss__forest_free(&f);
        ss__topology_free(&t);
    }
    const double round_s = fmax(net_s, cpu_s) + hop_s;
    c->pred_rate = cl->trainers * cl->batch / cl->step_s;
    c->pred_gap = fmax(c->gap, ceil(round_s / cl->step_s)) + barrier;
}

/* Runs one trial on the emulated cluster; false when it did not report. */
static bool trial(const char *emu, const cluster *cl, double seconds, candidate *c) {
    char cmd[2048];
    char peers[128] = "";
    if (c->via != PATH_PS)
        snprintf(peers, sizeof peers, "--peers 1 --peer-schedule %s", path_name(c->via));
    char slow[128] = "";
    if (cl->slow_hosts)
        snprintf(slow, sizeof slow, "--slow-hosts %u --slow-rate %gmbit", cl->slow_hosts,
                 cl->slow_gbit * 1000);
    snprintf(cmd, sizeof cmd,
             "SHADOWSYNC_MIN_ROUND_GAP=%u bash '%s' --ps %u --hosts %u --per-host %u "
             "--dense-floats %.0f --step-us %.0f --batch %u --rate %gmbit --ps-rate %gmbit "
             "--delay %.0fus --seconds %g --algo %s --encoding %s %s %s --quiet 2>&1",
             c->gap, emu, c->ps ? c->ps : 1, cl->hosts, cl->per_host, cl->dense, cl->step_s * 1e6,
             cl->batch, cl->link_gbit * 1000, cl->ps_link_gbit * 1000,
             /* the script's delay is per link; host to host crosses two */
             cl->latency_s * 1e6 / 2, seconds, c->algo, c->encoding, peers, slow);
    FILE *p = popen(cmd, "r");
    if (!p)
        return false;
    char line[4096];
    bool got = false;
    while (fgets(line, sizeof line, p)) {
        const char *r = strstr(line, " examples/s="), *g = strstr(line, " gap_p50=");
        if (strncmp(line, "emu-cluster: ps=", 16) == 0 && r && g) {
            c->rate = strtod(r + 12, NULL);
            c->gap_p50 = strtod(g + 9, NULL);
            got = true;
        }
    }
    int rc = pclose(p);
    c->tried = got && rc == 0;
    if (!c->tried)
        fprintf(stderr, "shadowsync-tune: trial failed: %s\n", cmd);
    return c->tried;
}

static void describe(const candidate *c, char *buf, size_t len) {
    if (c->via == PATH_PS)
        snprintf(buf, len, "%s ps=%u %s gap=%u", c->algo, c->ps, c->encoding, c->gap);
    else
        snprintf(buf, len, "ma %s %s gap=%u", path_name(c->via), c->encoding, c->gap);
}

/* Better: full rate (within 3% of best_rate), then the lower gap, then
 * fewer PS hosts, then float32. */
static bool better(const candidate *a, const candidate *b, bool measured, double best_rate) {
    double ra = measured ? a->rate : a->pred_rate, rb = measured ? b->rate : b->pred_rate;
    double ga = measured ? a->gap_p50 : a->pred_gap, gb = measured ? b->gap_p50 : b->pred_gap;
    bool fa = ra >= 0.97 * best_rate, fb = rb >= 0.97 * best_rate;
    if (fa != fb)
        return fa;
    if (ga != gb)
        return ga < gb;
    if (a->ps != b->ps)
        return a->ps < b->ps;
    return strcmp(a->encoding, "f32") == 0 && strcmp(b->encoding, "f32") != 0;
}

static int by_prediction(const void *x, const void *y) {
    const candidate *a = x, *b = y;
    double best = fmax(a->pred_rate, b->pred_rate);
    return better(a, b, false, best) ? -1 : better(b, a, false, best) ? 1 : 0;
}

static void write_env(const char *path, const candidate *c, const cluster *cl) {
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return;
    }
    char d[128];
    describe(c, d, sizeof d);
    fprintf(f, "# shadowsync-tune's pick for %u trainers (%u per host), %.0f floats: %s\n",
            cl->trainers, cl->per_host, cl->dense, d);
    fprintf(f, "SHADOWSYNC_ALGO=%s\nSHADOWSYNC_MIN_ROUND_GAP=%u\n", c->algo, c->gap);
    if (c->via == PATH_PS) {
        fprintf(f, "SHADOWSYNC_ENCODING=%s\n", c->encoding);
        fprintf(f, "# %u PS shard(s): start them and list them in SHADOWSYNC_PS=host:port,...\n",
                c->ps);
    } else {
        fprintf(f, "SHADOWSYNC_PEER_SCHEDULE=%s\n", path_name(c->via));
        fprintf(f,
                "# no PS: set SHADOWSYNC_PEERS (every trainer's host:port) and "
                "SHADOWSYNC_PEER_RANK per trainer%s\n",
                c->via == PATH_TREE ? "; SHADOWSYNC_TOPOLOGY: the links' file" : "");
    }
    fclose(f);
}

/* The command line: the cluster, the calibration, the search. */
typedef struct tune_flags {
    int64_t trainers, per_host, batch, max_ps, trials, slow_hosts, max_trials;
    double dense, step_us, link_gbit, ps_link_gbit, slow_gbit, shared_cores, trial_seconds,
        latency_us, step_cpu_us, client_ns, ps_ns, fixed_us;
    bool sweep;
    const char *emu, *env_out;
} tune_flags;

/* The flags into out; returns how many. */
static size_t tune_flag_table(tune_flags *f, ss__flag *out) {
    const ss__flag flags[] = {
        {"trainers", SS_FLAG_INT, &f->trainers, "trainers in the cluster", NULL, 2, 4096},
        {"per-host", SS_FLAG_INT, &f->per_host, "trainers per host", NULL, 1, 4096},
        {"dense-floats", SS_FLAG_DOUBLE, &f->dense, "floats in each trainer's dense group", NULL, 1,
         1e10},
        {"step-us", SS_FLAG_DOUBLE, &f->step_us, "a training step's time", NULL, 1, 1e8},
        {"batch", SS_FLAG_INT, &f->batch, "examples per step", NULL, 1, 1 << 24},
        {"link-gbit", SS_FLAG_DOUBLE, &f->link_gbit, "every trainer host's link, each direction",
         NULL, 1e-3, 1e4},
        {"ps-link-gbit", SS_FLAG_DOUBLE, &f->ps_link_gbit, "the PS hosts' links (0: --link-gbit)",
         NULL, 0, 1e4},
        {"slow-hosts", SS_FLAG_INT, &f->slow_hosts, "trainer hosts on slower links (the last ones)",
         NULL, 0, 4096},
        {"slow-gbit", SS_FLAG_DOUBLE, &f->slow_gbit, "their links", NULL, 1e-3, 1e4},
        {"latency-us", SS_FLAG_DOUBLE, &f->latency_us,
         "one-way latency between two hosts (the trials emulate it: half on each host's link)",
         NULL, 0, 1e7},
        {"shared-cores", SS_FLAG_DOUBLE, &f->shared_cores,
         "every process on one machine of this many cores (the emulated cluster); 0: 16 per host",
         NULL, 0, 4096},
        {"max-ps", SS_FLAG_INT, &f->max_ps, "PS shards to consider: 1, 2, 4 up to this", NULL, 1,
         1024},
        {"step-cpu-us", SS_FLAG_DOUBLE, &f->step_cpu_us, "calibration: CPU of a step", NULL, 0,
         1e8},
        {"client-ns-per-float", SS_FLAG_DOUBLE, &f->client_ns,
         "calibration: a trainer's (agent's) CPU per float of a round", NULL, 0, 1e6},
        {"ps-ns-per-float", SS_FLAG_DOUBLE, &f->ps_ns,
         "calibration: the serving side's CPU per float of a round", NULL, 0, 1e6},
        {"rpc-fixed-us", SS_FLAG_DOUBLE, &f->fixed_us, "calibration: software cost of one call",
         NULL, 0, 1e7},
        {"trials", SS_FLAG_INT, &f->trials,
         "best predicted candidates to run on the emulated cluster, besides the defaults (0: "
         "predict only)",
         NULL, 0, 1000},
        {"max-trials", SS_FLAG_INT, &f->max_trials,
         "also run every candidate predicted within 10% of the best (the model cannot tell them "
         "apart), up to this many trials in all",
         NULL, 0, 1000},
        {"sweep", SS_FLAG_BOOL, &f->sweep, "run every candidate (the exhaustive search)", NULL, 0,
         0},
        {"trial-seconds", SS_FLAG_DOUBLE, &f->trial_seconds, "each trial's training time", NULL, 1,
         3600},
        {"emu", SS_FLAG_STRING, &f->emu, "the emulated cluster script (run as root)", NULL, 0, 0},
        {"env-out", SS_FLAG_STRING, &f->env_out, "write the pick here as SHADOWSYNC_* lines", NULL,
         0, 0},
    };
    memcpy(out, flags, sizeof flags);
    return sizeof flags / sizeof *flags;
}

/* The cluster the flags describe; 2 (said on stderr) or 0. */
static int cluster_of(const tune_flags *f, cluster *cl) {
    if (f->trainers % f->per_host) {
        fprintf(stderr, "shadowsync-tune: --trainers %lld is not a multiple of --per-host %lld\n",
                (long long)f->trainers, (long long)f->per_host);
        return 2;
    }
    *cl = (cluster){.trainers = (uint32_t)f->trainers,
                    .per_host = (uint32_t)f->per_host,
                    .hosts = (uint32_t)(f->trainers / f->per_host),
                    .slow_hosts = (uint32_t)f->slow_hosts,
                    .dense = f->dense,
                    .step_s = f->step_us * 1e-6,
                    .link_gbit = f->link_gbit,
                    .ps_link_gbit = f->ps_link_gbit > 0 ? f->ps_link_gbit : f->link_gbit,
                    .slow_gbit = f->slow_gbit,
                    .shared_cores = f->shared_cores,
                    .latency_s = f->latency_us * 1e-6,
                    .batch = (uint32_t)f->batch,
                    .costs = {.step_cpu_s = f->step_cpu_us * 1e-6,
                              .client_cpu_s_per_float = f->client_ns * 1e-9,
                              .ps_cpu_s_per_float = f->ps_ns * 1e-9,
                              .rpc_fixed_s = f->fixed_us * 1e-6}};
    if (cl->slow_hosts > cl->hosts) {
        fprintf(stderr, "shadowsync-tune: --slow-hosts %u of %u hosts\n", cl->slow_hosts,
                cl->hosts);
        return 2;
    }
    return 0;
}

/* Every candidate (c holds 64); the defaults (S-EASGD, one PS, float32,
 * gap 4) first. */
static size_t candidates(candidate *c, int64_t max_ps) {
    size_t n = 0;
    static const char *algos[] = {"easgd", "ma"}, *encs[] = {"f32", "int8"};
    static const uint32_t gaps[] = {4, 1}, shards[] = {1, 2, 4};
    for (int a = 0; a < 2; a++)
        for (int s = 0; s < 3 && shards[s] <= max_ps; s++)
            for (int e = 0; e < 2; e++)
                for (int g = 0; g < 2; g++)
                    c[n++] = (candidate){.via = PATH_PS,
                                         .algo = algos[a],
                                         .ps = shards[s],
                                         .encoding = encs[e],
                                         .gap = gaps[g]};
    for (int v = PATH_RING; v <= PATH_TREE; v++)
        for (int g = 0; g < 2; g++)
            c[n++] = (candidate){.via = (path)v, .algo = "ma", .encoding = "f32", .gap = gaps[g]};
    return n;
}

/* Runs the trials (c sorted by prediction): the best predicted, those the
 * model cannot tell from the best (a predicted gap within 10%: on a
 * machine where CPU, not links, bounds the rounds, most of them) up to
 * --max-trials, and the defaults; all with --sweep. The best measured
 * rate into *best_rate; the defaults' candidate into *defaults. */
static void run_trials(const tune_flags *f, const cluster *cl, candidate *c, size_t n,
                       candidate *defaults, double *best_rate) {
    size_t close = 0;
    while (close < n && c[close].pred_gap <= 1.1 * c[0].pred_gap)
        close++;
    size_t run = (size_t)f->trials;
    if (f->trials > 0 && close > run)
        run = close < (size_t)f->max_trials ? close : (size_t)f->max_trials;
    if (f->sweep)
        run = n;
    *best_rate = 0;
    for (size_t i = 0; i < n; i++) {
        bool is_default = c[i].via == PATH_PS && c[i].ps == 1 && !strcmp(c[i].algo, "easgd") &&
                          !strcmp(c[i].encoding, "f32") && c[i].gap == 4;
        if ((i < run || (is_default && f->trials > 0)) &&
            trial(f->emu, cl, f->trial_seconds, &c[i]) && c[i].rate > *best_rate)
            *best_rate = c[i].rate;
        if (is_default)
            *defaults = c[i];
    }
}

/* The table of candidates and the pick's line; returns the pick. */
static const candidate *report(const candidate *c, size_t n, const candidate *defaults,
                               double best_rate) {
    printf("%-28s %14s %9s %14s %9s\n", "candidate", "pred_ex/s", "pred_gap", "meas_ex/s",
           "meas_gap");
    const candidate *pick = NULL;
    char d[128];
    for (size_t i = 0; i < n; i++) {
        describe(&c[i], d, sizeof d);
        if (c[i].tried)
            printf("%-28s %14.0f %9.1f %14.0f %9.1f\n", d, c[i].pred_rate, c[i].pred_gap, c[i].rate,
                   c[i].gap_p50);
        else
            printf("%-28s %14.0f %9.1f %14s %9s\n", d, c[i].pred_rate, c[i].pred_gap, "-", "-");
        if (c[i].tried && (!pick || better(&c[i], pick, true, best_rate)))
            pick = &c[i];
    }
    printf(pick ? "pick: " : "pick (predicted only, no trial ran): ");
    if (!pick) /* no trials: the best prediction */
        pick = &c[0];
    describe(pick, d, sizeof d);
    printf("%s  predicted %.0f examples/s gap %.1f", d, pick->pred_rate, pick->pred_gap);
    if (pick->tried)
        printf("; measured %.0f examples/s gap %.1f", pick->rate, pick->gap_p50);
    if (defaults->tried && pick->tried)
        printf("; defaults (easgd ps=1 f32 gap=4) measured %.0f examples/s gap %.1f",
               defaults->rate, defaults->gap_p50);
    printf("\n");
    return pick;
}

int main(int argc, char **argv) {
    tune_flags f = {.trainers = 8,
                    .per_host = 2,
                    .batch = 1024,
                    .max_ps = 4,
                    .trials = 3,
                    .max_trials = 12,
                    .dense = 4194304,
                    .step_us = 10000,
                    .link_gbit = 10,
                    .slow_gbit = 1,
                    .shared_cores = 2,
                    .trial_seconds = 8,
                    .latency_us = 50,
                    .step_cpu_us = 60,
                    .client_ns = 8,
                    .ps_ns = 6,
                    .fixed_us = 200,
                    .emu = "bench/emu-cluster.sh",
                    .env_out = ""};
    ss__flag flags[32];
    size_t nflags = tune_flag_table(&f, flags);
    int code = ss__flags_cli(&program, flags, nflags, argc, argv);
    if (code >= 0)
        return code;
    cluster cl;
    if ((code = cluster_of(&f, &cl)) != 0)
        return code;
    candidate c[64];
    size_t n = candidates(c, f.max_ps);
    printf("tune: %u trainers (%u hosts x %u), dense %.0f floats, step %.0f us, batch %u, links "
           "%g Gbit/s, PS links %g, %u slow host(s) at %g, %s\n",
           cl.trainers, cl.hosts, cl.per_host, cl.dense, f.step_us, cl.batch, cl.link_gbit,
           cl.ps_link_gbit, cl.slow_hosts, cl.slow_gbit,
           cl.shared_cores > 0 ? "one shared machine" : "a machine per host");
    for (size_t i = 0; i < n; i++)
        (c[i].via == PATH_PS ? predict_ps : predict_decentralized)(&cl, &c[i]);
    candidate defaults = c[0];
    qsort(c, n, sizeof *c, by_prediction);
    double best_rate;
    run_trials(&f, &cl, c, n, &defaults, &best_rate);
    const candidate *pick = report(c, n, &defaults, best_rate);
    if (*f.env_out)
        write_env(f.env_out, pick, &cl);
    return 0;
}
