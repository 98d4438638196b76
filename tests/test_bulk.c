/* rpc/bulk/bulk.h: the bulk stream beside gRPC. Its frames by hand; S-EASGD
 * through a real shadowsync-ps with --bulk-listen (the same values as
 * over gRPC); the door: a stream without a live ticket, a used ticket, a
 * frame past its limit, each closed before anything is read or run;
 * frames the socket takes in parts, and a reply read into its place; a PS
 * without a bulk port (the client stays on gRPC); NaN refused by the
 * method's own check; a PS that dies mid-run (the calls fail, not hang). */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
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
#include "rpc/emb/emb_client.h"
#include "rpc/rpc.h"
#include "rpc/rpc_pb.h"
#include "transport_checks.h"

START_TEST(test_frames_by_hand) {
    uint8_t h[SS_BULK_REQ_HEAD];
    ss__bulk_request_head(h, 12, 0x0102030405ull);
    const uint8_t want[SS_BULK_REQ_HEAD] = {'S', 'S', 'B', '2', 12, 0, 0, 0,
                                            5,   4,   3,   2,   1,  0, 0, 0};
    ck_assert(memcmp(h, want, sizeof want) == 0);
    uint32_t path_len;
    uint64_t len;
    ck_assert_int_eq(ss__bulk_request_parse(h, 0x0102030405ull, &path_len, &len), SS_OK);
    ck_assert_uint_eq(path_len, 12);
    ck_assert_uint_eq(len, 0x0102030405ull);
    /* one byte past the largest limit */
    ck_assert_int_eq(ss__bulk_request_parse(h, 0x0102030404ull, &path_len, &len), SS_ERR_PARSE);
    ss__bulk_request_head(h, 0, 1); /* no path */
    ck_assert_int_eq(ss__bulk_request_parse(h, 10, &path_len, &len), SS_ERR_PARSE);
    ss__bulk_request_head(h, SS_BULK_PATH_MAX + 1, 1); /* a path past the longest */
    ck_assert_int_eq(ss__bulk_request_parse(h, 10, &path_len, &len), SS_ERR_PARSE);
    ss__bulk_request_head(h, SS_BULK_PATH_MAX, 1);
    ck_assert_int_eq(ss__bulk_request_parse(h, 10, &path_len, &len), SS_OK);
    h[0] = 'X';
    ck_assert_int_eq(ss__bulk_request_parse(h, 10, &path_len, &len), SS_ERR_PARSE);
    uint8_t r[SS_BULK_REPLY_HEAD];
    ss_status st;
    uint32_t msg_len;
    ss__bulk_reply_head(r, SS_ERR_NON_FINITE, 7, 0);
    ck_assert_int_eq(ss__bulk_reply_parse(r, 10, &st, &msg_len, &len), SS_OK);
    ck_assert_int_eq(st, SS_ERR_NON_FINITE);
    ck_assert_uint_eq(msg_len, 7);
    ss__bulk_reply_head(r, SS_OK, SS_BULK_MESSAGE_MAX + 1, 0);
    ck_assert_int_eq(ss__bulk_reply_parse(r, 10, &st, &msg_len, &len), SS_ERR_PARSE);
    ss__bulk_reply_head(r, SS_OK, 0, 11);
    ck_assert_int_eq(ss__bulk_reply_parse(r, 10, &st, &msg_len, &len), SS_ERR_PARSE);
    ss__bulk_reply_head(r, (ss_status)SS_STATUS_COUNT_, 0, 0);
    ck_assert_int_eq(ss__bulk_reply_parse(r, 10, &st, &msg_len, &len), SS_ERR_PARSE);
}
END_TEST

/* The client's side of a server that misbehaves: a reply longer than the
 * stream's bound breaks the stream before anything is allocated for it
 * (fuzz_bulk found a 2 GiB allocation from 20 bytes); one within it is
 * taken. */
START_TEST(test_a_reply_past_the_bound) {
    for (int over = 0; over < 2; over++) {
        int sv[2];
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
        uint8_t h[SS_BULK_REPLY_HEAD];
        ss__bulk_reply_head(h, SS_OK, 0, over ? 11 : 10);
        ck_assert(ss__write_all(sv[1], h, sizeof h));
        ck_assert(ss__write_all(sv[1], "0123456789x", over ? 11 : 10));
        shutdown(sv[1], SHUT_WR);
        ss__bulk_stream *b;
        ck_assert_int_eq(ss__bulk_stream_wrap(sv[0], 10, &b), SS_OK);
        const uint8_t req[4] = {1, 2, 3, 4};
        ss__rpc_request rq = {.method = "/t.T/M", .req = req, .len = sizeof req};
        ck_assert_int_eq(ss__bulk_call_many(b, &rq, 1, NULL, 0, 1), (over ? SS_ERR_IO : SS_OK));
        if (over) {
            ck_assert_ptr_null(rq.resp);
            ck_assert_str_eq(rq.msg, "the bulk stream broke");
        } else {
            ck_assert_uint_eq(rq.resp_len, 10);
            ck_assert(memcmp(rq.resp, "0123456789", 10) == 0);
        }
        free(rq.resp);
        ss__bulk_stream_close(b);
        close(sv[1]);
    }
}
END_TEST

/* The far end of a socketpair for the two tests below: reads each frame
 * whole and answers with its body's sum (8 bytes), or, with shaped, with
 * a message whose last field is bytes field 1 (a LookupReply) holding the
 * body's first 64 bytes, after a varint field 2 when the body's first
 * byte is odd. */
typedef struct peer {
    int fd;
    int frames;
    bool shaped;
} peer;

static void *answer_frames(void *arg) {
    peer *p = arg;
    uint8_t *body = NULL;
    for (int i = 0; i < p->frames; i++) {
        uint8_t h[SS_BULK_REQ_HEAD], r[SS_BULK_REPLY_HEAD], out[80];
        char path[SS_BULK_PATH_MAX];
        uint32_t path_len;
        uint64_t len, sum = 0;
        size_t n = 0;
        if (!ss__read_all(p->fd, h, sizeof h) ||
            ss__bulk_request_parse(h, UINT64_MAX, &path_len, &len) != SS_OK ||
            !ss__read_all(p->fd, path, path_len) || !(body = realloc(body, len + 1)) ||
            !ss__read_all(p->fd, body, len))
            break;
        for (uint64_t k = 0; k < len; k++)
            sum += body[k] * (k + 1);
        if (!p->shaped) {
            memcpy(out, &sum, sizeof sum);
            n = sizeof sum;
        } else {
            if (body[0] & 1) {
                out[n++] = 2 << 3; /* field 2, varint 7 */
                out[n++] = 7;
            }
            out[n++] = 1 << 3 | 2; /* field 1, 64 bytes */
            out[n++] = 64;
            memcpy(out + n, body, 64);
            n += 64;
        }
        ss__bulk_reply_head(r, SS_OK, 0, n);
        if (!ss__write_all(p->fd, r, sizeof r) || !ss__write_all(p->fd, out, n))
            break;
    }
    free(body);
    shutdown(p->fd, SHUT_RDWR); /* a frame cut wrong ends the client's wait */
    return NULL;
}

/* A stream to a peer that answers p->frames frames (answer_frames). */
static ss__bulk_stream *stream_to_peer(peer *p, pthread_t *th, size_t max_reply) {
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    p->fd = sv[1];
    ck_assert_int_eq(pthread_create(th, NULL, answer_frames, p), 0);
    ss__bulk_stream *b;
    ck_assert_int_eq(ss__bulk_stream_wrap(sv[0], max_reply, &b), SS_OK);
    return b;
}

static void end_peer(peer *p, pthread_t th, ss__bulk_stream *b) {
    pthread_join(th, NULL);
    ss__bulk_stream_close(b);
    close(p->fd);
}

/* Frames bigger than the socket takes at once: the caller's thread sends
 * what fits, and the writer thread goes on from the middle of a frame
 * (head, request and payload cut anywhere). Every frame reaches the peer
 * whole, in order: its sum comes back right. */
START_TEST(test_frames_resumed_mid_way) {
    enum { CALLS = 6, BIG = 3 << 20 };
    peer p = {-1, CALLS, false};
    pthread_t th;
    ss__bulk_stream *b = stream_to_peer(&p, &th, 64);
    uint8_t *data = malloc(BIG);
    for (size_t k = 0; k < BIG; k++)
        data[k] = (uint8_t)(k * 7 + k / 255);
    ss__rpc_request rq[CALLS] = {{0}};
    uint64_t want[CALLS] = {0};
    for (int i = 0; i < CALLS; i++) {
        const size_t len = 5 + 1000 * i, payload = i % 2 ? BIG - 77 * i : 0;
        rq[i] = (ss__rpc_request){.method = i % 2 ? "/t.T/Long" : "/t.T/M",
                                  .req = data + i,
                                  .len = len,
                                  .payload = data + 3 * i,
                                  .payload_len = payload};
        for (size_t k = 0; k < len + payload; k++)
            want[i] += (k < len ? data[i + k] : data[3 * i + k - len]) * (k + 1);
    }
    ck_assert_int_eq(ss__bulk_call_many(b, rq, CALLS, NULL, 0, 1), SS_OK);
    for (int i = 0; i < CALLS; i++) {
        uint64_t got;
        ck_assert_uint_eq(rq[i].resp_len, sizeof got);
        memcpy(&got, rq[i].resp, sizeof got);
        ck_assert_uint_eq(got, want[i]);
        free(rq[i].resp);
    }
    end_peer(&p, th, b);
    free(data);
}
END_TEST

/* A reply read straight into the caller's place (ss__rpc_request's into):
 * only when its last field is into_field of into_len bytes. Otherwise it
 * takes the ordinary way (resp), the place untouched: another field
 * number, another length, no into. */
START_TEST(test_a_reply_read_into_place) {
    enum { CASES = 5 };
    peer p = {-1, CASES, true};
    pthread_t th;
    ss__bulk_stream *b = stream_to_peer(&p, &th, 1024);
    uint8_t body[CASES][64], place[CASES][64];
    /* odd first byte: a field 2 before the rows */
    const uint8_t first[CASES] = {2, 3, 2, 2, 2};
    const uint32_t field[CASES] = {1, 1, 2, 1, 0};
    const size_t into_len[CASES] = {64, 64, 64, 63, 64};
    ss__rpc_request rq[CASES] = {{0}};
    memset(place, 0xAB, sizeof place);
    for (int i = 0; i < CASES; i++) {
        for (int k = 0; k < 64; k++)
            body[i][k] = (uint8_t)(i * 64 + k);
        body[i][0] = first[i];
        rq[i] = (ss__rpc_request){.method = "/t.T/M", .req = body[i], .len = 64};
        if (field[i])
            rq[i] = (ss__rpc_request){.method = "/t.T/M",
                                      .req = body[i],
                                      .len = 64,
                                      .into = place[i],
                                      .into_len = into_len[i],
                                      .into_field = field[i]};
    }
    ck_assert_int_eq(ss__bulk_call_many(b, rq, CASES, NULL, 0, 1), SS_OK);
    for (int i = 0; i < CASES; i++) {
        const bool straight = field[i] == 1 && into_len[i] == 64;
        ck_assert_msg(straight == !rq[i].resp, "case %d", i);
        if (straight) {
            ck_assert(memcmp(place[i], body[i], 64) == 0);
        } else {
            const size_t pre = first[i] & 1 ? 2 : 0;
            ck_assert_uint_eq(rq[i].resp_len, pre + 2 + 64);
            ck_assert(memcmp(rq[i].resp + pre + 2, body[i], 64) == 0);
            for (int k = 0; k < 64; k++)
                ck_assert_uint_eq(place[i][k], 0xAB);
        }
        free(rq[i].resp);
    }
    end_peer(&p, th, b);
}
END_TEST

static pid_t ps_pid;
static char ps_target[64], bulk_target[64], ps_log[128];

/* shadowsync-ps with its bulk port (its default, beside --listen), or
 * without (bulk false: --bulk-listen ""). */
static void start_ps(bool bulk) {
    snprintf(ps_log, sizeof ps_log, "/tmp/ss-test-bulk-%d.log", (int)getpid());
    char *with[] = {"--max-group-floats", "100000", NULL};
    char *without[] = {"--max-group-floats", "100000", "--bulk-listen", "", NULL};
    ps_pid =
        proc_start_ps(ps_log, ps_target, sizeof ps_target, "127.0.0.1:0", bulk ? with : without);
    if (bulk)
        proc_address_after(ps_log, "bulk on", bulk_target, sizeof bulk_target);
}

static void stop_ps(void) {
    kill(ps_pid, SIGTERM);
    ck_assert_int_eq(proc_wait(ps_pid, 30), 0); /* exit 0: a graceful stop */
    unlink(ps_log);
}

static ss__transport *bulk_transport(void) {
    ss__transport *t;
    ss__grpc_transport_config cfg = {
        .targets = ps_target, .timeout_ms = 5000, .chunk_floats = 100, .bulk = true};
    ck_assert_int_eq(ss__grpc_transport_create(&cfg, &t, NULL, 0), SS_OK);
    return t;
}

/* S-EASGD on the bulk stream: the by-hand values every transport gives,
 * then a group of 1,000 floats in 10 chunks against the same group over
 * gRPC: the same deltas, bit for bit. */
START_TEST(test_easgd_on_the_stream_as_over_grpc) {
    start_ps(true);
    ss__transport *b = bulk_transport();
    check_easgd_by_hand(b, "hand");
    enum { N = 1000 };
    ss__grpc_transport_config gcfg = {
        .targets = ps_target, .timeout_ms = 5000, .chunk_floats = 100};
    ss__transport *g;
    ck_assert_int_eq(ss__grpc_transport_create(&gcfg, &g, NULL, 0), SS_OK);
    uint64_t mb, mg;
    ck_assert_int_eq(ss__transport_join(b, "on-bulk", N, &mb), SS_OK);
    ck_assert_int_eq(ss__transport_join(g, "on-grpc", N, &mg), SS_OK);
    static float s[N], db[N], dg[N];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++)
            s[i] = sinf((float)(i + 7 * round));
        ck_assert_int_eq(ss__transport_easgd_exchange(b, "on-bulk", mb, s, 0.3f, db, N), SS_OK);
        ck_assert_int_eq(ss__transport_easgd_exchange(g, "on-grpc", mg, s, 0.3f, dg, N), SS_OK);
        ck_assert(memcmp(db, dg, sizeof db) == 0);
    }
    ck_assert_float_ne(db[5], 0.0f);
    ck_assert_uint_eq(ss__grpc_transport_bulk_batches(b), 2 + 3); /* by hand: 2; here: 3 */
    ck_assert_uint_eq(ss__grpc_transport_bulk_batches(g), 0);
    /* NaN: the method's own check refuses it, on the stream as over gRPC */
    s[17] = NAN;
    ck_assert_int_eq(ss__transport_easgd_exchange(b, "on-bulk", mb, s, 0.3f, db, N),
                     SS_ERR_NON_FINITE);
    ck_assert_float_eq(db[17], 0.0f);
    ss__transport_destroy(b);
    ss__transport_destroy(g);
    /* routed by a shard map (an epoch) to a PS that has none: served on
     * the stream, as the gRPC door serves it (test_a_stream_lives_in_its_epoch) */
    ss__grpc_transport_config ecfg = {
        .targets = ps_target, .timeout_ms = 5000, .chunk_floats = 100, .bulk = true, .epoch = 3};
    ck_assert_int_eq(ss__grpc_transport_create(&ecfg, &b, NULL, 0), SS_OK);
    check_easgd_by_hand(b, "by-map");
    ck_assert_uint_eq(ss__grpc_transport_bulk_batches(b), 2);
    ss__transport_destroy(b);
    char *log = proc_read(ps_log);
    ck_assert_ptr_null(strstr(log, "stream_refused"));
    free(log);
    stop_ps();
}
END_TEST

/* The mean of the members' starting values in the test below. */
static double k_mean(int i) {
    return i % 7;
}

/* MA rounds of 3 engines, each member's chunks on its own bulk streams:
 * the replicas agree on the mean (member k of 0, 1, 2 starts at k (i %
 * 7): mean i % 7), as over gRPC; then S-BMUF rounds without momentum
 * (block rate 1: the mean too). */
START_TEST(test_rounds_on_the_stream) {
    start_ps(true);
    enum { N = 1000 };
    ss__transport *t[3];
    ss__replica *r[3];
    round_arg args[3];
    for (int algo = 0; algo < 2; algo++) {
        ss__sync_params p = {.algo = algo ? SS_ALGO_BMUF : SS_ALGO_MA,
                             .bmuf = {.eta = 0.0f, .zeta = 1.0f}}; /* no momentum: the mean */
        for (int k = 0; k < 3; k++) {
            t[k] = bulk_transport();
            start_round_member(t[k], algo ? "bmuf" : "ma", &p, N, k, k_mean, &r[k], &args[k]);
        }
        run_rounds_together(args, 3, 3);
        double spread, off;
        replicas_agree(r, 3, N, k_mean, &spread, &off);
        ck_assert_msg(spread < 1e-5 && off < 1e-4, "%s: replicas %g apart, %g off the mean",
                      algo ? "bmuf" : "ma", spread, off);
        stop_round_members(args, r, 3);
        for (int k = 0; k < 3; k++) {
            ck_assert_uint_ge(ss__grpc_transport_bulk_batches(t[k]), 3);
            ss__transport_destroy(t[k]);
        }
    }
    stop_ps();
}
END_TEST

/* Whether the server closed fd: a read sees the end, or a reset (a
 * socket closed with bytes unread resets), not a reply nor the 10 s
 * timeout. */
static bool closed_by_server(int fd) {
    uint8_t byte;
    ssize_t k = read(fd, &byte, 1);
    return k == 0 || (k < 0 && errno == ECONNRESET);
}

/* Whether the server took the ticket sent on fd (it says so, bulk.h). */
static bool ticket_taken(int fd) {
    uint8_t opened[SS_BULK_OPENED_BYTES];
    return ss__read_all(fd, opened, sizeof opened) && ss__bulk_opened_parse(opened);
}

/* A ticket asked for as a client routed by the shard map's epoch asks
 * (0: by none). */
static void ticket_over_grpc(uint8_t t[SS_BULK_TICKET_BYTES], uint64_t epoch) {
    ss__rpc_channel *ch;
    ck_assert_int_eq(ss__rpc_channel_create(ps_target, 0, NULL, &ch, NULL, 0), SS_OK);
    ss__rpc_channel_set_epoch(ch, epoch);
    Shadowsync__V1__BulkTicketRequest req = SHADOWSYNC__V1__BULK_TICKET_REQUEST__INIT;
    req.epoch = epoch;
    ProtobufCMessage *r;
    ck_assert_int_eq(ss__rpc_call_message(ch, SS_BULK_M_TICKET, &req.base, 5000, false,
                                          &shadowsync__v1__bulk_ticket_reply__descriptor, &r, NULL,
                                          0),
                     SS_OK);
    const Shadowsync__V1__BulkTicketReply *tr = (const Shadowsync__V1__BulkTicketReply *)r;
    ck_assert_uint_eq(tr->ticket.len, SS_BULK_TICKET_BYTES);
    memcpy(t, tr->ticket.data, SS_BULK_TICKET_BYTES);
    protobuf_c_message_free_unpacked(r, NULL);
    ss__rpc_channel_destroy(ch);
}

/* How often the PS's log says what (its lines are written before the
 * stream they tell of is closed). */
static int count_in_log(const char *what) {
    char *log = proc_read(ps_log);
    int k = 0;
    for (const char *p = log; (p = strstr(p, what)); p++)
        k++;
    free(log);
    return k;
}

/* A frame's head and its method's path, for a request of len bytes, in
 * one write: the server may close the stream once it has read the head
 * (a second write would then meet the reset, SIGPIPE). */
static void send_frame(int fd, const char *method, uint64_t len) {
    uint8_t h[SS_BULK_REQ_HEAD + SS_BULK_PATH_MAX];
    const size_t n = strlen(method);
    ss__bulk_request_head(h, (uint32_t)n, len);
    memcpy(h + SS_BULK_REQ_HEAD, method, n);
    ck_assert(ss__write_all(fd, h, SS_BULK_REQ_HEAD + n));
}

/* The door: streams without a live ticket, with a used one, with a frame
 * past its limit or naming another method are closed, and the PS goes on
 * serving the stream that has a ticket. */
START_TEST(test_the_door_of_the_stream) {
    start_ps(true);
    /* no ticket: 16 bytes nobody gave out, then a frame: closed */
    int fd = test_connect(NULL, bulk_target);
    uint8_t forged[SS_BULK_TICKET_BYTES] = {1, 2, 3};
    ck_assert(ss__write_all(fd, forged, sizeof forged));
    ck_assert(!ticket_taken(fd));
    close(fd);
    ck_assert_int_eq(count_in_log("event=stream_refused reason=ticket"), 1);
    /* a ticket opens one stream: its frame is read (and this one, naming a
     * method the stream does not serve, closes it); the same ticket again
     * is refused before anything */
    uint8_t t[SS_BULK_TICKET_BYTES];
    ticket_over_grpc(t, 0);
    fd = test_connect(NULL, bulk_target);
    ck_assert(ss__write_all(fd, t, sizeof t));
    ck_assert(ticket_taken(fd));
    send_frame(fd, SS_DENSE_M_JOIN, 8); /* served over gRPC only */
    ck_assert(closed_by_server(fd));
    close(fd);
    ck_assert_int_eq(count_in_log("event=stream_closed reason=bad_frame"), 1);
    fd = test_connect(NULL, bulk_target);
    ck_assert(ss__write_all(fd, t, sizeof t));
    ck_assert(!ticket_taken(fd)); /* closed, not taken */
    close(fd);
    ck_assert_int_eq(count_in_log("event=stream_refused reason=ticket"), 2);
    /* a frame past the method's limit (100,000 floats), closed before its
     * bytes: none are sent */
    ticket_over_grpc(t, 0);
    fd = test_connect(NULL, bulk_target);
    ck_assert(ss__write_all(fd, t, sizeof t));
    ck_assert(ticket_taken(fd));
    send_frame(fd, SS_DENSE_M_EASGD, (uint64_t)1 << 40);
    ck_assert(closed_by_server(fd));
    close(fd);
    ck_assert_int_eq(count_in_log("event=stream_closed reason=bad_frame"), 2);
    /* and the PS still serves, on the stream and over gRPC */
    ss__transport *b = bulk_transport();
    check_easgd_by_hand(b, "after");
    ck_assert_uint_eq(ss__grpc_transport_bulk_batches(b), 2);
    ss__transport_destroy(b);
    stop_ps();
}
END_TEST

/* A PS without a bulk port (--bulk-listen ""): Bulk/Ticket is not served and the client
 * stays on gRPC; a PS that dies: the calls fail within the timeout. */
START_TEST(test_no_bulk_port_and_a_dead_ps) {
    start_ps(false);
    ss__transport *b = bulk_transport();
    check_easgd_by_hand(b, "grpc");
    ck_assert_uint_eq(ss__grpc_transport_bulk_batches(b), 0); /* all over gRPC */
    ss__transport_destroy(b);
    stop_ps();
    start_ps(true);
    b = bulk_transport();
    uint64_t m;
    enum { N = 1000 };
    static float s[N], d[N];
    ck_assert_int_eq(ss__transport_join(b, "g", N, &m), SS_OK);
    ck_assert_int_eq(ss__transport_easgd_exchange(b, "g", m, s, 0.5f, d, N), SS_OK);
    kill(ps_pid, SIGKILL);
    proc_wait(ps_pid, 10);
    unlink(ps_log);
    for (int i = 0; i < N; i++)
        d[i] = 1.0f;
    ck_assert_int_ne(ss__transport_easgd_exchange(b, "g", m, s, 0.5f, d, N), SS_OK);
    for (int i = 0; i < N; i++) /* nothing applied: zero (the contract) */
        ck_assert_float_eq(d[i], 0.0f);
    ss__transport_destroy(b);
}
END_TEST

/* shadowsync-ps with argv exits with code (2: a bad setting; 1: it
 * cannot start, as with a PEM file gRPC cannot load), saying says. */
static void ps_refuses(char *const argv[], int code, const char *says) {
    char log[64];
    snprintf(log, sizeof log, "/tmp/ss-test-bulk-refused-%d.log", (int)getpid());
    int status = proc_wait(proc_spawn(argv, log), 20);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == code);
    char *text = proc_read(log);
    ck_assert_msg(strstr(text, says), "said: %s", text);
    free(text);
    unlink(log);
}

/* --bulk-listen on a follower, with a certificate that does not load, or
 * without a port: refused, saying why. */
START_TEST(test_bulk_listen_refused_when_it_cannot_serve) {
    char *tls[] = {SHADOWSYNC_PS, "--listen",     "127.0.0.1:0", "--bulk-listen", "127.0.0.1:0",
                   "--tls-cert",  "/nonexistent", "--tls-key",   "/nonexistent",  NULL};
    ps_refuses(tls, 1, "TLS: cannot read the PEM file /nonexistent: ");
    char *follow[] = {SHADOWSYNC_PS, "--listen", "127.0.0.1:0",  "--bulk-listen",
                      "127.0.0.1:0", "--follow", "/nonexistent", NULL};
    ps_refuses(follow, 2, "not on a --follow replica");
    char *bad[] = {SHADOWSYNC_PS, "--listen", "127.0.0.1:0", "--bulk-listen", "127.0.0.1", NULL};
    ps_refuses(bad, 2, "--bulk-listen \"127.0.0.1\": no port");
}
END_TEST

/* A throwaway CA in dir and its server and client certificates
 * (tests/make_certs.sh). */
static void make_certs(const char *dir) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "bash %s/make_certs.sh %s", SS_TESTS_DIR, dir);
    ck_assert_int_eq(system(cmd), 0);
}

typedef struct tls_side {
    ss__bulk_conn conn;
    int fd;
    const ss__bulk_tls *tls;
    ss_status st;
} tls_side;

static void *tls_server_side(void *arg) {
    tls_side *a = arg;
    char why[300];
    a->st = ss__bulk_conn_start(&a->conn, a->fd, a->tls, true, NULL, 5000, why, sizeof why);
    return NULL;
}

/* A TLS connection whose peer is gone: a send fails and raises no
 * SIGPIPE (OpenSSL's own socket writes would, and a trainer that links
 * the library need not ignore it; this test process does not). */
START_TEST(test_a_tls_send_to_a_closed_peer_raises_no_sigpipe) {
    char dir[64], f[5][128];
    ss__check_tmpdir(dir, "ss-bulk-pipe");
    make_certs(dir);
    const char *names[] = {"server.pem", "server.key", "ca.pem", "client.pem", "client.key"};
    for (int i = 0; i < 5; i++)
        snprintf(f[i], sizeof f[i], "%s/%s", dir, names[i]);
    const ss__rpc_tls stls = {.cert_file = f[0], .key_file = f[1], .ca_file = f[2]};
    const ss__rpc_tls ctls = {.ca_file = f[2], .cert_file = f[3], .key_file = f[4]};
    ss__bulk_tls *st, *ct;
    char why[300];
    ck_assert_int_eq(ss__bulk_tls_create(&stls, true, &st, why, sizeof why), SS_OK);
    ck_assert_int_eq(ss__bulk_tls_create(&ctls, false, &ct, why, sizeof why), SS_OK);
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    tls_side server = {.fd = sv[1], .tls = st};
    pthread_t th;
    pthread_create(&th, NULL, tls_server_side, &server);
    ss__bulk_conn client;
    ck_assert_msg(
        ss__bulk_conn_start(&client, sv[0], ct, false, "localhost", 5000, why, sizeof why) == SS_OK,
        "handshake: %s", why);
    pthread_join(th, NULL);
    ck_assert_int_eq(server.st, SS_OK);
    const char hello[] = "hello";
    char got[sizeof hello];
    ck_assert(ss__bulk_conn_send(&client, hello, sizeof hello));
    ck_assert(ss__bulk_conn_read(&server.conn, got, sizeof got));
    ck_assert_str_eq(got, hello);
    ss__bulk_conn_end(&server.conn); /* the peer goes */
    static char big[1 << 20];
    ck_assert(!ss__bulk_conn_send(&client, big, sizeof big));
    ss__bulk_conn_end(&client);
    ss__bulk_tls_destroy(st);
    ss__bulk_tls_destroy(ct);
    ss__check_rmdir(dir);
}
END_TEST

/* The stream over mutual TLS: a group of 600,000 floats in chunks of
 * 100,000 (400 KB each way per call, many TLS records, the requests
 * sent while the replies are read) gives the deltas the same group gives
 * over gRPC with the same certificates, bit for bit, and every batch went
 * on the stream; once the PS is killed, an exchange fails cleanly. */
START_TEST(test_easgd_on_a_tls_stream_as_over_grpc) {
    char dir[64], pem[4][128];
    ss__check_tmpdir(dir, "ss-bulk-tls");
    make_certs(dir);
    const char *names[] = {"server.pem", "server.key", "ca.pem", "client.pem"};
    for (int i = 0; i < 4; i++)
        snprintf(pem[i], sizeof pem[i], "%s/%s", dir, names[i]);
    char client_key[128];
    snprintf(client_key, sizeof client_key, "%s/client.key", dir);
    snprintf(ps_log, sizeof ps_log, "/tmp/ss-test-bulk-tls-%d.log", (int)getpid());
    char *args[] = {"--max-group-floats",
                    "1000000",
                    "--bulk-listen",
                    "127.0.0.1:0",
                    "--tls-cert",
                    pem[0],
                    "--tls-key",
                    pem[1],
                    "--tls-ca",
                    pem[2],
                    "--tls-writers",
                    "trainer.shadowsync.test",
                    NULL};
    ps_pid = proc_start_ps(ps_log, ps_target, sizeof ps_target, "127.0.0.1:0", args);
    const ss__rpc_tls tls = {.ca_file = pem[2], .cert_file = pem[3], .key_file = client_key};
    enum { N = 600000 };
    ss__grpc_transport_config cfg = {.targets = ps_target,
                                     .timeout_ms = 20000,
                                     .chunk_floats = 100000,
                                     .tls = &tls,
                                     .bulk = true};
    ss__transport *b, *g;
    ck_assert_int_eq(ss__grpc_transport_create(&cfg, &b, NULL, 0), SS_OK);
    cfg.bulk = false;
    ck_assert_int_eq(ss__grpc_transport_create(&cfg, &g, NULL, 0), SS_OK);
    uint64_t mb, mg;
    ck_assert_int_eq(ss__transport_join(b, "tls-bulk", N, &mb), SS_OK);
    ck_assert_int_eq(ss__transport_join(g, "tls-grpc", N, &mg), SS_OK);
    float *s = malloc(N * sizeof *s), *db = malloc(N * sizeof *db), *dg = malloc(N * sizeof *dg);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++)
            s[i] = sinf((float)(i + 7 * round));
        ck_assert_int_eq(ss__transport_easgd_exchange(b, "tls-bulk", mb, s, 0.3f, db, N), SS_OK);
        ck_assert_int_eq(ss__transport_easgd_exchange(g, "tls-grpc", mg, s, 0.3f, dg, N), SS_OK);
        ck_assert(memcmp(db, dg, N * sizeof *db) == 0);
    }
    ck_assert_float_ne(db[N - 5], 0.0f);
    ck_assert_uint_eq(ss__grpc_transport_bulk_batches(b), 3);
    ck_assert_uint_eq(ss__grpc_transport_bulk_batches(g), 0);
    ss__transport_destroy(g);
    /* Embedding rows on a TLS stream, from the client's own files. */
    ss__emb_client *ec;
    ss__emb_spec spec;
    ck_assert_int_eq(ss__emb_client_create(ps_target, &tls, 20000, &ec, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_client_use_bulk(ec, true), SS_OK);
    ck_assert_int_eq(ss__emb_spec_init(&spec, "tls-rows", 16), SS_OK);
    ck_assert_int_eq(ss__emb_client_open_table(ec, &spec, NULL, NULL, 0), SS_OK);
    const uint64_t ids[3] = {5, 77, 9000};
    float g3[3 * 16], r3[3 * 16], again[3 * 16];
    for (int i = 0; i < 3 * 16; i++)
        g3[i] = 0.5f;
    ck_assert_int_eq(ss__emb_client_lookup(ec, &spec, ids, 3, r3), SS_OK);
    ck_assert_int_eq(ss__emb_client_push(ec, &spec, ids, 3, g3), SS_OK);
    ck_assert_int_eq(ss__emb_client_lookup(ec, &spec, ids, 3, again), SS_OK);
    for (int i = 0; i < 3 * 16; i++) /* SGD: w -= lr g */
        ck_assert_float_eq_tol(again[i], r3[i] - spec.lr * 0.5f, 1e-6);
    ck_assert_uint_eq(ss__emb_client_bulk_batches(ec), 3);
    ss__emb_client_destroy(ec);
    /* A read-only certificate gets no ticket (the stream carries writes):
     * its lookups go over gRPC (the pool asks no more: bulk_off). */
    char reader[2][128];
    snprintf(reader[0], sizeof reader[0], "%s/reader.pem", dir);
    snprintf(reader[1], sizeof reader[1], "%s/reader.key", dir);
    const ss__rpc_tls rtls = {.ca_file = pem[2], .cert_file = reader[0], .key_file = reader[1]};
    ck_assert_int_eq(ss__emb_client_create(ps_target, &rtls, 20000, &ec, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_client_use_bulk(ec, true), SS_OK);
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(ss__emb_client_lookup(ec, &spec, ids, 3, r3), SS_OK);
        ck_assert(memcmp(r3, again, sizeof r3) == 0);
    }
    ck_assert_uint_eq(ss__emb_client_bulk_batches(ec), 0);
    ss__emb_client_destroy(ec);
    char *log = proc_read(ps_log);
    ck_assert_ptr_null(strstr(log, "stream_refused"));
    free(log);
    /* The PS killed: the next exchange, 2.4 MB to write on streams whose
     * peer is gone, fails and applies nothing; this process (which does
     * not ignore SIGPIPE, as a trainer need not) lives on. */
    kill(ps_pid, SIGKILL);
    proc_wait(ps_pid, 10);
    unlink(ps_log);
    ck_assert_int_ne(ss__transport_easgd_exchange(b, "tls-bulk", mb, s, 0.3f, db, N), SS_OK);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(db[i], 0.0f);
    ss__transport_destroy(b);
    free(s);
    free(db);
    free(dg);
    ss__check_rmdir(dir);
}
END_TEST

/* Writes the PS's shard map and waits until it serves the epoch (it reads
 * the file every 200 ms; on a loaded machine later). */
static void move_map(const char *map, uint64_t epoch) {
    ss__check_write_map(map, epoch, ps_target, NULL);
    char line[64];
    snprintf(line, sizeof line, "event=shard_map_epoch epoch=%llu ", (unsigned long long)epoch);
    ck_assert_msg(proc_wait_for(ps_log, line, 60), "the PS never served epoch %llu",
                  (unsigned long long)epoch);
}

/* A stream lives in the shard map epoch of its ticket: once the PS serves
 * a newer one, each call on it is refused as the gRPC door refuses a
 * call routed by an old map (the same status and message, saying both
 * epochs) and changes nothing; the client, routed by the new epoch, opens
 * a new stream there. */
START_TEST(test_a_stream_lives_in_its_epoch) {
    char dir[64], map[128];
    ss__check_tmpdir(dir, "ss-bulk-map");
    snprintf(map, sizeof map, "%s/fleet.map", dir);
    ss__check_write_map(map, 1, "127.0.0.1:1", NULL); /* a placeholder: the port comes later */
    snprintf(ps_log, sizeof ps_log, "%s/ps.log", dir);
    char *args[] = {"--bulk-listen", "127.0.0.1:0", "--shard-map", map, "--http", "", NULL};
    setenv("SHADOWSYNC_LOG_LEVEL", "info", 1); /* its map epochs: move_map waits on them */
    ps_pid = proc_start_ps(ps_log, ps_target, sizeof ps_target, "127.0.0.1:0", args);
    setenv("SHADOWSYNC_LOG_LEVEL", "warn", 1);
    proc_address_after(ps_log, "bulk on", bulk_target, sizeof bulk_target);
    move_map(map, 2);
    ss__grpc_transport_config cfg = {
        .targets = ps_target, .timeout_ms = 5000, .chunk_floats = 100, .bulk = true, .epoch = 2};
    ss__transport *t;
    ck_assert_int_eq(ss__grpc_transport_create(&cfg, &t, NULL, 0), SS_OK);
    uint64_t a, b;
    float d[2], c[2];
    ck_assert_int_eq(ss__transport_join(t, "w", 2, &a), SS_OK);
    ck_assert_int_eq(ss__transport_join(t, "w", 2, &b), SS_OK);
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "w", a, (const float[]){2, 4}, 0.5f, d, 2),
                     SS_OK); /* the centre starts at a's {2, 4} */
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "w", b, (const float[]){4, 0}, 0.5f, d, 2),
                     SS_OK);
    ck_assert(d[0] == 1.0f && d[1] == -2.0f); /* the centre {3, 2} */
    ck_assert_uint_eq(ss__grpc_transport_bulk_batches(t), 2);
    uint8_t ticket[SS_BULK_TICKET_BYTES]; /* of epoch 2, used below */
    ticket_over_grpc(ticket, 2);
    move_map(map, 3); /* the same list: no group is cut again */
    /* t's idle stream is of epoch 2: refused there, nothing applied */
    d[0] = d[1] = 7;
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "w", b, (const float[]){9, 9}, 0.5f, d, 2),
                     SS_ERR_STATE);
    ck_assert_uint_eq(ss__grpc_transport_bulk_batches(t), 3); /* sent on the stream */
    ck_assert(d[0] == 0.0f && d[1] == 0.0f);
    /* the refusal, read off a stream of epoch 2 by hand */
    char host[64];
    unsigned port;
    ck_assert(ss__address_split(bulk_target, host, sizeof host, &port));
    ss__bulk_stream *old;
    char why[300];
    ck_assert_int_eq(
        ss__bulk_stream_open(host, port, NULL, ticket, 5000, 1 << 20, &old, why, sizeof why),
        SS_OK);
    ss__rpc_request rq = {.method = SS_DENSE_M_EASGD, .req = (const uint8_t *)"", .len = 0};
    ck_assert_int_eq(ss__bulk_call_many(old, &rq, 1, NULL, 0, 1), SS_ERR_STATE);
    ck_assert_msg(ss__rpc_refused_for_epoch(rq.status, rq.msg), "%s", rq.msg);
    ck_assert_msg(strstr(rq.msg, "EasgdExchange was routed by shard map epoch 2; this server "
                                 "serves epoch 3"),
                  "%s", rq.msg);
    free(rq.resp);
    ss__bulk_stream_close(old);
    /* routed by epoch 3: a new stream, served */
    ss__grpc_transport_set_epoch(t, 3);
    ck_assert_int_eq(ss__transport_read_central(t, "w", c, 2), SS_OK);
    ck_assert(c[0] == 3.0f && c[1] == 2.0f); /* the refused call changed nothing */
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "w", b, (const float[]){5, 2}, 0.5f, d, 2),
                     SS_OK);
    ck_assert(d[0] == 1.0f && d[1] == 0.0f); /* 0.5 (x - centre) */
    ck_assert_uint_eq(ss__grpc_transport_bulk_batches(t), 4);
    ss__transport_destroy(t);
    ck_assert_int_eq(count_in_log("stream_refused"), 0);
    kill(ps_pid, SIGTERM);
    ck_assert_int_eq(proc_wait(ps_pid, 30), 0);
    ss__check_rmdir(dir);
}
END_TEST

/* A trainer and a PS with their defaults (the trainer's bulk setting on,
 * the PS's bulk port beside --listen), remote tables: it syncs, and the PS's
 * /metrics count the stream it opened and the calls it served there (its
 * dense chunks and its table's rows), in the per-method series of the
 * gRPC server with transport="bulk" (counts, bytes, latency). */
START_TEST(test_a_trainer_and_a_ps_on_their_defaults) {
    snprintf(ps_log, sizeof ps_log, "/tmp/ss-test-bulk-%d.log", (int)getpid());
    char *args[] = {"--http", "127.0.0.1:0", NULL};
    ps_pid = proc_start_ps(ps_log, ps_target, sizeof ps_target, "127.0.0.1:0", args);
    char http[64], base[80], log[64];
    proc_address_after(ps_log, "http on", http, sizeof http);
    snprintf(base, sizeof base, "http://%s", http);
    snprintf(log, sizeof log, "/tmp/ss-test-bulk-trainer-%d.log", (int)getpid());
    char *argv[] = {CTR_TRAIN,
                    "--ps",
                    ps_target,
                    "--train",
                    SS_DATA_DIR "/criteo-kaggle-head-8000.tsv",
                    "--test",
                    SS_DATA_DIR "/criteo-kaggle-head-8000.tsv",
                    "--max-rows",
                    "3000",
                    "--max-test-rows",
                    "500",
                    "--progress",
                    "0",
                    "--table-rows",
                    "1024",
                    "--emb",
                    "remote",
                    NULL};
    ck_assert_int_eq(proc_wait(proc_spawn(argv, log), 120), 0);
    char *out = proc_read(log);
    ck_assert_msg(proc_last_value(out, "summary:", "sync_rounds_sum") > 0, "%s", out);
    free(out);
    unlink(log);
    char *metrics = NULL;
    ck_assert_int_eq(http_request(base, "/metrics", NULL, NULL, 0, &metrics), 200);
    ck_assert_double_ge(metric_sum(metrics, "shadowsync_bulk_streams_total", "opened"), 1);
    /* The stream's calls in the gRPC server's per-method series. */
    const double calls = metric_sum(metrics, "shadowsync_rpc_requests_total",
                                    "EasgdExchange\",result=\"ok\",transport=\"bulk\"");
    ck_assert_double_ge(calls, 1);
    ck_assert_double_eq(metric_sum(metrics, "shadowsync_rpc_server_seconds_count",
                                   "EasgdExchange\",transport=\"bulk\""),
                        calls);
    ck_assert_double_ge(metric_sum(metrics, "shadowsync_rpc_received_bytes_total",
                                   "EasgdExchange\",transport=\"bulk\""),
                        calls);
    ck_assert_double_eq(metric_sum(metrics, "shadowsync_bulk_streams_total", "refused"), 0);
    /* Its remote tables' rows too: lookups (with the pushes riding on
     * them), each table's or several tables' in one Batch, on the stream. */
    ck_assert_double_ge(metric_sum(metrics, "shadowsync_rpc_requests_total",
                                   "Embedding/PushLookup\",result=\"ok\",transport=\"bulk\"") +
                            metric_sum(metrics, "shadowsync_rpc_requests_total",
                                       "Embedding/Batch\",result=\"ok\",transport=\"bulk\""),
                        1);
    ck_assert_double_eq(
        metric_sum(metrics, "shadowsync_rpc_requests_total", "EasgdExchange\",result=\"ok\"}"),
        0); /* none over gRPC (its series has no transport label) */
    free(metrics);
    stop_ps();
}
END_TEST

SS_CHECK_MAIN("bulk", 60, NULL, NULL, test_frames_by_hand, test_a_reply_past_the_bound,
              test_frames_resumed_mid_way, test_a_reply_read_into_place,
              test_easgd_on_the_stream_as_over_grpc, test_rounds_on_the_stream,
              test_the_door_of_the_stream, test_no_bulk_port_and_a_dead_ps,
              test_bulk_listen_refused_when_it_cannot_serve,
              test_easgd_on_a_tls_stream_as_over_grpc,
              test_a_tls_send_to_a_closed_peer_raises_no_sigpipe, test_a_stream_lives_in_its_epoch,
              test_a_trainer_and_a_ps_on_their_defaults)
