/* shadowsync-emu-trainer: a trainer whose compute is emulated, for the
 * emulated-cluster benchmarks (bench/emu-cluster.sh). Each step "trains"
 * for --step-us (--compute: paced, sleep or spin) and then writes
 * --touch floats of one dense group of --dense-floats, as Hogwild workers
 * would; the group is synced by the real hooks, configured by the
 * SHADOWSYNC_* variables like any trainer (SHADOWSYNC_PS, SHADOWSYNC_SYNC,
 * SHADOWSYNC_ALGO, SHADOWSYNC_SYNC_EVERY, SHADOWSYNC_AGENT, ...). With the
 * compute a sleep, 64 trainers fit on 2 cores and what is measured is the
 * sync system: how many steps a trainer makes, and how many steps pass
 * between two of its completed rounds (the sync gap).
 *
 * At the end it prints one line:
 *   emu-trainer: name=N steps=S seconds=T examples/s=R rounds=K failed=F
 *   gap_mean=G gap_p50=P gap_p99=Q gap_max=M stall_max_ms=L cpu_s=C
 *   close=STATUS
 * (examples/s = steps * --batch / seconds of training, the final rounds
 * excluded; stall_max_ms: the longest time between two finished steps;
 * cpu_s: this process's CPU seconds while training, its in-process
 * shadow pool included).
 *
 * For the fault soak (bench/fault-soak.sh): --progress-ms prints
 *   emu-progress: t_ms=<CLOCK_REALTIME ms> steps=S rounds=K failed=F
 * that often; --until-ms stops every trainer at one wall-clock time;
 * --drift pulls this trainer's replica toward its own value, so replicas
 * drift apart unless the sync holds them together; --dump writes the
 * replica (raw floats) after the final rounds. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "common/clock.h"
#include "common/flags.h"
#include "common/malloc_tune.h"
#include "shadowsync/shadowsync.h"

static const ss__program program = {
    "shadowsync-emu-trainer",
    "A trainer with emulated compute (sleep or spin per step) and one dense group of a chosen "
    "size, synced by the ShadowSync hooks configured from SHADOWSYNC_* (PS, MODE, ALGO, "
    "SYNC_EVERY, AGENT, ...). Prints steps, examples/s and the sync gap at the end."};

static void print_progress(ss_dense *w, uint64_t steps) {
    ss_dense_stats s;
    ss_dense_get_stats(w, &s);
    printf("emu-progress: t_ms=%llu steps=%llu rounds=%llu failed=%llu\n",
           (unsigned long long)ss__unix_ms(), (unsigned long long)steps,
           (unsigned long long)s.rounds, (unsigned long long)s.failed_rounds);
    fflush(stdout);
}

/* Writes the replica's floats to path (raw, host order). */
static int dump_replica(const char *path, const float *x, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(x, sizeof *x, n, f) != n || fclose(f) != 0) {
        perror(path);
        return -1;
    }
    return 0;
}

/* The step's compute, three ways:
 *  - paced (default): the step ends at an absolute deadline, the previous
 *    one + --step-us, as compute on the trainer's own cores would: a late
 *    wake-up of this sleeping thread (all emulated hosts share this
 *    machine's cores) is made up by the next step, but time spent inside
 *    ss_trainer_step (a foreground round) moves the schedule on by as much:
 *    compute never overlaps a wait for a round.
 *  - sleep: a plain relative sleep; every scheduling delay of the shared
 *    machine is charged to the trainer.
 *  - spin: busy for --step-us (the CPU a real step takes). */
typedef enum { COMPUTE_PACED, COMPUTE_SLEEP, COMPUTE_SPIN } compute_kind;

static void sleep_until(uint64_t t) {
    struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ull),
                          .tv_nsec = (long)(t % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

/* *next: the paced schedule's next deadline (0 = start it now). */
static void compute(int64_t us, compute_kind kind, uint64_t *next) {
    if (us <= 0)
        return;
    const uint64_t step = (uint64_t)us * 1000u, now = ss__now_ns();
    if (kind == COMPUTE_SPIN) {
        while (ss__now_ns() < now + step) {
        }
    } else if (kind == COMPUTE_SLEEP) {
        sleep_until(now + step);
    } else {
        /* A step that already ran past its deadline (it waited for a
         * round) starts a new schedule from now. */
        *next = *next && *next + step > now ? *next + step : now + step;
        sleep_until(*next);
    }
}

int main(int argc, char **argv) {
    ss__malloc_keep_large_buffers(); /* sync rounds reuse their megabyte buffers */
    int64_t dense = 1 << 20, step_us = 10000, batch = 1024, touch = 4096, progress_ms = 0,
            until_ms = 0;
    double seconds = 10, drift = 0;
    const char *group = "dense", *compute_name = "paced", *dump = "";
    ss__flag flags[] = {
        {"dense-floats", SS_FLAG_INT, &dense, "floats in the dense group", NULL, 1, 1 << 30},
        {"step-us", SS_FLAG_INT, &step_us, "emulated compute per step, microseconds", NULL, 0, 1e8},
        {"compute", SS_FLAG_STRING, &compute_name,
         "how a step takes --step-us: paced (absolute deadlines, as on the trainer's own cores), "
         "sleep (relative) or spin (busy)",
         "paced|sleep|spin", 0, 0},
        {"batch", SS_FLAG_INT, &batch, "examples per step (for examples/s)", NULL, 1, 1e9},
        {"touch", SS_FLAG_INT, &touch, "floats each step writes (a rotating window)", NULL, 0,
         1 << 30},
        {"seconds", SS_FLAG_DOUBLE, &seconds, "how long to train", NULL, 0.01, 86400},
        {"group", SS_FLAG_STRING, &group, "the dense group's name (the same on every trainer)",
         NULL, 0, 0},
        {"until-ms", SS_FLAG_INT, &until_ms,
         "stop at this CLOCK_REALTIME time, ms since the epoch (0 = after --seconds)", NULL, 0, 0},
        {"progress-ms", SS_FLAG_INT, &progress_ms,
         "print an emu-progress line this often (0 = never)", NULL, 0, 3600000},
        {"drift", SS_FLAG_DOUBLE, &drift,
         "added to the value each step pulls the replica toward (differs per trainer: replicas "
         "drift apart without sync)",
         NULL, -1e6, 1e6},
        {"dump", SS_FLAG_STRING, &dump, "write the replica here after the final rounds", NULL, 0,
         0},
    };
    int code = ss__flags_cli(&program, flags, sizeof flags / sizeof *flags, argc, argv);
    if (code >= 0)
        return code;
    ss_trainer_config cfg;
    ss_trainer_config_init(&cfg);
    ss_trainer *t = NULL;
    ss_dense *w = NULL;
    ss_status st = ss_trainer_config_from_env(&cfg);
    if (st == SS_OK)
        st = ss_trainer_open(&cfg, &t);
    if (st == SS_OK)
        st = ss_trainer_add_dense(t, group, (size_t)dense, NULL, &w);
    if (st != SS_OK) {
        fprintf(stderr, "%s: %s\n", program.name, ss_strerror(st));
        if (t)
            ss_trainer_close(t);
        return 1;
    }
    float *x = ss_dense_data(w);
    const size_t n = ss_dense_size(w);
    const size_t k = (size_t)touch < n ? (size_t)touch : n;
    uint64_t start = ss__now_ns(), until = start + (uint64_t)(seconds * 1e9);
    if (until_ms > 0) {
        const int64_t left_ms = until_ms - (int64_t)ss__unix_ms();
        until = start + (left_ms > 0 ? (uint64_t)left_ms * 1000000u : 0);
    }
    const compute_kind kind = !strcmp(compute_name, "spin")    ? COMPUTE_SPIN
                              : !strcmp(compute_name, "sleep") ? COMPUTE_SLEEP
                                                               : COMPUTE_PACED;
    uint64_t steps = 0, next = 0, last_step = start, stall_max = 0, last_progress = start;
    size_t at = 0;
    for (uint64_t now = start; now < until; now = ss__now_ns()) {
        compute(step_us, kind, &next);
        for (size_t i = 0; i < k; i++) { /* the step's update */
            x[at] = 0.999f * x[at] + 0.001f * ((float)(steps % 7) + (float)drift);
            at = at + 1 == n ? 0 : at + 1;
        }
        const uint64_t stepped = ss__now_ns();
        ss_trainer_step(t);
        steps++;
        const uint64_t done = ss__now_ns();
        /* Paced: the trainer computes nothing while it waits in step()
         * (a foreground round), so its schedule moves on by that wait. */
        if (next)
            next += done - stepped;
        if (done - last_step > stall_max)
            stall_max = done - last_step;
        last_step = done;
        if (progress_ms > 0 && done - last_progress >= (uint64_t)progress_ms * 1000000u) {
            print_progress(w, steps);
            last_progress = done;
        }
    }
    const double elapsed = (double)(ss__now_ns() - start) / 1e9;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const double cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    ss_dense_stats s;
    ss_dense_get_stats(w, &s);
    /* The final rounds are not in the rate. */
    ss_status closed = ss_trainer_finish(t);
    const int dumped = *dump ? dump_replica(dump, x, n) : 0;
    const ss_status freed = ss_trainer_close(t);
    if (closed == SS_OK)
        closed = freed;
    printf("emu-trainer: name=%s steps=%llu seconds=%.2f examples/s=%.0f rounds=%llu failed=%llu "
           "gap_mean=%.1f gap_p50=%llu gap_p99=%llu gap_max=%llu stall_max_ms=%.1f cpu_s=%.3f "
           "close=%s\n",
           cfg.name ? cfg.name : "-", (unsigned long long)steps, elapsed,
           (double)steps * (double)batch / elapsed, (unsigned long long)s.rounds,
           (unsigned long long)s.failed_rounds, s.gap_mean, (unsigned long long)s.gap_p50,
           (unsigned long long)s.gap_p99, (unsigned long long)s.gap_max, (double)stall_max / 1e6,
           cpu, ss_status_name(closed));
    return closed == SS_OK && dumped == 0 ? 0 : 1;
}
