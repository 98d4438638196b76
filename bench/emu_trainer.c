/* shadowsync-emu-trainer: a trainer whose compute is emulated, for the
 * emulated-cluster benchmarks (bench/emu-cluster.sh). Each step "trains"
 * for --step-us (a sleep, or a busy spin with --spin) and then writes
 * --touch floats of one dense group of --dense-floats, as Hogwild workers
 * would; the group is synced by the real hooks, configured by the
 * SHADOWSYNC_* variables like any trainer (SHADOWSYNC_PS, SHADOWSYNC_MODE,
 * SHADOWSYNC_ALGO, SHADOWSYNC_SYNC_EVERY, SHADOWSYNC_AGENT, ...). With the
 * compute a sleep, 64 trainers fit on 2 cores and what is measured is the
 * sync system: how many steps a trainer makes, and how many steps pass
 * between two of its completed rounds (the sync gap).
 *
 * At the end it prints one line:
 *   emu-trainer: name=N steps=S seconds=T examples/s=R rounds=K failed=F
 *   gap_mean=G gap_p50=P gap_p99=Q gap_max=M
 * (examples/s = steps * --batch / seconds of training, close() excluded). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/flags.h"
#include "shadowsync/shadowsync.h"

static const ss__program program = {
    "shadowsync-emu-trainer",
    "A trainer with emulated compute (sleep or spin per step) and one dense group of a chosen "
    "size, synced by the ShadowSync hooks configured from SHADOWSYNC_* (PS, MODE, ALGO, "
    "SYNC_EVERY, AGENT, ...). Prints steps, examples/s and the sync gap at the end."};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The step's compute: a sleep (no CPU, so many trainers fit on few cores)
 * or a spin (the CPU a real step would take). */
static void compute(int64_t us, bool spin) {
    if (us <= 0)
        return;
    if (spin) {
        const uint64_t until = now_ns() + (uint64_t)us * 1000u;
        while (now_ns() < until) {
        }
        return;
    }
    struct timespec d = {.tv_sec = us / 1000000, .tv_nsec = us % 1000000 * 1000};
    while (nanosleep(&d, &d) != 0) {
    }
}

int main(int argc, char **argv) {
    int64_t dense = 1 << 20, step_us = 10000, batch = 1024, touch = 4096;
    double seconds = 10;
    bool spin = false;
    const char *group = "dense";
    ss__flag flags[] = {
        {"dense-floats", SS_FLAG_INT, &dense, "floats in the dense group", NULL, 1, 1 << 30},
        {"step-us", SS_FLAG_INT, &step_us, "emulated compute per step, microseconds", NULL, 0, 1e8},
        {"spin", SS_FLAG_BOOL, &spin, "spin for --step-us instead of sleeping", NULL, 0, 0},
        {"batch", SS_FLAG_INT, &batch, "examples per step (for examples/s)", NULL, 1, 1e9},
        {"touch", SS_FLAG_INT, &touch, "floats each step writes (a rotating window)", NULL, 0,
         1 << 30},
        {"seconds", SS_FLAG_DOUBLE, &seconds, "how long to train", NULL, 0.01, 86400},
        {"group", SS_FLAG_STRING, &group, "the dense group's name (the same on every trainer)",
         NULL, 0, 0},
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
    const uint64_t start = now_ns(), until = start + (uint64_t)(seconds * 1e9);
    uint64_t steps = 0;
    size_t at = 0;
    while (now_ns() < until) {
        compute(step_us, spin);
        for (size_t i = 0; i < k; i++) { /* the step's update */
            x[at] = 0.999f * x[at] + 0.001f * (float)(steps % 7);
            at = at + 1 == n ? 0 : at + 1;
        }
        ss_trainer_step(t);
        steps++;
    }
    const double elapsed = (double)(now_ns() - start) / 1e9;
    ss_dense_stats s;
    ss_dense_get_stats(w, &s);
    ss_status closed = ss_trainer_close(t); /* final rounds: not in the rate */
    printf("emu-trainer: name=%s steps=%llu seconds=%.2f examples/s=%.0f rounds=%llu failed=%llu "
           "gap_mean=%.1f gap_p50=%llu gap_p99=%llu gap_max=%llu close=%s\n",
           cfg.name ? cfg.name : "-", (unsigned long long)steps, elapsed,
           (double)steps * (double)batch / elapsed, (unsigned long long)s.rounds,
           (unsigned long long)s.failed_rounds, s.gap_mean, (unsigned long long)s.gap_p50,
           (unsigned long long)s.gap_p99, (unsigned long long)s.gap_max, ss_status_name(closed));
    return closed == SS_OK ? 0 : 1;
}
