/* rpc/bulk/bulk_server.c's doors, each against its attack on a real
 * shadowsync-ps (the attacker dials from 127.0.0.2 and up, the honest
 * client from 127.0.0.1), each checked by what must keep working
 * during it: /healthz, gRPC, an honest writer's stream.
 *  - a ticket dripped a byte a second, and a TLS handshake dripped the
 *    same way: closed within the deadline in all, not per read;
 *  - hundreds of silent connections from many addresses, the PS's
 *    RLIMIT_NOFILE at 256: they get a few places per address and in all,
 *    the PS's file descriptors stay within its limit;
 *  - announced frames, a few KiB of them sent, then nothing: they hold
 *    only what arrived of the bytes in flight;
 *  - one writer taking 300 tickets: another still gets one, and the
 *    hoarder's oldest is gone;
 *  - the acceptor out of file descriptors (EMFILE): it waits instead of
 *    spinning, and accepts again once there are some. */
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check_run.h"
#include "common/clock.h"
#include "common/fd_io.h"
#include "common/names.h"
#include "http_client.h"
#include "ports.h"
#include "procs.h"
#include "rpc/bulk/bulk.h"
#include "rpc/bulk/bulk.pb-c.h"
#include "rpc/dense/dense_sync.pb-c.h"
#include "rpc/dense/dense_wire.h"
#include "rpc/dense/grpc_transport.h"
#include "rpc/rpc.h"
#include "rpc/rpc_pb.h"
#include "transport_checks.h"

typedef struct ps_proc {
    pid_t pid;
    char target[64], bulk[64], base[80], log[128];
} ps_proc;

/* shadowsync-ps with a bulk port and an HTTP port, and more flags. */
static void start_ps(ps_proc *ps, const char *name, char *const more[]) {
    snprintf(ps->log, sizeof ps->log, "/tmp/ss-test-doors-%s-%d.log", name, (int)getpid());
    char *args[20] = {"--max-group-floats", "100000", "--bulk-listen",
                      "127.0.0.1:0",        "--http", "127.0.0.1:0"};
    int n = 6;
    for (int i = 0; more && more[i]; i++)
        args[n++] = more[i];
    args[n] = NULL;
    ps->pid = proc_start_ps(ps->log, ps->target, sizeof ps->target, "127.0.0.1:0", args);
    proc_address_after(ps->log, "bulk on", ps->bulk, sizeof ps->bulk);
    char http[64];
    proc_address_after(ps->log, "http on", http, sizeof http);
    snprintf(ps->base, sizeof ps->base, "http://%s", http);
}

static void stop_ps(ps_proc *ps) {
    kill(ps->pid, SIGTERM);
    ck_assert_int_eq(proc_wait(ps->pid, 30), 0);
    unlink(ps->log);
}

/* Whether the server closed fd (its end or a reset seen) within ms. */
static bool closed_within(int fd, int ms) {
    struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pf, 1, ms) <= 0)
        return false;
    uint8_t byte;
    const ssize_t k = recv(fd, &byte, 1, MSG_DONTWAIT);
    return k == 0 || (k < 0 && errno == ECONNRESET);
}

static int in_log(const ps_proc *ps, const char *what) {
    char *log = proc_read(ps->log);
    int k = 0;
    for (const char *p = log; (p = strstr(p, what)); p++)
        k++;
    free(log);
    return k;
}

/* What must keep working during an attack: /healthz, gRPC (joins) and
 * an honest writer's bulk stream (the exchanges: on the stream, as the
 * batch count says). */
static void check_all_serve(const ps_proc *ps, const char *what) {
    ck_assert_msg(http_request(ps->base, "/healthz", NULL, NULL, 0, NULL) == 200,
                  "%s: /healthz did not answer 200", what);
    ss__grpc_transport_config cfg = {
        .targets = ps->target, .timeout_ms = 10000, .chunk_floats = 100000, .bulk = true};
    ss__transport *t;
    ck_assert_int_eq(ss__grpc_transport_create(&cfg, &t, NULL, 0), SS_OK);
    check_easgd_by_hand(t, what);
    ck_assert_msg(ss__grpc_transport_bulk_batches(t) == 2, "%s: %llu batches on the stream of 2",
                  what, (unsigned long long)ss__grpc_transport_bulk_batches(t));
    ss__transport_destroy(t);
}

/* A byte of fd's ticket (or TLS handshake) each second until the server
 * closes it; how many seconds that took (give_up: it never did). */
static int drip_until_closed(int fd, int give_up) {
    /* a TLS handshake record's head, 512 bytes to come (a ticket's bytes
     * as good as any) */
    const uint8_t record[16] = {0x16, 0x03, 0x01, 0x02, 0x00};
    for (int s = 0; s < give_up; s++) {
        if (send(fd, &record[s % 16], 1, MSG_NOSIGNAL) != 1 || closed_within(fd, 1000))
            return s + 1;
    }
    return give_up;
}

typedef struct drip {
    const char *target;
    int took;
} drip;

static void *drip_main(void *p) {
    drip *d = p;
    int fd = test_connect("127.0.0.2", d->target);
    d->took = drip_until_closed(fd, 12);
    close(fd);
    return NULL;
}

/* A ticket dripped, and a TLS handshake dripped (a PS whose bulk port
 * has TLS): each closed within the 5 s the server gives a connection in
 * all (not a 5 s wait per read, which a byte a second never hits), while
 * the PS serves the honest. */
START_TEST(test_a_dripped_ticket_or_handshake_is_closed_in_all) {
    char dir[64], pem[2][128], cmd[300];
    ss__check_tmpdir(dir, "ss-doors-tls");
    snprintf(cmd, sizeof cmd, "bash %s/make_certs.sh %s", SS_TESTS_DIR, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(pem[0], sizeof pem[0], "%s/server.pem", dir);
    snprintf(pem[1], sizeof pem[1], "%s/server.key", dir);
    ps_proc plain, tls;
    start_ps(&plain, "plain", NULL);
    char *tls_args[] = {"--tls-cert", pem[0], "--tls-key", pem[1], NULL};
    start_ps(&tls, "tls", tls_args);
    drip d[2] = {{plain.bulk, 0}, {tls.bulk, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, drip_main, &d[i]);
    sleep(2);
    check_all_serve(&plain, "dripped");
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    ck_assert_msg(d[0].took <= 9, "a dripped ticket was open %d s", d[0].took);
    ck_assert_msg(d[1].took <= 9, "a dripped TLS handshake was open %d s", d[1].took);
    ck_assert_int_eq(in_log(&plain, "reason=ticket_deadline"), 1);
    ck_assert_int_eq(in_log(&tls, "reason=ticket_deadline"), 1);
    stop_ps(&plain);
    stop_ps(&tls);
    ss__check_rmdir(dir);
}
END_TEST

static int open_fds(pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

/* 240 silent connections from 20 addresses against a PS whose
 * RLIMIT_NOFILE is 256 (2 file descriptors a stream and a slot for each
 * took all of them, and the acceptor spun on EMFILE): each address gets
 * a few places (the rest are closed at once), the oldest waiting ones
 * make room for new ones past 64, the PS keeps file descriptors for gRPC
 * and HTTP, and the honest client's stream opens. */
START_TEST(test_silent_connections_under_a_low_fd_limit) {
    struct rlimit was, low;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &was), 0);
    low = (struct rlimit){256, was.rlim_max};
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    ps_proc ps;
    start_ps(&ps, "fds", NULL);
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &was), 0);
    enum { SOURCES = 20, EACH = 12 };
    int fds[SOURCES * EACH];
    for (int i = 0; i < SOURCES; i++) {
        char src[32];
        snprintf(src, sizeof src, "127.0.0.%d", 2 + i);
        for (int k = 0; k < EACH; k++)
            fds[i * EACH + k] = test_connect(src, ps.bulk);
    }
    usleep(300 * 1000);
    check_all_serve(&ps, "silent");
    const int held = open_fds(ps.pid);
    ck_assert_msg(held < 200, "the PS holds %d file descriptors of 256", held);
    ck_assert_int_ge(in_log(&ps, "reason=unticketed_source"), 1);
    ck_assert_int_ge(in_log(&ps, "reason=unticketed_evicted"), 1);
    for (int i = 0; i < SOURCES * EACH; i++)
        close(fds[i]);
    stop_ps(&ps);
}
END_TEST

/* A ticket over gRPC, as a client asks for one. */
static void ticket_of(ss__rpc_channel *ch, uint8_t t[SS_BULK_TICKET_BYTES]) {
    Shadowsync__V1__BulkTicketRequest req = SHADOWSYNC__V1__BULK_TICKET_REQUEST__INIT;
    ProtobufCMessage *r;
    ck_assert_int_eq(ss__rpc_call_message(ch, SS_BULK_M_TICKET, &req.base, 5000, false,
                                          &shadowsync__v1__bulk_ticket_reply__descriptor, &r, NULL,
                                          0),
                     SS_OK);
    memcpy(t, ((const Shadowsync__V1__BulkTicketReply *)r)->ticket.data, SS_BULK_TICKET_BYTES);
    protobuf_c_message_free_unpacked(r, NULL);
}

/* A frame's head announcing len bytes of EasgdExchange, on a new stream. */
static int stalled_frame(const ps_proc *ps, uint64_t len, size_t sent) {
    ss__rpc_channel *ch;
    ck_assert_int_eq(ss__rpc_channel_create(ps->target, 0, NULL, &ch, NULL, 0), SS_OK);
    uint8_t t[SS_BULK_TICKET_BYTES];
    ticket_of(ch, t);
    ss__rpc_channel_destroy(ch);
    int fd = test_connect("127.0.0.2", ps->bulk);
    ck_assert(ss__write_all(fd, t, sizeof t));
    uint8_t h[SS_BULK_REQ_HEAD + sizeof SS_DENSE_M_EASGD]; /* one write, head and path */
    ss__bulk_request_head(h, (uint32_t)strlen(SS_DENSE_M_EASGD), len);
    memcpy(h + SS_BULK_REQ_HEAD, SS_DENSE_M_EASGD, strlen(SS_DENSE_M_EASGD));
    ck_assert(ss__write_all(fd, h, SS_BULK_REQ_HEAD + strlen(SS_DENSE_M_EASGD)));
    static uint8_t some[4096];
    ck_assert(ss__write_all(fd, some, sent));
    return fd;
}

/* Four writers announce 390 KB frames (within the method's limit), send
 * 4 KiB and stall, against --max-inflight-mb 1: the bytes in flight count
 * what arrived (16 KiB), not what was announced (1.5 MB, which closed
 * every other stream), and the honest writer's 400 KB frames go. */
START_TEST(test_stalled_frames_hold_only_what_arrived) {
    ps_proc ps;
    char *more[] = {"--max-inflight-mb", "1", NULL};
    start_ps(&ps, "stall", more);
    int fds[4];
    for (int i = 0; i < 4; i++)
        fds[i] = stalled_frame(&ps, 390000, 4096);
    usleep(200 * 1000);
    check_all_serve(&ps, "stalled");
    ss__grpc_transport_config cfg = {
        .targets = ps.target, .timeout_ms = 10000, .chunk_floats = 100000, .bulk = true};
    ss__transport *t;
    ck_assert_int_eq(ss__grpc_transport_create(&cfg, &t, NULL, 0), SS_OK);
    enum { N = 100000 };
    uint64_t m;
    ck_assert_int_eq(ss__transport_join(t, "big", N, &m), SS_OK);
    static float s[N], d[N];
    for (int i = 0; i < N; i++)
        s[i] = (float)(i % 5);
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "big", m, s, 0.5f, d, N), SS_OK);
    ck_assert_uint_eq(ss__grpc_transport_bulk_batches(t), 1);
    ss__transport_destroy(t);
    ck_assert_int_eq(in_log(&ps, "reason=inflight"), 0);
    for (int i = 0; i < 4; i++)
        close(fds[i]);
    stop_ps(&ps);
}
END_TEST

/* Whether a stream opened with t is served: the server says it took the
 * ticket (bulk.h), or closes the stream. */
static bool ticket_opens(const ps_proc *ps, const uint8_t t[SS_BULK_TICKET_BYTES]) {
    int fd = test_connect("127.0.0.1", ps->bulk);
    ck_assert(ss__write_all(fd, t, SS_BULK_TICKET_BYTES));
    uint8_t opened[SS_BULK_OPENED_BYTES];
    const bool ok = ss__read_all(fd, opened, sizeof opened) && ss__bulk_opened_parse(opened);
    ck_assert(ok || closed_within(fd, 10000));
    close(fd);
    return ok;
}

/* One writer asks for 300 tickets (256 can be out): the honest writer
 * still gets one and its stream opens; the hoarder keeps its newest few,
 * its oldest are gone. */
START_TEST(test_one_writer_cannot_hoard_tickets) {
    ps_proc ps;
    start_ps(&ps, "hoard", NULL);
    ss__rpc_channel *ch;
    ck_assert_int_eq(ss__rpc_channel_create(ps.target, 0, NULL, &ch, NULL, 0), SS_OK);
    static uint8_t hoard[300][SS_BULK_TICKET_BYTES];
    for (int i = 0; i < 300; i++)
        ticket_of(ch, hoard[i]);
    check_all_serve(&ps, "hoarded");
    ck_assert(!ticket_opens(&ps, hoard[0]));
    ck_assert(ticket_opens(&ps, hoard[299]));
    char *metrics = NULL;
    ck_assert_int_eq(http_request(ps.base, "/metrics", NULL, NULL, 0, &metrics), 200);
    ck_assert_double_ge(metric_sum(metrics, "shadowsync_bulk_tickets_evicted_total", NULL), 268);
    free(metrics);
    ss__rpc_channel_destroy(ch);
    stop_ps(&ps);
}
END_TEST

static void answer_nothing(void *ctx, const uint8_t *req, size_t len, ss__rpc_reply *reply) {
    (void)ctx, (void)req, (void)len, (void)reply;
}

/* The acceptor of an in-process server with the process out of file
 * descriptors: the connection waits in the listen queue and the acceptor
 * backs off (a few times a second, not a spinning core); once some are
 * free it is accepted (its forged ticket then refused). */
START_TEST(test_the_acceptor_waits_out_of_fds) {
    const ss__rpc_method methods[] = {
        {"/t.T/Nothing", answer_nothing, false, NULL, false, 0, NULL, false, true}};
    const ss__bulk_server_config cfg = {.listen = "127.0.0.1:0", .max_message = 64};
    ss__bulk_server *s;
    char why[200];
    ck_assert_int_eq(ss__bulk_server_start(&cfg, methods, 1, NULL, &s, why, sizeof why), SS_OK);
    char target[32];
    snprintf(target, sizeof target, "127.0.0.1:%d", ss__bulk_server_port(s));
    int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct rlimit was;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &was), 0);
    const struct rlimit low = {128, was.rlim_max};
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    int filler[128], nfill = 0;
    while (nfill < 128 && (filler[nfill] = dup(client)) >= 0)
        nfill++;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(ss__bulk_server_port(s))};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    const int connected = connect(client, (struct sockaddr *)&a, sizeof a);
    const uint64_t before = ss__bulk_server_backoffs(s);
    sleep(2);
    const uint64_t waited = ss__bulk_server_backoffs(s) - before;
    for (int i = 0; i < nfill; i++)
        close(filler[i]);
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &was), 0);
    ck_assert_int_eq(connected, 0);
    ck_assert_msg(waited >= 1 && waited <= 40, "the acceptor tried %llu times in 2 s",
                  (unsigned long long)waited);
    const uint8_t forged[SS_BULK_TICKET_BYTES] = {7};
    ck_assert(ss__write_all(client, forged, sizeof forged));
    ck_assert(closed_within(client, 10000));
    ck_assert_uint_eq(ss__bulk_server_refused(s), 1);
    close(client);
    ss__bulk_server_stop(s);
}
END_TEST

/* The places for connections without a ticket from one address are all
 * taken (by connections that say nothing, or by the same host's other
 * clients opening theirs at once): the writer's new stream is closed
 * before it opens, and its call goes over gRPC instead of failing (it
 * failed, SS_ERR_IO, when a call went out on a stream the server had
 * not taken); once there is room, its calls go on a stream again. */
START_TEST(test_a_source_out_of_places_calls_over_grpc) {
    ps_proc ps;
    start_ps(&ps, "places", NULL);
    enum { PLACES = 8 }; /* bulk_server.c's per source */
    int fds[PLACES];
    for (int i = 0; i < PLACES; i++)
        fds[i] = test_connect("127.0.0.1", ps.bulk);
    /* one more is closed at once: the places are taken (the acceptor
     * takes connections in order) */
    int more = test_connect("127.0.0.1", ps.bulk);
    ck_assert(closed_within(more, 5000));
    close(more);
    uint64_t m;
    float d[2];
    ss__transport *t = stream_member(ps.target, 10000, 100000, &m);
    ck_assert_uint_eq(ss__grpc_transport_bulk_batches(t), 0);
    ck_assert_int_ge(in_log(&ps, "reason=unticketed_source"), 1);
    for (int i = 0; i < PLACES; i++)
        close(fds[i]);
    usleep(1100 * 1000); /* the client's first wait before it tries a stream again */
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "g", m, (const float[]){1, 2}, 0.5f, d, 2),
                     SS_OK);
    ck_assert_uint_eq(ss__grpc_transport_bulk_batches(t), 1);
    ss__transport_destroy(t);
    stop_ps(&ps);
}
END_TEST

SS_CHECK_MAIN("bulk_doors", 90, NULL, NULL, test_a_dripped_ticket_or_handshake_is_closed_in_all,
              test_silent_connections_under_a_low_fd_limit,
              test_stalled_frames_hold_only_what_arrived, test_one_writer_cannot_hoard_tickets,
              test_the_acceptor_waits_out_of_fds, test_a_source_out_of_places_calls_over_grpc)
