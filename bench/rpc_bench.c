/* shadowsync-bench-rpc: S-EASGD rounds of one dense group against running
 * shadowsync-ps shards, timed: goodput = payload bytes moved per second
 * (the snapshot up and the delta down, 8 bytes per float per round). */
#include <stdio.h>
#include <stdlib.h>

#include "common/clock.h"
#include "common/flags.h"
#include "common/malloc_tune.h"
#include "rpc/grpc_transport.h"

/* What --help and --version say. */
static const ss__program program = {
    "shadowsync-bench-rpc", "Times S-EASGD rounds of one dense group against running "
                            "shadowsync-ps shards and prints\nthe goodput (snapshot up + delta "
                            "down per second) and the round time."};

int main(int argc, char **argv) {
    ss__malloc_keep_large_buffers(); /* sync rounds reuse their megabyte buffers */
    const char *ps = "127.0.0.1:7070";
    int64_t floats = 1 << 20, reps = 20, warmup = 3, chunk = SS_GRPC_CHUNK_FLOATS, window = 0;
    ss__flag flags[] = {
        {"ps", SS_FLAG_STRING, &ps, "shadowsync-ps shards, host:port,...", NULL, 0, 0},
        {"floats", SS_FLAG_INT, &floats, "group size in floats", NULL, 1, 1 << 28},
        {"reps", SS_FLAG_INT, &reps, "timed rounds", NULL, 1, 1e6},
        {"warmup", SS_FLAG_INT, &warmup, "untimed rounds first", NULL, 0, 1e6},
        {"chunk-floats", SS_FLAG_INT, &chunk, "floats per chunk call", NULL, 1, 64 << 20},
        {"window", SS_FLAG_INT, &window,
         "chunk calls in flight per shard (0: adapted to the round trip, as in the library)", NULL,
         0, 1 << 20},
    };
    int exit_code = ss__flags_cli(&program, flags, sizeof flags / sizeof *flags, argc, argv);
    if (exit_code >= 0)
        return exit_code;
    ss__grpc_transport_config cfg = {.targets = ps,
                                     .timeout_ms = 60000,
                                     .chunk_floats = (size_t)chunk,
                                     .window = (uint32_t)window};
    ss__transport *t;
    ss_status st = ss__grpc_transport_create(&cfg, &t);
    size_t n = (size_t)floats;
    float *s = malloc(n * sizeof *s), *d = malloc(n * sizeof *d);
    uint64_t m;
    if (st != SS_OK || !s || !d || (st = ss__transport_join(t, "bench", n, &m)) != SS_OK) {
        fprintf(stderr, "shadowsync-bench-rpc: %s\n", ss_strerror(st ? st : SS_ERR_NO_MEMORY));
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        s[i] = (float)(i % 977) * 1e-3f;
    for (int64_t r = 0; st == SS_OK && r < warmup; r++)
        st = ss__transport_easgd_exchange(t, "bench", m, s, 0.5f, d, n);
    uint64_t t0 = ss__now_ns();
    for (int64_t r = 0; st == SS_OK && r < reps; r++)
        st = ss__transport_easgd_exchange(t, "bench", m, s, 0.5f, d, n);
    double sec = (double)(ss__now_ns() - t0) * 1e-9;
    if (st != SS_OK) {
        fprintf(stderr, "shadowsync-bench-rpc: round failed: %s\n", ss_strerror(st));
        return 1;
    }
    double bytes = 8.0 * (double)n * (double)reps;
    printf("rpc-bench: floats=%zu reps=%lld round_ms=%.3f goodput_gbit_s=%.3f window=%u\n", n,
           (long long)reps, 1e3 * sec / (double)reps, bytes * 8e-9 / sec,
           ss__grpc_transport_window(t));
    ss__transport_leave(t, "bench", m);
    ss__transport_destroy(t);
    free(s);
    free(d);
    return 0;
}
