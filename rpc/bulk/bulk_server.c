/* The bulk path's server (bulk.h): a thread accepts (and shuts down
 * streams past their deadline); each stream has a thread of its own that
 * checks the stream's ticket, then reads a frame, runs its method's
 * handler and writes the reply, in turn. The doors that hold against a
 * client with no ticket, or one that stalls: a few connections without a
 * ticket per source address, each with a deadline in all for its
 * handshake and ticket; streams within half the file descriptors; the
 * bytes in flight counted as they arrive, a frame's with a deadline;
 * tickets per writer capped. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fd_io.h"
#include "common/log.h"
#include "common/metrics.h"
#include "rpc/bulk/bulk.h"
#include "rpc/bulk/bulk.pb-c.h"
#include "rpc/bulk/bulk_conn.h"
#include "rpc/method_series.h"
#include "rpc/rpc_internal.h"
#include "rpc/rpc_pb.h"

#define MAX_TICKETS        256
#define TICKETS_PER_WRITER 32   /* a writer asking for more gives up its oldest */
#define STREAM_FDS         1024 /* the most max_streams may be */
/* Connections that have not shown a ticket yet: at most this many from
 * one source address (more are closed at once) and in all (the oldest
 * is closed for a new one: a client shows its ticket within a round
 * trip, so only a connection that waits loses its place); each has
 * OPEN_DEADLINE_S in all for its TLS handshake and ticket. */
#define UNTICKETED_MAX        64
#define UNTICKETED_PER_SOURCE 8
#define OPEN_DEADLINE_S       5
/* A frame, once its first byte is in, has FRAME_DEADLINE_S plus a second
 * per FRAME_MIN_RATE bytes of its length to arrive whole. */
#define FRAME_DEADLINE_S 30
#define FRAME_MIN_RATE   (1u << 20)
/* The acceptor looks for streams past their deadline this often, and
 * waits this long when the process is out of file descriptors. */
#define REAP_EVERY_MS     200
#define ACCEPT_BACKOFF_MS 100

typedef struct ticket {
    uint8_t bytes[SS_BULK_TICKET_BYTES];
    uint64_t expires_ns; /* 0: free */
    uint64_t given_ns;   /* the oldest live one goes first when all are out */
    uint64_t epoch;      /* the shard map's its stream's calls are routed by (0: none) */
    char writer[64];     /* the address of the caller it was given to */
} ticket;

/* A stream's place: its socket (kept open by the slot until the stream's
 * end, so that the acceptor may shut it down) and its deadline. */
typedef struct slot {
    int fd;          /* -1: free */
    bool unticketed; /* has not shown its ticket yet (and was not shut down) */
    bool reaped;     /* shut down for its deadline or evicted */
    uint64_t accepted_ns;
    struct sockaddr_in6 source;   /* the peer's address (v4 mapped) */
    _Atomic uint64_t deadline_ns; /* 0: none (a stream idle between frames) */
} slot;

struct ss__bulk_server {
    int lfd, port;
    const ss__rpc_method **methods; /* the streamed ones of the table given */
    size_t nmethods;
    void *ctx;
    uint64_t *max_len;                 /* per method */
    uint64_t max_any;                  /* the largest of them */
    uint32_t max_streams;              /* streams at once: the config's, within the fd budget */
    uint32_t max_unticketed;           /* UNTICKETED_MAX, within half of max_streams */
    size_t max_inflight;               /* 0: none */
    const _Atomic uint64_t *map_epoch; /* NULL: no map */
    pthread_rwlock_t *map_gate;
    _Atomic size_t inflight; /* request bytes held now, counted as they arrive */
    pthread_t acceptor;
    _Atomic bool stopping;
    pthread_mutex_t lock; /* tickets, slots, streams */
    pthread_cond_t idle;  /* streams fell to 0 */
    ticket tickets[MAX_TICKETS];
    slot slots[STREAM_FDS];
    uint32_t streams, unticketed;
    _Atomic uint64_t refused, backoffs;
    ss__counter *opened_total, *refused_total; /* NULL: no metrics */
    ss__counter *backoffs_total, *evicted_total;
    ss__rpc_method_series *series; /* per method, as the gRPC server's */
    ss__bulk_tls *tls;             /* NULL: plain TCP */
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

/* The slot a new ticket takes: a free one unless the writer holds
 * TICKETS_PER_WRITER (then its own oldest), else the oldest of all. A
 * ticket is used within a round trip of being given, so the oldest live
 * one is a hoarder's: one writer cannot starve the others. */
static ticket *ticket_slot(ss__bulk_server *s, const char *writer, uint64_t now, bool *evicts) {
    ticket *free_slot = NULL, *oldest = NULL, *writers_oldest = NULL;
    int writers = 0;
    for (int i = 0; i < MAX_TICKETS; i++) {
        ticket *t = &s->tickets[i];
        if (t->expires_ns <= now) {
            free_slot = free_slot ? free_slot : t;
            continue;
        }
        if (!oldest || t->given_ns < oldest->given_ns)
            oldest = t;
        if (strcmp(t->writer, writer) == 0) {
            writers++;
            if (!writers_oldest || t->given_ns < writers_oldest->given_ns)
                writers_oldest = t;
        }
    }
    *evicts = writers >= TICKETS_PER_WRITER || !free_slot;
    return writers >= TICKETS_PER_WRITER ? writers_oldest : free_slot ? free_slot : oldest;
}

ss_status ss__bulk_server_ticket(ss__bulk_server *s, uint64_t epoch, const char *writer,
                                 uint8_t out[SS_BULK_TICKET_BYTES]) {
    if (getrandom(out, SS_BULK_TICKET_BYTES, 0) != SS_BULK_TICKET_BYTES)
        return SS_ERR_IO;
    const uint64_t now = ss__now_ns();
    bool evicts;
    pthread_mutex_lock(&s->lock);
    ticket *t = ticket_slot(s, writer ? writer : "", now, &evicts);
    memcpy(t->bytes, out, SS_BULK_TICKET_BYTES);
    t->expires_ns = now + SS_BULK_TICKET_TTL_S * 1000000000ull;
    t->given_ns = now;
    t->epoch = epoch;
    snprintf(t->writer, sizeof t->writer, "%s", writer ? writer : "");
    pthread_mutex_unlock(&s->lock);
    if (evicts)
        count(s->evicted_total);
    return SS_OK;
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

typedef enum frame_end { FRAME_READ, FRAME_BROKEN, FRAME_OVER_BUDGET } frame_end;

/* A request's len bytes into a block whose END is 64-byte aligned, as the
 * gRPC server's: a tail field of floats runs to the end of its message
 * (rpc/pb_wire.h), so the handler reads the floats in place. Its bytes
 * count in the server's in-flight bytes as they arrive (*counted: how
 * many; the caller gives them back): a frame that is announced but not
 * sent holds nothing. */
static frame_end read_request(ss__bulk_server *s, ss__bulk_conn *c, uint64_t len, void **block,
                              uint8_t **req, size_t *counted) {
    const size_t pad = (64 - len % 64) % 64;
    if (!(*block = aligned_alloc(64, len + pad + 64)))
        return FRAME_BROKEN;
    uint8_t *buf = (uint8_t *)*block + pad;
    for (uint64_t got = 0; got < len;) {
        const ssize_t k = ss__bulk_conn_read_some(c, buf + got, len - got);
        if (k <= 0)
            return FRAME_BROKEN;
        got += (uint64_t)k;
        *counted += (size_t)k;
        const size_t held = atomic_fetch_add(&s->inflight, (size_t)k) + (size_t)k;
        if (s->max_inflight && held > s->max_inflight) {
            ss__log(SS_LOG_WARN, "bulk", "event=stream_closed reason=inflight held=%zu max=%zu",
                    held, s->max_inflight);
            return FRAME_OVER_BUDGET;
        }
    }
    *req = buf;
    return FRAME_READ;
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

/* A frame's head. Waiting for its first byte has no deadline (a client's
 * stream idles between its rounds); from then on the frame has
 * FRAME_DEADLINE_S for its head and its request, more for a long one. */
static bool read_head(ss__bulk_conn *c, slot *sl, uint8_t head[SS_BULK_REQ_HEAD]) {
    if (!ss__bulk_conn_read(c, head, 1))
        return false;
    atomic_store(&sl->deadline_ns, ss__now_ns() + FRAME_DEADLINE_S * 1000000000ull);
    return ss__bulk_conn_read(c, head + 1, SS_BULK_REQ_HEAD - 1);
}

/* The index of the streamed method named by path (path_len bytes, made
 * a string here); s->nmethods: none. */
static size_t method_index(const ss__bulk_server *s, char *path, uint32_t path_len) {
    path[path_len] = '\0';
    size_t i = 0;
    while (i < s->nmethods && strcmp(s->methods[i]->path, path) != 0)
        i++;
    return i;
}

/* One frame's request read and its method run; false when the stream
 * ends or broke a rule (said why). */
static bool serve_frame(ss__bulk_server *s, ss__bulk_conn *c, slot *sl, uint64_t epoch) {
    uint8_t head[SS_BULK_REQ_HEAD];
    if (!read_head(c, sl, head))
        return false;
    uint32_t path_len;
    uint64_t len;
    char path[SS_BULK_PATH_MAX + 1] = "";
    const bool framed = ss__bulk_request_parse(head, s->max_any, &path_len, &len) == SS_OK &&
                        ss__bulk_conn_read(c, path, path_len);
    const size_t method = framed ? method_index(s, path, path_len) : s->nmethods;
    if (method == s->nmethods || len > s->max_len[method]) {
        refuse(s);
        ss__log(SS_LOG_WARN, "bulk", "event=stream_closed reason=bad_frame method=\"%s\" len=%llu",
                framed ? path : "", (unsigned long long)len);
        return false;
    }
    const uint64_t arrived_ns = ss__now_ns();
    atomic_fetch_add(&sl->deadline_ns, len / FRAME_MIN_RATE * 1000000000ull);
    void *block = NULL;
    uint8_t *req = NULL;
    size_t counted = 0;
    const frame_end read = read_request(s, c, len, &block, &req, &counted);
    atomic_store(&sl->deadline_ns, 0);
    if (read != FRAME_READ) {
        if (read == FRAME_OVER_BUDGET)
            refuse(s);
        free(block);
        atomic_fetch_sub(&s->inflight, counted);
        return false;
    }
    const ss__rpc_method *m = s->methods[method];
    ss__rpc_reply reply = {.status = SS_OK};
    /* as the gRPC server runs it; a stream has no door, so a blocking
     * call's epoch is checked here too */
    (void)ss__rpc_run_routed(m, s->ctx, s->map_epoch, s->map_gate, epoch != 0, epoch, true, req,
                             len, &reply);
    ss__rpc_method_series_count(&s->series[method], reply.status, len, reply.len, arrived_ns);
    free(block);
    atomic_fetch_sub(&s->inflight, counted);
    const bool sent = write_reply(c, &reply);
    free(reply.data_block ? reply.data_block : reply.data);
    return sent;
}

/* The slot no longer counts as waiting for its ticket (under s->lock). */
static void leave_unticketed(ss__bulk_server *s, slot *sl) {
    if (sl->unticketed) {
        sl->unticketed = false;
        s->unticketed--;
    }
}

/* The slot's socket shut down: its thread's read or write ends, and the
 * stream with it (under s->lock). */
static void shut(ss__bulk_server *s, slot *sl, const char *reason) {
    ss__log(SS_LOG_WARN, "bulk", "event=stream_closed reason=%s", reason);
    sl->reaped = true;
    shutdown(sl->fd, SHUT_RDWR);
    leave_unticketed(s, sl);
    refuse(s);
}

/* Whether the acceptor shut the slot down (a deadline, an eviction): it
 * counted the stream refused and said why then. */
static bool was_shut(ss__bulk_server *s, slot *sl) {
    pthread_mutex_lock(&s->lock);
    const bool reaped = sl->reaped;
    pthread_mutex_unlock(&s->lock);
    return reaped;
}

/* The stream's connection (its TLS handshake when the server has TLS)
 * and its ticket, within the slot's deadline (the acceptor shuts the
 * socket down past it); false when either fails (refused, said why). */
static bool open_stream(ss__bulk_server *s, ss__bulk_conn *c, slot *sl, uint64_t *epoch) {
    char why[300] = "";
    uint8_t t[SS_BULK_TICKET_BYTES];
    if (ss__bulk_conn_start(c, sl->fd, s->tls, true, NULL, OPEN_DEADLINE_S * 1000, why,
                            sizeof why) != SS_OK) {
        if (!was_shut(s, sl)) {
            refuse(s);
            ss__log(SS_LOG_WARN, "bulk", "event=stream_refused reason=tls why=\"%s\"", why);
        }
        return false;
    }
    if (!ss__bulk_conn_read(c, t, sizeof t) || !take_ticket(s, t, epoch)) {
        if (!was_shut(s, sl)) {
            refuse(s);
            ss__log(SS_LOG_WARN, "bulk", "event=stream_refused reason=ticket");
        }
        return false;
    }
    pthread_mutex_lock(&s->lock);
    const bool reaped = sl->reaped; /* shut down between its ticket and here */
    leave_unticketed(s, sl);
    atomic_store(&sl->deadline_ns, 0);
    pthread_mutex_unlock(&s->lock);
    uint8_t opened[SS_BULK_OPENED_BYTES];
    ss__bulk_opened(opened);
    return !reaped && ss__bulk_conn_send(c, opened, sizeof opened);
}

typedef struct stream_arg {
    ss__bulk_server *s;
    slot *sl;
} stream_arg;

static void *serve_stream(void *arg) {
    stream_arg a = *(stream_arg *)arg;
    free(arg);
    ss__bulk_server *s = a.s;
    ss__bulk_conn c;
    uint64_t epoch = 0;
    if (open_stream(s, &c, a.sl, &epoch)) {
        /* then no timeout: a client's stream may idle between its rounds */
        ss__bulk_conn_set_timeout(&c, -1);
        count(s->opened_total);
        ss__log(SS_LOG_INFO, "bulk", "event=stream_opened epoch=%llu tls=%d",
                (unsigned long long)epoch, c.ssl != NULL);
        while (serve_frame(s, &c, a.sl, epoch))
            ;
    }
    /* The slot owns the socket: closed under the lock, so that the
     * acceptor never shuts down a number the system gave out again. */
    c.fd = -1;
    ss__bulk_conn_end(&c);
    pthread_mutex_lock(&s->lock);
    close(a.sl->fd);
    a.sl->fd = -1;
    leave_unticketed(s, a.sl);
    if (--s->streams == 0)
        pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static bool same_source(const struct sockaddr_in6 *a, const struct sockaddr_in6 *b) {
    return memcmp(&a->sin6_addr, &b->sin6_addr, sizeof a->sin6_addr) == 0;
}

/* Why a new connection from source gets no slot now ("": it does), under
 * s->lock: the fd budget, then the few connections per source address
 * that may wait for their ticket. Past the budget of those in all, the
 * oldest waiting one makes room. */
static const char *no_room(ss__bulk_server *s, const struct sockaddr_in6 *source) {
    if (s->streams >= s->max_streams)
        return "streams";
    uint32_t from_source = 0;
    slot *oldest = NULL;
    for (uint32_t i = 0; i < STREAM_FDS; i++) {
        slot *sl = &s->slots[i];
        if (sl->fd < 0 || !sl->unticketed)
            continue;
        from_source += same_source(&sl->source, source);
        if (!oldest || sl->accepted_ns < oldest->accepted_ns)
            oldest = sl;
    }
    if (from_source >= UNTICKETED_PER_SOURCE)
        return "unticketed_source";
    if (s->unticketed >= s->max_unticketed && oldest)
        shut(s, oldest, "unticketed_evicted");
    return "";
}

/* A stream's thread, when there is room (else it is closed at once). */
static void start_stream(ss__bulk_server *s, int fd, const struct sockaddr_in6 *source) {
    const struct timeval tv = {OPEN_DEADLINE_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ss__tcp_keepalive(fd); /* a client gone in a partition frees its slot */
    pthread_mutex_lock(&s->lock);
    const char *full = atomic_load(&s->stopping) ? "stopping" : no_room(s, source);
    slot *sl = NULL;
    for (uint32_t i = 0; i < STREAM_FDS && !*full && !sl; i++)
        if (s->slots[i].fd < 0)
            sl = &s->slots[i];
    stream_arg *a = sl ? malloc(sizeof *a) : NULL;
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (a) {
        *a = (stream_arg){s, sl};
        sl->fd = fd;
        sl->unticketed = true;
        sl->reaped = false;
        sl->source = *source;
        sl->accepted_ns = ss__now_ns();
        atomic_store(&sl->deadline_ns, sl->accepted_ns + OPEN_DEADLINE_S * 1000000000ull);
        s->streams++;
        s->unticketed++;
        if (pthread_create(&th, &attr, serve_stream, a) != 0) {
            sl->fd = -1;
            s->streams--;
            leave_unticketed(s, sl);
            free(a);
            a = NULL;
        }
    }
    pthread_attr_destroy(&attr);
    const uint32_t streams = s->streams;
    pthread_mutex_unlock(&s->lock);
    if (!a) {
        refuse(s);
        ss__log(SS_LOG_WARN, "bulk", "event=stream_refused reason=%s streams=%u max=%u",
                *full ? full : "no_thread", streams, s->max_streams);
        close(fd);
    }
}

/* Streams past their deadline (a ticket or TLS handshake not in within
 * OPEN_DEADLINE_S of the connection, a frame's bytes not within theirs)
 * are shut down: their thread's read ends and the stream with it. */
static void reap(ss__bulk_server *s) {
    const uint64_t now = ss__now_ns();
    pthread_mutex_lock(&s->lock);
    for (uint32_t i = 0; i < STREAM_FDS; i++) {
        slot *sl = &s->slots[i];
        const uint64_t deadline = atomic_load(&sl->deadline_ns);
        if (sl->fd < 0 || sl->reaped || deadline == 0 || deadline > now)
            continue;
        shut(s, sl, sl->unticketed ? "ticket_deadline" : "frame_deadline");
    }
    pthread_mutex_unlock(&s->lock);
}

/* Out of file descriptors: the pending connection stays in the listen
 * queue while the acceptor waits (a loop on accept would spin a core). */
static void back_off(ss__bulk_server *s) {
    const uint64_t n = atomic_fetch_add(&s->backoffs, 1);
    count(s->backoffs_total);
    if (n % 100 == 0)
        ss__log(SS_LOG_WARN, "bulk", "event=accept_backoff reason=\"%s\" times=%llu",
                strerror(errno), (unsigned long long)n + 1);
    poll(NULL, 0, ACCEPT_BACKOFF_MS);
}

static void *accept_loop(void *arg) {
    ss__bulk_server *s = arg;
    while (!atomic_load(&s->stopping)) {
        struct pollfd pf = {.fd = s->lfd, .events = POLLIN};
        const int ready = poll(&pf, 1, REAP_EVERY_MS);
        reap(s);
        if (ready <= 0)
            continue;
        struct sockaddr_storage from;
        socklen_t fromlen = sizeof from;
        int fd = accept4(s->lfd, (struct sockaddr *)&from, &fromlen, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                back_off(s);
            else if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN)
                return NULL; /* the listening socket was shut down: stopping */
            continue;
        }
        struct sockaddr_in6 source = {.sin6_family = AF_INET6};
        if (from.ss_family == AF_INET6) {
            source = *(struct sockaddr_in6 *)&from;
        } else if (from.ss_family == AF_INET) { /* as ::ffff:a.b.c.d */
            source.sin6_addr.s6_addr[10] = source.sin6_addr.s6_addr[11] = 0xff;
            memcpy(&source.sin6_addr.s6_addr[12], &((struct sockaddr_in *)&from)->sin_addr, 4);
        }
        start_stream(s, fd, &source);
    }
    return NULL;
}

/* The streams the process's file descriptors allow: half the soft
 * RLIMIT_NOFILE, the rest kept for gRPC, HTTP and the stores' files (a
 * stream holds one). */
static uint32_t fd_budget(uint32_t max_streams) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return max_streams;
    const rlim_t half = rl.rlim_cur / 2;
    return half < max_streams ? (uint32_t)(half ? half : 1) : max_streams;
}

ss_status ss__bulk_server_start(const ss__bulk_server_config *cfg, const ss__rpc_method *methods,
                                size_t nmethods, void *ctx, ss__bulk_server **out, char *why,
                                size_t whylen) {
    *out = NULL;
    const uint32_t max_streams = cfg->max_streams ? cfg->max_streams : STREAM_FDS;
    size_t streamed = 0;
    for (size_t i = 0; i < nmethods; i++)
        streamed += methods[i].streamed;
    if (!cfg->listen || streamed == 0 || max_streams > STREAM_FDS)
        return SS_ERR_INVALID_ARGUMENT;
    ss__bulk_server *s = calloc(1, sizeof *s);
    if (!s || !(s->max_len = calloc(streamed, sizeof *s->max_len)) ||
        !(s->series = calloc(streamed, sizeof *s->series)) ||
        !(s->methods = calloc(streamed, sizeof *s->methods))) {
        if (s) {
            free(s->max_len);
            free(s->series);
            free(s->methods);
        }
        free(s);
        return SS_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < nmethods; i++) {
        if (!methods[i].streamed)
            continue;
        const size_t k = s->nmethods++;
        s->methods[k] = &methods[i];
        s->max_len[k] = methods[i].max_request ? methods[i].max_request : cfg->max_message;
        s->max_any = s->max_len[k] > s->max_any ? s->max_len[k] : s->max_any;
    }
    for (int i = 0; i < STREAM_FDS; i++)
        s->slots[i].fd = -1;
    s->ctx = ctx;
    s->max_streams = fd_budget(max_streams);
    s->max_unticketed = s->max_streams / 2 < UNTICKETED_MAX ? s->max_streams / 2 : UNTICKETED_MAX;
    s->max_unticketed = s->max_unticketed ? s->max_unticketed : 1;
    s->max_inflight = cfg->max_inflight_bytes;
    s->map_epoch = cfg->map_epoch;
    s->map_gate = cfg->map_gate;
    if (cfg->metrics) {
        const char *opened[] = {"result", "opened", NULL}, *refused[] = {"result", "refused", NULL};
        const char *sh = "Bulk streams (rpc/bulk/bulk.h): opened with a live ticket, or refused "
                         "(no ticket, a bad frame, past the bytes in flight, no room).";
        ss__metrics_counter(cfg->metrics, "shadowsync_bulk_streams_total", sh, opened,
                            &s->opened_total);
        ss__metrics_counter(cfg->metrics, "shadowsync_bulk_streams_total", sh, refused,
                            &s->refused_total);
        ss__metrics_counter(cfg->metrics, "shadowsync_bulk_accept_backoffs_total",
                            "Times the bulk port's acceptor waited, the process out of file "
                            "descriptors (EMFILE), instead of accepting.",
                            NULL, &s->backoffs_total);
        ss__metrics_counter(cfg->metrics, "shadowsync_bulk_tickets_evicted_total",
                            "Bulk tickets given in place of a live one (its writer held the most "
                            "a writer may, or all were out): the oldest goes.",
                            NULL, &s->evicted_total);
        for (size_t i = 0; i < s->nmethods; i++)
            ss__rpc_method_series_register(cfg->metrics, s->methods[i]->path, "bulk",
                                           &s->series[i]);
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
        free(s->methods);
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

uint64_t ss__bulk_server_backoffs(const ss__bulk_server *s) {
    return atomic_load(&((ss__bulk_server *)s)->backoffs);
}

void ss__bulk_server_stop(ss__bulk_server *s) {
    if (!s)
        return;
    atomic_store(&s->stopping, true); /* the acceptor ends within REAP_EVERY_MS */
    shutdown(s->lfd, SHUT_RDWR);
    pthread_join(s->acceptor, NULL);
    close(s->lfd);
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < STREAM_FDS; i++)
        if (s->slots[i].fd >= 0)
            shutdown(s->slots[i].fd, SHUT_RDWR); /* a stream's next read or write ends */
    while (s->streams > 0)
        pthread_cond_wait(&s->idle, &s->lock);
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->idle);
    ss__bulk_tls_destroy(s->tls);
    free(s->max_len);
    free(s->series);
    free(s->methods);
    free(s);
}

/* Bulk/Ticket: a ticket for the caller (through the gRPC server's door:
 * the token, a writer certificate), given to its host, with the port and
 * the paths the streams serve. */
static void serve_ticket(void *ctx, void *request, ss__rpc_reply *reply) {
    ss__bulk_server *s = ctx;
    const Shadowsync__V1__BulkTicketRequest *m = request;
    uint8_t t[SS_BULK_TICKET_BYTES];
    char writer[64] = "";
    (void)ss__rpc_current_peer_host(writer, sizeof writer);
    if (ss__bulk_server_ticket(s, m->epoch, writer, t) != SS_OK) {
        ss__rpc_reply_fail(reply, SS_ERR_IO, "no bulk ticket now: no randomness from the system");
        return;
    }
    char *paths[SS_BULK_MAX_METHODS];
    Shadowsync__V1__BulkTicketReply out = SHADOWSYNC__V1__BULK_TICKET_REPLY__INIT;
    out.ticket = (ProtobufCBinaryData){sizeof t, t};
    out.port = (uint32_t)s->port;
    out.n_methods = s->nmethods < SS_BULK_MAX_METHODS ? s->nmethods : SS_BULK_MAX_METHODS;
    for (size_t i = 0; i < out.n_methods; i++)
        paths[i] = (char *)s->methods[i]->path;
    out.methods = paths;
    ss__rpc_reply_pack(&out.base, reply);
}

static const ss__rpc_request_type ticket_request = {
    &shadowsync__v1__bulk_ticket_request__descriptor, serve_ticket, NULL, 0, 0};

ss__rpc_method ss__bulk_server_ticket_method(ss__bulk_server *s) {
    return (ss__rpc_method){.path = SS_BULK_M_TICKET,
                            .ctx = s,
                            .max_request = SS_RPC_SMALL_REQUEST,
                            .request = &ticket_request};
}
