/* The smallest ShadowSync trainer: Hogwild-free SGD on a quadratic
 * f(x) = |x - target|^2 / 2 over one dense group, synced through the
 * parameter servers named in SHADOWSYNC_PS (or --ps). Shows the whole
 * public API; build it against an installed ShadowSync with
 *   cc minimal_trainer.c $(pkg-config --cflags --libs shadowsync)
 * Usage: minimal-trainer [--help] [--version] [--ps host:port,...] [--steps N] [--mode M]
 * [--step-us U] (SHADOWSYNC_AGENT=<socket> hands the syncing to the host's agent.) */
#define _POSIX_C_SOURCE 200809L /* nanosleep under -std=c11 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shadowsync/shadowsync.h"

int main(int argc, char **argv) {
    ss_trainer_config cfg;
    ss_trainer_config_init(&cfg);
    ss_status st = ss_trainer_config_from_env(&cfg);
    long steps = 1000, step_us = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            printf("usage: minimal-trainer [--ps host:port,...] [--steps N] "
                   "[--mode none|shadow|foreground] [--step-us U]\n"
                   "--step-us: sleep U microseconds per step (a minibatch's compute)\n"
                   "Trains a toy quadratic through the ShadowSync trainer hooks; "
                   "SHADOWSYNC_* variables configure the rest.\n");
            return 0;
        } else if (!strcmp(argv[i], "--version")) {
            printf("minimal-trainer (ShadowSync) %s\n", ss_version());
            return 0;
        } else if (!strcmp(argv[i], "--ps") && i + 1 < argc) {
            const char *v = argv[++i];
            if (st == SS_OK)
                st = ss_trainer_config_set(&cfg, "ps", v);
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            steps = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--step-us") && i + 1 < argc) {
            step_us = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
            const char *v = argv[++i];
            if (st == SS_OK) /* the library's key for it: "sync" */
                st = ss_trainer_config_set(&cfg, "sync", v);
        } else {
            fprintf(stderr, "minimal-trainer: unknown argument %s (try --help)\n", argv[i]);
            return 2;
        }
    }
    ss_trainer *t = NULL;
    ss_dense *w = NULL;
    if (st != SS_OK || (st = ss_trainer_open(&cfg, &t)) != SS_OK ||
        (st = ss_trainer_add_dense(t, "toy", 64, NULL, &w)) != SS_OK) {
        fprintf(stderr, "minimal-trainer: %s\n", ss_last_error()); /* which setting, why */
        if (t)
            ss_trainer_close(t);
        return 1;
    }
    float *x = ss_dense_data(w);
    for (long s = 0; s < steps; s++) {
        for (size_t i = 0; i < ss_dense_size(w); i++)
            x[i] -= 0.01f * (x[i] - (float)i); /* gradient of the quadratic */
        ss_trainer_step(t);
        if (step_us > 0) {
            struct timespec pause = {.tv_sec = step_us / 1000000,
                                     .tv_nsec = step_us % 1000000 * 1000};
            nanosleep(&pause, NULL);
        }
    }
    ss_dense_stats stats;
    ss_dense_get_stats(w, &stats);
    printf("minimal-trainer: steps=%llu rounds=%llu x[10]=%.3f\n",
           (unsigned long long)stats.iterations, (unsigned long long)stats.rounds, x[10]);
    return ss_trainer_close(t) == SS_OK ? 0 : 1;
}
