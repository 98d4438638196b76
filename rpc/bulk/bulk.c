/* The bulk path's frames and its client (bulk.h); the server is
 * bulk_server.c. */
#include "rpc/bulk/bulk.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/fd_io.h"
#include "rpc/message.h"
#include "rpc/pb_wire.h"

/* ---- frames ---- */

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

void ss__bulk_opened(uint8_t out[SS_BULK_OPENED_BYTES]) {
    put32(out, SS_BULK_MAGIC);
}

bool ss__bulk_opened_parse(const uint8_t in[SS_BULK_OPENED_BYTES]) {
    return get32(in) == SS_BULK_MAGIC;
}

void ss__bulk_request_head(uint8_t out[SS_BULK_REQ_HEAD], uint32_t path_len, uint64_t len) {
    put32(out, SS_BULK_MAGIC);
    put32(out + 4, path_len);
    put64(out + 8, len);
}

ss_status ss__bulk_request_parse(const uint8_t in[SS_BULK_REQ_HEAD], uint64_t max_len,
                                 uint32_t *path_len, uint64_t *len) {
    *path_len = get32(in + 4);
    *len = get64(in + 8);
    if (get32(in) != SS_BULK_MAGIC || *path_len == 0 || *path_len > SS_BULK_PATH_MAX ||
        *len > max_len)
        return SS_ERR_PARSE;
    return SS_OK;
}

void ss__bulk_reply_head(uint8_t out[SS_BULK_REPLY_HEAD], ss_status status, uint32_t msg_len,
                         uint64_t len) {
    put32(out, SS_BULK_MAGIC);
    put32(out + 4, (uint32_t)status);
    put32(out + 8, msg_len);
    put64(out + 12, len);
}

ss_status ss__bulk_reply_parse(const uint8_t in[SS_BULK_REPLY_HEAD], uint64_t max_len,
                               ss_status *status, uint32_t *msg_len, uint64_t *len) {
    const uint32_t st = get32(in + 4);
    *msg_len = get32(in + 8);
    *len = get64(in + 12);
    if (get32(in) != SS_BULK_MAGIC || st >= (uint32_t)SS_STATUS_COUNT_ ||
        *msg_len > SS_BULK_MESSAGE_MAX || *len > max_len)
        return SS_ERR_PARSE;
    *status = (ss_status)st;
    return SS_OK;
}

/* ---- the client ---- */

struct ss__bulk_stream {
    ss__bulk_conn c;
    size_t max_reply; /* a reply's bytes, at most */
};

/* A connected socket to host:port within timeout_ms (rpc/reach.c's
 * connect), its later sends and receives bounded by timeout_ms too; -1
 * when none. */
static int connect_within(const char *host, unsigned port, uint32_t timeout_ms) {
    char address[300], why[200];
    snprintf(address, sizeof address, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
    int fd = ss__tcp_connect(address, timeout_ms, why, sizeof why);
    if (fd < 0)
        return -1;
    const struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
        close(fd);
        return -1;
    }
    ss__tcp_keepalive(fd);
    return fd;
}

ss_status ss__bulk_stream_open(const char *host, unsigned port, const ss__bulk_tls *tls,
                               const uint8_t ticket[SS_BULK_TICKET_BYTES], uint32_t timeout_ms,
                               size_t max_reply, ss__bulk_stream **out, char *why, size_t whylen) {
    *out = NULL;
    timeout_ms = timeout_ms ? timeout_ms : 10000;
    int fd = connect_within(host, port, timeout_ms);
    if (fd < 0) {
        snprintf(why, whylen, "cannot connect to %s port %u", host, port);
        return SS_ERR_IO;
    }
    ss__bulk_stream *b = malloc(sizeof *b);
    if (!b) {
        close(fd);
        return SS_ERR_NO_MEMORY;
    }
    ss_status st = ss__bulk_conn_start(&b->c, fd, tls, false, host, (int)timeout_ms, why, whylen);
    uint8_t opened[SS_BULK_OPENED_BYTES];
    if (st == SS_OK && !ss__bulk_conn_send(&b->c, ticket, SS_BULK_TICKET_BYTES)) {
        snprintf(why, whylen, "the ticket did not go out to %s port %u", host, port);
        st = SS_ERR_IO;
    } else if (st == SS_OK && (!ss__bulk_conn_read(&b->c, opened, sizeof opened) ||
                               !ss__bulk_opened_parse(opened))) {
        snprintf(why, whylen,
                 "%s port %u did not take the ticket (closed: no room for a stream now, or the "
                 "ticket was not live)",
                 host, port);
        st = SS_ERR_IO;
    }
    if (st != SS_OK) {
        if (b->c.fd < 0) /* no connection: the socket is still ours */
            close(fd);
        ss__bulk_conn_end(&b->c);
        free(b);
        return st;
    }
    b->max_reply = max_reply;
    *out = b;
    return SS_OK;
}

ss_status ss__bulk_stream_wrap(int fd, size_t max_reply, ss__bulk_stream **out) {
    ss__bulk_stream *b = malloc(sizeof *b);
    if (!b) {
        close(fd);
        return SS_ERR_NO_MEMORY;
    }
    (void)ss__bulk_conn_start(&b->c, fd, NULL, false, NULL, -1, NULL, 0); /* plain: no failure */
    b->max_reply = max_reply;
    *out = b;
    return SS_OK;
}

bool ss__bulk_stream_alive(const ss__bulk_stream *b) {
    /* Not POLLIN: TLS 1.3 session tickets may wait unread on a live one. */
    struct pollfd pf = {.fd = b->c.fd, .events = POLLRDHUP};
    return poll(&pf, 1, 0) == 0 || !(pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

void ss__bulk_stream_set_timeout(ss__bulk_stream *b, uint32_t timeout_ms) {
    ss__bulk_conn_set_timeout(&b->c, timeout_ms ? (int)timeout_ms : -1);
}

void ss__bulk_stream_close(ss__bulk_stream *b) {
    if (!b)
        return;
    ss__bulk_conn_end(&b->c);
    free(b);
}

typedef struct sender {
    ss__bulk_stream *b;
    ss__rpc_request *rq;
    size_t n;
    const ss__rpc_channel *ch;
    unsigned lane, lanes;
    size_t next, j; /* the next call to look at; mine()'s count of the calls on ch */
    uint8_t head[SS_BULK_REQ_HEAD];
    struct iovec iov[4]; /* the frame going out: head, path, request, payload */
    int at;              /* its first piece not wholly sent (4: none left) */
    bool ok;
} sender;

/* Whether call i is this stream's: on ch, and the lane-th of every lanes
 * calls on ch (j counts the calls on ch before i). */
static bool mine(const ss__rpc_request *r, const ss__rpc_channel *ch, size_t *j, unsigned lane,
                 unsigned lanes) {
    if (r->ch != ch)
        return false;
    return (*j)++ % lanes == lane;
}

/* The next of this stream's frames into s->iov; false: none left. */
static bool next_frame(sender *s) {
    while (s->next < s->n) {
        const ss__rpc_request *r = &s->rq[s->next++];
        if (!mine(r, s->ch, &s->j, s->lane, s->lanes))
            continue;
        const size_t path_len = strlen(r->method);
        ss__bulk_request_head(s->head, (uint32_t)path_len, r->len + r->payload_len);
        s->iov[0] = (struct iovec){s->head, sizeof s->head};
        s->iov[1] = (struct iovec){(void *)r->method, path_len};
        s->iov[2] = (struct iovec){(void *)r->req, r->len};
        s->iov[3] = (struct iovec){(void *)r->payload, r->payload_len};
        s->at = 0;
        return true;
    }
    return false;
}

/* The writer thread: the frame under way (when one is), then every call's
 * frame left, back to back. */
static void *send_all(void *arg) {
    sender *s = arg;
    ss__bulk_conn *c = &s->b->c;
    s->ok = s->at == 4 || ss__bulk_conn_sendv(c, s->iov + s->at, 4 - s->at);
    while (s->ok && next_frame(s))
        s->ok = ss__bulk_conn_sendv(c, s->iov, 4);
    if (!s->ok) /* the reader's next wait ends at once */
        shutdown(s->b->c.fd, SHUT_RD);
    return NULL;
}

/* What of the frames the socket takes now, from the calling thread, on
 * plain TCP: a batch of lookups (ids out, rows back) is all taken, and no
 * writer thread is started (60 us a batch on the 2-core machine, 7% of a
 * lookup of 4,096 rows). 1: frames are left for the writer (s->at in the
 * frame under way), 0: none, -1: the stream broke. */
static int send_what_fits(sender *s) {
    if (s->b->c.ssl) /* TLS: the writer sends all */
        return 1;
    while (next_frame(s)) {
        s->at = ss__send_iov(s->b->c.fd, s->iov, 4, true);
        if (s->at < 0)
            return -1;
        if (s->at < 4)
            return 1;
    }
    return 0;
}

/* A reply's len bytes into buf, or its trailing field straight into
 * r->into (*direct) when r asks for that and the bytes before the field
 * (read into buf first) say it is that field, of r->into_len bytes. */
static bool read_body(ss__bulk_stream *b, const ss__rpc_request *r, size_t len, uint8_t *buf,
                      bool *direct) {
    *direct = false;
    const size_t head = r->into && len > r->into_len ? len - r->into_len : SIZE_MAX;
    if (head > SS_PB_BYTES_HEADER_MAX * 4)
        return ss__bulk_conn_read(&b->c, buf, len);
    size_t prefix, off;
    if (!ss__bulk_conn_read(&b->c, buf, head))
        return false;
    *direct =
        ss__pb_find_trailing_bytes_in(buf, head, len, r->into_field, &prefix, &off) && off == head;
    return *direct ? ss__bulk_conn_read(&b->c, r->into, r->into_len)
                   : ss__bulk_conn_read(&b->c, buf + head, len - head);
}

/* One reply into r: its status and message, and its bytes to on_reply
 * (buf, reused across calls) or resp. false: the stream is broken. */
static bool read_reply(ss__bulk_stream *b, ss__rpc_request *r, uint8_t **buf, size_t *cap) {
    uint8_t head[SS_BULK_REPLY_HEAD];
    char msg[SS_BULK_MESSAGE_MAX];
    ss_status st;
    uint32_t msg_len;
    uint64_t len;
    if (!ss__bulk_conn_read(&b->c, head, sizeof head) ||
        ss__bulk_reply_parse(head, b->max_reply, &st, &msg_len, &len) != SS_OK ||
        !ss__bulk_conn_read(&b->c, msg, msg_len))
        return false;
    const size_t keep = msg_len < sizeof r->msg ? msg_len : sizeof r->msg - 1;
    memcpy(r->msg, msg, keep);
    r->msg[keep] = '\0';
    if (len > *cap) {
        free(*buf);
        if (!(*buf = malloc(len)))
            return false;
        *cap = len;
    }
    bool direct = false;
    if (!read_body(b, r, len, *buf, &direct))
        return false;
    r->status = st;
    if (st != SS_OK || direct)
        return true;
    if (r->on_reply) {
        ss__rpc_message m = {.count = 1, .length = len};
        m.flat = grpc_slice_from_static_buffer(*buf, len);
        m.slices = &m.flat;
        r->status = r->on_reply(r, &m, r->on_reply_arg);
    } else if ((r->resp = malloc(len ? len : 1))) {
        if (len)
            memcpy(r->resp, *buf, len);
        r->resp_len = len;
    } else {
        r->status = SS_ERR_NO_MEMORY;
    }
    return true;
}

ss_status ss__bulk_call_many(ss__bulk_stream *b, ss__rpc_request *rq, size_t n,
                             const ss__rpc_channel *ch, unsigned lane, unsigned lanes) {
    if (lanes == 0 || lane >= lanes)
        return SS_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < n; i++)
        if (rq[i].ch == ch &&
            (!rq[i].method || !*rq[i].method || strlen(rq[i].method) > SS_BULK_PATH_MAX))
            return SS_ERR_INVALID_ARGUMENT;
    sender s = {
        .b = b, .rq = rq, .n = n, .ch = ch, .lane = lane, .lanes = lanes, .at = 4, .ok = true};
    const int left = send_what_fits(&s);
    pthread_t w;
    if (left > 0 && pthread_create(&w, NULL, send_all, &s) != 0) {
        shutdown(b->c.fd, SHUT_RDWR); /* a frame may be half sent: the stream is done */
        return SS_ERR_NO_MEMORY;
    }
    if (left < 0) /* as a writer that failed: the reads below end at once */
        shutdown(b->c.fd, SHUT_RD);
    uint8_t *buf = NULL;
    size_t cap = 0;
    bool alive = true;
    ss_status first = SS_OK;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        ss__rpc_request *r = &rq[i];
        if (!mine(r, ch, &j, lane, lanes))
            continue;
        r->msg[0] = '\0';
        if (!(alive = alive && read_reply(b, r, &buf, &cap))) {
            r->status = SS_ERR_IO;
            snprintf(r->msg, sizeof r->msg, "the bulk stream broke");
        }
        if (first == SS_OK)
            first = r->status;
    }
    if (!alive) /* unblocks a writer waiting on a full socket */
        shutdown(b->c.fd, SHUT_RDWR);
    if (left > 0)
        pthread_join(w, NULL);
    free(buf);
    return first;
}
