/* shadowsync-bench-rpc: S-EASGD rounds of one dense group against running
 * shadowsync-ps shards, timed: goodput = payload bytes moved per second
 * (the snapshot up and the delta down, 8 bytes per float per round).
 *
 * --echo measures the wire without the PS's work: a child process serves
 * an echo method on 127.0.0.1 through the same gRPC server code (the
 * request gathered, the reply copied out), and a "round" is the same
 * chunk calls with the same window, each chunk's reply copied into d. The
 * gap between the two is the PS's share (the elastic update, the finite
 * check, protobuf); the gap from iperf3 to the echo is gRPC's and the
 * copies'.
 *
 * --tcp-echo is the floor of any such path on this machine: the same
 * chunks, length-prefixed, on one plain loopback socket (a writer thread
 * sends a round's chunks while this thread reads their echoes back), to a
 * child that reads each chunk whole and writes it back: two copies each
 * way in the kernel, one read and one write per chunk at each end. */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fd_io.h"
#include "common/flags.h"
#include "common/malloc_tune.h"
#include "rpc/dense/grpc_transport.h"
#include "rpc/dense/recut_transport.h"
#include "rpc/rpc.h"

#define ECHO_PATH "/shadowsync.bench.Echo/Echo"

static void h_echo(void *ctx, const uint8_t *req, size_t len, ss__rpc_reply *reply) {
    (void)ctx;
    reply->data = malloc(len ? len : 1);
    if (!reply->data) {
        reply->status = SS_ERR_NO_MEMORY;
        return;
    }
    memcpy(reply->data, req, len);
    reply->len = len;
}

/* The echo server, in a child forked before this process starts gRPC: it
 * writes its port to fd and serves until fd's other end closes. */
static pid_t start_echo_server(int *port) {
    int up[2];
    if (pipe(up) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(up[0]);
        static const ss__rpc_method m = {ECHO_PATH, h_echo, false, NULL, true,
                                         0,         NULL,   false, false};
        ss__rpc_server_config cfg = {
            .listen = "127.0.0.1:0", .threads = 2, .max_message_bytes = 256u << 20};
        ss__rpc_server *srv;
        int p = -1;
        if (ss__rpc_server_start(&cfg, &m, 1, NULL, &srv, NULL, 0) == SS_OK)
            p = ss__rpc_server_port(srv);
        if (write(up[1], &p, sizeof p) != (ssize_t)sizeof p || p < 0)
            _exit(1);
        pause(); /* until the parent's SIGTERM */
        _exit(0);
    }
    close(up[1]);
    if (pid < 0 || read(up[0], port, sizeof *port) != (ssize_t)sizeof *port || *port < 0) {
        close(up[0]);
        if (pid > 0)
            kill(pid, SIGKILL), waitpid(pid, NULL, 0);
        return -1;
    }
    close(up[0]);
    return pid;
}

static ss_status copy_echo(ss__rpc_request *rq, const ss__rpc_message *reply, void *arg) {
    float *dst = arg;
    size_t len = ss__rpc_message_length(reply);
    return len == rq->len && ss__rpc_message_copy(reply, 0, dst, len) ? SS_OK : SS_ERR_PARSE;
}

/* One "round" of echo calls: n floats from s in chunk calls, window per
 * channel, the replies into d. */
static ss_status echo_round(ss__rpc_request *rq, size_t calls, const float *s, float *d, size_t n,
                            size_t chunk, uint32_t window) {
    for (size_t i = 0; i < calls; i++) {
        size_t lo = i * chunk, len = n - lo < chunk ? n - lo : chunk;
        rq[i].req = (const uint8_t *)(s + lo);
        rq[i].len = len * sizeof(float);
        rq[i].payload = NULL;
        rq[i].payload_len = 0;
        rq[i].on_reply = copy_echo;
        rq[i].on_reply_arg = d + lo;
        free(rq[i].resp);
        rq[i].resp = NULL;
    }
    return ss__rpc_call_windowed(rq, calls, 60000, true, window);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run_echo(int64_t floats, int64_t reps, int64_t warmup, int64_t chunk, int64_t window) {
    int port;
    pid_t pid = start_echo_server(&port);
    if (pid < 0) {
        fprintf(stderr, "shadowsync-bench-rpc: the echo server did not start\n");
        return 1;
    }
    char target[32];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    const size_t n = (size_t)floats, ck = (size_t)chunk, calls = (n + ck - 1) / ck;
    const uint32_t w = window > 0 ? (uint32_t)window : 4; /* the library's window on loopback */
    ss__rpc_channel *ch = NULL;
    ss_status st = ss__rpc_channel_create(target, 256u << 20, NULL, &ch, NULL, 0);
    float *s = malloc(n * sizeof *s), *d = malloc(n * sizeof *d);
    ss__rpc_request *rq = calloc(calls, sizeof *rq);
    if (st == SS_OK && (!s || !d || !rq))
        st = SS_ERR_NO_MEMORY;
    for (size_t i = 0; st == SS_OK && i < calls; i++)
        rq[i] = (ss__rpc_request){.ch = ch, .method = ECHO_PATH};
    for (size_t i = 0; s && i < n; i++)
        s[i] = (float)(i % 977) * 1e-3f;
    for (int64_t r = 0; st == SS_OK && r < warmup; r++)
        st = echo_round(rq, calls, s, d, n, ck, w);
    const uint64_t t0 = ss__now_ns();
    for (int64_t r = 0; st == SS_OK && r < reps; r++)
        st = echo_round(rq, calls, s, d, n, ck, w);
    const double sec = (double)(ss__now_ns() - t0) * 1e-9;
    if (st == SS_OK && memcmp(s, d, n * sizeof *s) != 0)
        st = SS_ERR_PARSE; /* the echo must come back whole */
    if (st == SS_OK)
        printf("rpc-bench: echo floats=%zu reps=%lld round_ms=%.3f goodput_gbit_s=%.3f window=%u\n",
               n, (long long)reps, 1e3 * sec / (double)reps,
               8.0 * (double)n * (double)reps * 8e-9 / sec, w);
    else
        fprintf(stderr, "shadowsync-bench-rpc: echo round failed: %s\n", ss_strerror(st));
    for (size_t i = 0; rq && i < calls; i++)
        free(rq[i].resp);
    free(rq);
    free(s);
    free(d);
    ss__rpc_channel_destroy(ch);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    return st == SS_OK ? 0 : 1;
}

static void tcp_nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* The child: one connection; each frame (an 8-byte length, then the
 * bytes) read whole and written back, until the connection ends. */
static void tcp_echo_serve(int lfd) {
    int fd = accept(lfd, NULL, NULL);
    uint64_t len, cap = 0;
    uint8_t *buf = NULL;
    tcp_nodelay(fd);
    while (fd >= 0 && ss__read_all(fd, &len, sizeof len) && len <= (256u << 20)) {
        if (len > cap && !(buf = realloc(buf, cap = len)))
            break;
        if (!ss__read_all(fd, buf, len) || !ss__write_all(fd, &len, sizeof len) ||
            !ss__write_all(fd, buf, len))
            break;
    }
    _exit(0);
}

typedef struct tcp_round {
    int fd;
    const float *s;
    size_t n, chunk;
    bool ok;
} tcp_round;

/* The writer thread: a round's chunks, one frame each. */
static void *tcp_send_round(void *arg) {
    tcp_round *r = arg;
    r->ok = true;
    for (size_t lo = 0; r->ok && lo < r->n; lo += r->chunk) {
        const uint64_t len = (r->n - lo < r->chunk ? r->n - lo : r->chunk) * sizeof(float);
        r->ok = ss__write_all(r->fd, &len, sizeof len) && ss__write_all(r->fd, r->s + lo, len);
    }
    return NULL;
}

/* One round on the socket: the chunks out (the writer thread) and their
 * echoes into d (this thread), at once. */
static ss_status tcp_round_trip(tcp_round *r, float *d) {
    pthread_t w;
    if (pthread_create(&w, NULL, tcp_send_round, r) != 0)
        return SS_ERR_NO_MEMORY;
    bool ok = true;
    for (size_t lo = 0; ok && lo < r->n; lo += r->chunk) {
        const uint64_t want = (r->n - lo < r->chunk ? r->n - lo : r->chunk) * sizeof(float);
        uint64_t len;
        ok = ss__read_all(r->fd, &len, sizeof len) && len == want &&
             ss__read_all(r->fd, d + lo, len);
    }
    pthread_join(w, NULL);
    return ok && r->ok ? SS_OK : SS_ERR_IO;
}

static int run_tcp_echo(int64_t floats, int64_t reps, int64_t warmup, int64_t chunk) {
    char why[200], addr[32];
    int port = 0, lfd = ss__tcp_listen("127.0.0.1:0", &port, why, sizeof why);
    pid_t pid = lfd >= 0 ? fork() : -1;
    if (pid == 0)
        tcp_echo_serve(lfd);
    if (lfd >= 0)
        close(lfd);
    const size_t n = (size_t)floats;
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    tcp_round r = {.fd = pid > 0 ? ss__tcp_connect(addr, 5000, why, sizeof why) : -1,
                   .n = n,
                   .chunk = (size_t)chunk};
    float *s = malloc(n * sizeof *s), *d = malloc(n * sizeof *d);
    ss_status st = r.fd >= 0 && s && d ? SS_OK : SS_ERR_IO;
    tcp_nodelay(r.fd);
    for (size_t i = 0; s && i < n; i++)
        s[i] = (float)(i % 977) * 1e-3f;
    r.s = s;
    for (int64_t k = 0; st == SS_OK && k < warmup; k++)
        st = tcp_round_trip(&r, d);
    const uint64_t t0 = ss__now_ns();
    for (int64_t k = 0; st == SS_OK && k < reps; k++)
        st = tcp_round_trip(&r, d);
    const double sec = (double)(ss__now_ns() - t0) * 1e-9;
    if (st == SS_OK && memcmp(s, d, n * sizeof *s) != 0)
        st = SS_ERR_PARSE;
    if (st == SS_OK)
        printf("rpc-bench: tcp-echo floats=%zu reps=%lld round_ms=%.3f goodput_gbit_s=%.3f\n", n,
               (long long)reps, 1e3 * sec / (double)reps,
               8.0 * (double)n * (double)reps * 8e-9 / sec);
    else
        fprintf(stderr, "shadowsync-bench-rpc: tcp echo round failed: %s\n", ss_strerror(st));
    if (r.fd >= 0)
        close(r.fd); /* the child's read ends: it exits */
    if (pid > 0)
        waitpid(pid, NULL, 0);
    free(s);
    free(d);
    return st == SS_OK ? 0 : 1;
}

/* What --help and --version say. */
static const ss__program program = {
    "shadowsync-bench-rpc", "Times S-EASGD rounds of one dense group against running "
                            "shadowsync-ps shards and prints\nthe goodput (snapshot up + delta "
                            "down per second) and the round time."};

int main(int argc, char **argv) {
    ss__malloc_keep_large_buffers(); /* sync rounds reuse their megabyte buffers */
    const char *ps = "127.0.0.1:7070", *tls_ca = "", *tls_cert = "", *tls_key = "", *map = "";
    int64_t floats = 1 << 20, reps = 20, warmup = 3, chunk = SS_GRPC_CHUNK_FLOATS, window = 0;
    bool echo = false, tcp_echo = false, bulk = true; /* the library's default */
    ss__flag flags[] = {
        {"ps", SS_FLAG_STRING, &ps, "shadowsync-ps shards, host:port,...", NULL, 0, 0},
        {"floats", SS_FLAG_INT, &floats, "group size in floats", NULL, 1, 1 << 28},
        {"reps", SS_FLAG_INT, &reps, "timed rounds", NULL, 1, 1e6},
        {"warmup", SS_FLAG_INT, &warmup, "untimed rounds first", NULL, 0, 1e6},
        {"chunk-floats", SS_FLAG_INT, &chunk, "floats per chunk call", NULL, 1, 64 << 20},
        {"window", SS_FLAG_INT, &window,
         "chunk calls in flight per shard (0: adapted to the round trip, as in the library)", NULL,
         0, 1 << 20},
        {"echo", SS_FLAG_BOOL, &echo,
         "no PS: the same chunk calls to an echo server this tool starts on 127.0.0.1 (the "
         "wire's own cost; --ps is not used, --window 0 means 4)",
         NULL, 0, 0},
        {"bulk", SS_FLAG_BOOL, &bulk,
         "S-EASGD chunks on the PS's bulk stream when it has one, as the library's default; "
         "false: gRPC only",
         NULL, 0, 0},
        {"tcp-echo", SS_FLAG_BOOL, &tcp_echo,
         "no PS, no gRPC: the same chunks on one plain loopback socket to an echo child this "
         "tool starts (the floor of any path: --ps and --window are not used)",
         NULL, 0, 0},
        {"tls-ca", SS_FLAG_STRING, &tls_ca,
         "PEM CA bundle that signed the PS's certificate: TLS to the PS, gRPC and bulk alike "
         "(\"\" = plain TCP)",
         NULL, 0, 0},
        {"tls-cert", SS_FLAG_STRING, &tls_cert, "PEM client certificate for mutual TLS", NULL, 0,
         0},
        {"tls-key", SS_FLAG_STRING, &tls_key, "PEM private key of --tls-cert", NULL, 0, 0},
        {"shard-map", SS_FLAG_STRING, &map,
         "a shard map file: its PS list replaces --ps, and the calls carry its epoch, as a "
         "trainer's with shard_map (\"\" = none)",
         NULL, 0, 0},
    };
    int exit_code = ss__flags_cli(&program, flags, sizeof flags / sizeof *flags, argc, argv);
    if (exit_code >= 0)
        return exit_code;
    if (echo)
        return run_echo(floats, reps, warmup, chunk, window);
    if (tcp_echo)
        return run_tcp_echo(floats, reps, warmup, chunk);
    const ss__rpc_tls tls = {.ca_file = *tls_ca ? tls_ca : NULL,
                             .cert_file = *tls_cert ? tls_cert : NULL,
                             .key_file = *tls_key ? tls_key : NULL};
    ss__grpc_transport_config cfg = {.targets = ps,
                                     .timeout_ms = 60000,
                                     .chunk_floats = (size_t)chunk,
                                     .window = (uint32_t)window,
                                     .tls = *tls_ca ? &tls : NULL,
                                     .bulk = bulk};
    ss__transport *t;
    char why[400] = "";
    ss_status st = *map ? ss__recut_transport_create(map, &cfg, &t, why, sizeof why)
                        : ss__grpc_transport_create(&cfg, &t, why, sizeof why);
    size_t n = (size_t)floats;
    float *s = malloc(n * sizeof *s), *d = malloc(n * sizeof *d);
    uint64_t m;
    /* A group per size and chunking: one PS serves every run of a script,
     * and it refuses a chunk that overlaps another cut of the same group. */
    char group[64];
    snprintf(group, sizeof group, "bench-%zu-%lld", n, (long long)chunk);
    if (st != SS_OK || !s || !d || (st = ss__transport_join(t, group, n, &m)) != SS_OK) {
        fprintf(stderr, "shadowsync-bench-rpc: %s%s%s\n", ss_strerror(st ? st : SS_ERR_NO_MEMORY),
                *why || *ss__rpc_last_failure() ? ": " : "", *why ? why : ss__rpc_last_failure());
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        s[i] = (float)(i % 977) * 1e-3f;
    for (int64_t r = 0; st == SS_OK && r < warmup; r++)
        st = ss__transport_easgd_exchange(t, group, m, s, 0.5f, d, n);
    double *round_ms = calloc((size_t)reps, sizeof *round_ms);
    uint64_t t0 = ss__now_ns(), last = t0;
    for (int64_t r = 0; st == SS_OK && round_ms && r < reps; r++) {
        st = ss__transport_easgd_exchange(t, group, m, s, 0.5f, d, n);
        uint64_t now = ss__now_ns();
        round_ms[r] = (double)(now - last) * 1e-6;
        last = now;
    }
    double sec = (double)(last - t0) * 1e-9;
    if (st == SS_OK && !round_ms)
        st = SS_ERR_NO_MEMORY;
    if (st != SS_OK) {
        fprintf(stderr, "shadowsync-bench-rpc: round failed: %s\n", ss_strerror(st));
        free(round_ms);
        return 1;
    }
    double bytes = 8.0 * (double)n * (double)reps;
    qsort(round_ms, (size_t)reps, sizeof *round_ms, by_value);
    printf("rpc-bench: floats=%zu reps=%lld round_ms=%.3f goodput_gbit_s=%.3f window=%u "
           "round_p50_ms=%.3f round_p99_ms=%.3f\n",
           n, (long long)reps, 1e3 * sec / (double)reps, bytes * 8e-9 / sec,
           ss__grpc_transport_window(t), round_ms[reps / 2], round_ms[reps * 99 / 100]);
    free(round_ms);
    ss__transport_leave(t, group, m);
    ss__transport_destroy(t);
    free(s);
    free(d);
    return 0;
}
