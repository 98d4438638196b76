/* The bulk path's server (bulk.h): a thread accepts; each stream has a
 * thread of its own that checks the stream's ticket, then reads a frame,
 * runs its method's handler and writes the reply, in turn. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fd_io.h"
#include "common/log.h"
#include "common/metrics.h"
#include "rpc/bulk.h"
#include "rpc/bulk_conn.h"
#include "rpc/method_series.h"
#include "rpc/rpc_internal.h"

#define MAX_TICKETS 256
#define STREAM_FDS  1024 /* the most max_streams may be */

typedef struct ticket {
    uint8_t bytes[SS_BULK_TICKET_BYTES];
    uint64_t expires_ns; /* 0: free */
    uint64_t epoch;      /* the shard map's its stream's calls are routed by (0: none) */
} ticket;

struct ss__bulk_server {
    int lfd, port;
    const ss__rpc_method *methods;
    size_t nmethods;
    void *ctx;
    uint64_t *max_len; /* per method */
    uint32_t max_streams;
    size_t max_inflight;               /* 0: none */
    const _Atomic uint64_t *map_epoch; /* NULL: no map */
    pthread_rwlock_t *map_gate;
    _Atomic size_t inflight; /* request bytes held now */
    pthread_t acceptor;
    pthread_mutex_t lock; /* tickets, fds, streams */
    pthread_cond_t idle;  /* streams fell to 0 */
    ticket tickets[MAX_TICKETS];
    int fds[STREAM_FDS]; /* the open streams' sockets (-1: free) */
    uint32_t streams;
    bool stopping;
    _Atomic uint64_t refused;                  /* streams closed for their ticket or a frame */
    ss__counter *opened_total, *refused_total; /* NULL: no metrics */
    ss__rpc_method_series *series;             /* per method, as the gRPC server's */
    ss__bulk_tls *tls;                         /* NULL: plain TCP */
};

static void count(ss__counter *c) {
    if (c)
        ss__counter_add(c, 1);
}

/* A stream refused (its caller says why). */
static void refuse(ss__bulk_server *s) {
    atomic_fetch_add(&s->refused, 1);
    count(s->refused_total);
}

ss_status ss__bulk_server_ticket(ss__bulk_server *s, uint64_t epoch,
                                 uint8_t out[SS_BULK_TICKET_BYTES]) {
    if (getrandom(out, SS_BULK_TICKET_BYTES, 0) != SS_BULK_TICKET_BYTES)
        return SS_ERR_IO;
    const uint64_t now = ss__now_ns();
    pthread_mutex_lock(&s->lock);
    ticket *free_slot = NULL;
    for (int i = 0; i < MAX_TICKETS && !free_slot; i++)
        if (s->tickets[i].expires_ns <= now)
            free_slot = &s->tickets[i];
    if (free_slot) {
        memcpy(free_slot->bytes, out, SS_BULK_TICKET_BYTES);
        free_slot->expires_ns = now + SS_BULK_TICKET_TTL_S * 1000000000ull;
        free_slot->epoch = epoch;
    }
    pthread_mutex_unlock(&s->lock);
    return free_slot ? SS_OK : SS_ERR_STATE;
}

/* Whether t is a live ticket (and its epoch); it is then used up. Every
 * slot is compared whole (no early exit on the first differing byte). */
static bool take_ticket(ss__bulk_server *s, const uint8_t t[SS_BULK_TICKET_BYTES],
                        uint64_t *epoch) {
    const uint64_t now = ss__now_ns();
    bool ok = false;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < MAX_TICKETS; i++) {
        uint8_t diff = 0;
        for (int k = 0; k < SS_BULK_TICKET_BYTES; k++)
            diff |= (uint8_t)(s->tickets[i].bytes[k] ^ t[k]);
        if (diff == 0 && s->tickets[i].expires_ns > now) {
            s->tickets[i].expires_ns = 0;
            *epoch = s->tickets[i].epoch;
            ok = true;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return ok;
}

/* A request whose END is 64-byte aligned, as the gRPC server's: a bulk
 * field of floats runs to the end of its message (rpc/pb_wire.h), so the
 * handler reads the floats in place. */
static uint8_t *read_request(ss__bulk_conn *c, uint64_t len, void **block) {
    const size_t pad = (64 - len % 64) % 64;
    if (!(*block = aligned_alloc(64, len + pad + 64)))
        return NULL;
    uint8_t *buf = (uint8_t *)*block + pad;
    if (!ss__bulk_conn_read(c, buf, len)) {
        free(*block);
        return *block = NULL;
    }
    return buf;
}

static bool write_reply(ss__bulk_conn *c, const ss__rpc_reply *r) {
    const bool ok = r->status == SS_OK;
    const uint32_t msg_len = ok ? 0 : (uint32_t)strnlen(r->message, SS_BULK_MESSAGE_MAX);
    uint8_t head[SS_BULK_REPLY_HEAD];
    ss__bulk_reply_head(head, r->status, msg_len, ok ? r->len : 0);
    struct iovec iov[3] = {
        {head, sizeof head}, {(void *)r->message, msg_len}, {(void *)r->data, ok ? r->len : 0}};
    return ss__bulk_conn_sendv(c, iov, 3);
}

/* A stream's frames, in turn, until it ends or breaks a rule. */
static void serve_frames(ss__bulk_server *s, ss__bulk_conn *c, uint64_t epoch) {
    uint8_t head[SS_BULK_REQ_HEAD];
    while (ss__bulk_conn_read(c, head, sizeof head)) {
        uint32_t method;
        uint64_t len;
        if (ss__bulk_request_parse(head, (uint32_t)s->nmethods, s->max_len, &method, &len) !=
            SS_OK) {
            refuse(s);
            ss__log(SS_LOG_WARN, "bulk", "event=stream_closed reason=bad_frame method=%u len=%llu",
                    method, (unsigned long long)len);
            return;
        }
        const uint64_t arrived_ns = ss__now_ns();
        const size_t held = atomic_fetch_add(&s->inflight, len) + len;
        void *block = NULL;
        const uint8_t *req =
            !s->max_inflight || held <= s->max_inflight ? read_request(c, len, &block) : NULL;
        if (!req) {
            atomic_fetch_sub(&s->inflight, len);
            if (s->max_inflight && held > s->max_inflight) {
                refuse(s);
                ss__log(SS_LOG_WARN, "bulk", "event=stream_closed reason=inflight held=%zu max=%zu",
                        held, s->max_inflight);
            }
            return;
        }
        const ss__rpc_method *m = &s->methods[method];
        ss__rpc_reply reply = {.status = SS_OK};
        /* as the gRPC server runs it; a stream has no door, so a
         * blocking call's epoch is checked here too */
        (void)ss__rpc_run_routed(m, s->ctx, s->map_epoch, s->map_gate, epoch != 0, epoch, true, req,
                                 len, &reply);
        ss__rpc_method_series_count(&s->series[method], reply.status, len, reply.len, arrived_ns);
        free(block);
        atomic_fetch_sub(&s->inflight, len);
        const bool sent = write_reply(c, &reply);
        free(reply.data_block ? reply.data_block : reply.data);
        if (!sent)
            return;
    }
}

typedef struct stream_arg {
    ss__bulk_server *s;
    int slot;
} stream_arg;

/* A stream's ticket must come within TICKET_WAIT_S of the connection (a
 * client sends it at once; over TLS, the handshake too): a socket that
 * sends nothing holds a thread that long. */
#define TICKET_WAIT_S 5

/* The stream's connection (its TLS handshake when the server has TLS)
 * and its ticket; false when either fails (refused, said why). */
static bool open_stream(ss__bulk_server *s, ss__bulk_conn *c, int fd, uint64_t *epoch) {
    char why[300] = "";
    uint8_t t[SS_BULK_TICKET_BYTES];
    if (ss__bulk_conn_start(c, fd, s->tls, true, NULL, TICKET_WAIT_S * 1000, why, sizeof why) !=
        SS_OK) {
        refuse(s);
        ss__log(SS_LOG_WARN, "bulk", "event=stream_refused reason=tls why=\"%s\"", why);
        return false;
    }
    if (!ss__bulk_conn_read(c, t, sizeof t) || !take_ticket(s, t, epoch)) {
        refuse(s);
        ss__log(SS_LOG_WARN, "bulk", "event=stream_refused reason=ticket");
        return false;
    }
    return true;
}

static void *serve_stream(void *arg) {
    stream_arg a = *(stream_arg *)arg;
    free(arg);
    ss__bulk_server *s = a.s;
    ss__bulk_conn c;
    uint64_t epoch = 0;
    /* The connection owns the socket: the slot keeps it open until the
     * stream's end, for a stop's shutdown(). */
    if (open_stream(s, &c, dup(s->fds[a.slot]), &epoch)) {
        /* then no timeout: a client's stream may idle between its rounds */
        ss__bulk_conn_set_timeout(&c, -1);
        count(s->opened_total);
        ss__log(SS_LOG_INFO, "bulk", "event=stream_opened epoch=%llu tls=%d",
                (unsigned long long)epoch, c.ssl != NULL);
        serve_frames(s, &c, epoch);
    }
    ss__bulk_conn_end(&c);
    const int fd = s->fds[a.slot];
    pthread_mutex_lock(&s->lock);
    close(fd);
    s->fds[a.slot] = -1;
    if (--s->streams == 0)
        pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* A stream's thread, when there is room (else it is closed at once). */
static void start_stream(ss__bulk_server *s, int fd) {
    const struct timeval tv = {TICKET_WAIT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    pthread_mutex_lock(&s->lock);
    int slot = -1;
    for (uint32_t i = 0; i < s->max_streams && slot < 0 && !s->stopping; i++)
        if (s->fds[i] < 0)
            slot = (int)i;
    stream_arg *a = slot >= 0 ? malloc(sizeof *a) : NULL;
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (a) {
        *a = (stream_arg){s, slot};
        s->fds[slot] = fd;
        s->streams++;
        if (pthread_create(&th, &attr, serve_stream, a) != 0) {
            s->fds[slot] = -1;
            s->streams--;
            free(a);
            a = NULL;
        }
    }
    pthread_attr_destroy(&attr);
    pthread_mutex_unlock(&s->lock);
    if (!a) {
        refuse(s);
        ss__log(SS_LOG_WARN, "bulk", "event=stream_refused reason=streams max=%u", s->max_streams);
        close(fd);
    }
}

static void *accept_loop(void *arg) {
    ss__bulk_server *s = arg;
    for (;;) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE)
                continue;
            return NULL; /* the listening socket was shut down: stopping */
        }
        start_stream(s, fd);
    }
}

ss_status ss__bulk_server_start(const ss__bulk_server_config *cfg, const ss__rpc_method *methods,
                                size_t nmethods, void *ctx, ss__bulk_server **out, char *why,
                                size_t whylen) {
    *out = NULL;
    const uint32_t max_streams = cfg->max_streams ? cfg->max_streams : STREAM_FDS;
    if (!cfg->listen || nmethods == 0 || max_streams > STREAM_FDS)
        return SS_ERR_INVALID_ARGUMENT;
    ss__bulk_server *s = calloc(1, sizeof *s);
    if (!s || !(s->max_len = calloc(nmethods, sizeof *s->max_len)) ||
        !(s->series = calloc(nmethods, sizeof *s->series))) {
        if (s)
            free(s->max_len);
        free(s);
        return SS_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < nmethods; i++)
        s->max_len[i] = methods[i].max_request ? methods[i].max_request : cfg->max_message;
    for (int i = 0; i < STREAM_FDS; i++)
        s->fds[i] = -1;
    s->methods = methods;
    s->nmethods = nmethods;
    s->ctx = ctx;
    s->max_streams = max_streams;
    s->max_inflight = cfg->max_inflight_bytes;
    s->map_epoch = cfg->map_epoch;
    s->map_gate = cfg->map_gate;
    if (cfg->metrics) {
        const char *opened[] = {"result", "opened", NULL}, *refused[] = {"result", "refused", NULL};
        const char *sh = "Bulk streams (rpc/bulk.h): opened with a live ticket, or refused "
                         "(no ticket, a bad frame, past the bytes in flight, no room).";
        ss__metrics_counter(cfg->metrics, "shadowsync_bulk_streams_total", sh, opened,
                            &s->opened_total);
        ss__metrics_counter(cfg->metrics, "shadowsync_bulk_streams_total", sh, refused,
                            &s->refused_total);
        for (size_t i = 0; i < nmethods; i++)
            ss__rpc_method_series_register(cfg->metrics, methods[i].path, "bulk", &s->series[i]);
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->idle, NULL);
    char reason[300] = "";
    s->lfd = -1;
    ss_status st = ss__bulk_tls_create(cfg->tls, true, &s->tls, reason, sizeof reason);
    if (st != SS_OK)
        snprintf(why, whylen, "--bulk-listen %s: TLS: %s", cfg->listen, reason);
    else if ((s->lfd = ss__tcp_listen(cfg->listen, &s->port, reason, sizeof reason)) < 0)
        snprintf(why, whylen, "--bulk-listen %s: %s", cfg->listen, reason);
    if (s->lfd < 0 || pthread_create(&s->acceptor, NULL, accept_loop, s) != 0) {
        if (s->lfd >= 0)
            close(s->lfd);
        ss__bulk_tls_destroy(s->tls);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->idle);
        free(s->max_len);
        free(s->series);
        free(s);
        return st != SS_OK ? st : SS_ERR_IO;
    }
    *out = s;
    return SS_OK;
}

int ss__bulk_server_port(const ss__bulk_server *s) {
    return s->port;
}

uint64_t ss__bulk_server_refused(const ss__bulk_server *s) {
    return atomic_load(&((ss__bulk_server *)s)->refused);
}

void ss__bulk_server_stop(ss__bulk_server *s) {
    if (!s)
        return;
    shutdown(s->lfd, SHUT_RDWR); /* accept() returns: the acceptor ends */
    pthread_join(s->acceptor, NULL);
    close(s->lfd);
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    for (int i = 0; i < STREAM_FDS; i++)
        if (s->fds[i] >= 0)
            shutdown(s->fds[i], SHUT_RDWR); /* a stream's next read or write ends */
    while (s->streams > 0)
        pthread_cond_wait(&s->idle, &s->lock);
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->idle);
    ss__bulk_tls_destroy(s->tls);
    free(s->max_len);
    free(s->series);
    free(s);
}
