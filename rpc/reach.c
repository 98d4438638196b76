/* Plain TCP beside gRPC: whether a server can be reached at all, asked of
 * TCP directly (gRPC's calls wait for a channel to become ready,
 * grpc_transport.c says why, so a refused connection would show only as
 * a call's deadline, 10 s later and without the reason); a connection made
 * within a deadline, and a listening socket (the bulk stream, the benches'
 * socket floors). */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/names.h"
#include "rpc/rpc.h"

/* A SYN unanswered this long is sent again on a new socket, the wait
 * doubling: the kernel's own first retransmit comes only after 1 s
 * (TCP_TIMEOUT_INIT), so on a link that drops 1% of packets a lost SYN
 * held a stream, a reachability check or a restarted agent's rejoin for
 * a whole second. The first attempt stays open meanwhile: on a long round
 * trip it is the one that connects. */
#define RESYN_FIRST_MS 200
#define RESYN_MAX      3 /* attempts in flight at once */

/* A non-blocking connect() to ai started: 0 with *fd in progress (or
 * connected), or an errno. */
static int start_attempt(const struct addrinfo *ai, int *fd) {
    *fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (*fd < 0)
        return errno;
    if (connect(*fd, ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS)
        return 0;
    const int err = errno;
    close(*fd);
    return err;
}

/* Polls the attempts in p[0..*n) for up to ms: the index of one that
 * connected, or -1. An attempt that failed is closed and taken out, its
 * errno in *err. */
static int poll_attempts(struct pollfd *p, size_t *n, int ms, int *err) {
    int r;
    while ((r = poll(p, *n, ms)) < 0 && errno == EINTR)
        ;
    if (r < 0) {
        *err = errno;
        return -1;
    }
    for (size_t i = 0; r > 0 && i < *n; i++) {
        if (!p[i].revents)
            continue;
        int e = 0;
        socklen_t len = sizeof e;
        if (getsockopt(p[i].fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0)
            e = errno;
        if (e == 0)
            return (int)i;
        *err = e;
        close(p[i].fd);
        p[i--] = p[--*n];
    }
    return -1;
}

/* A connection to ai within the time left before deadline_ns (a signal
 * does not end the wait), its SYN sent again on new sockets while
 * unanswered; 0 or an errno (ETIMEDOUT when the time ran out). On 0,
 * *out is the connected socket, blocking again. */
static int connect_one(const struct addrinfo *ai, uint64_t deadline_ns, int *out) {
    struct pollfd p[RESYN_MAX];
    size_t n = 0;
    int err = ETIMEDOUT, won = -1;
    uint64_t wait_ms = RESYN_FIRST_MS, next_ns = 0;
    for (uint64_t now = ss__now_ns(); won < 0 && now < deadline_ns; now = ss__now_ns()) {
        if (n < RESYN_MAX && now >= next_ns) {
            int fd, e = start_attempt(ai, &fd);
            if (e != 0 && n == 0) {
                err = e;
                break;
            }
            if (e == 0)
                p[n++] = (struct pollfd){.fd = fd, .events = POLLOUT};
            /* a resend that could not start (out of fds): the attempts in
             * flight go on, and no more are started */
            next_ns = e == 0 ? now + wait_ms * 1000000 : UINT64_MAX;
            wait_ms *= 2;
        }
        uint64_t until = n < RESYN_MAX && next_ns < deadline_ns ? next_ns : deadline_ns;
        won = poll_attempts(p, &n, (int)((until - now + 999999) / 1000000), &err);
        if (won < 0 && n == 0 && err != ETIMEDOUT)
            break; /* refused, unreachable: no use sending again */
    }
    int fd = won >= 0 ? p[won].fd : -1;
    for (size_t i = 0; i < n; i++)
        if (p[i].fd != fd)
            close(p[i].fd);
    if (fd < 0)
        return err;
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
        err = errno;
        close(fd);
        return err;
    }
    *out = fd;
    return 0;
}

/* address's TCP endpoints (passive: to listen on), or NULL with why. */
static struct addrinfo *resolve(const char *address, bool passive, char *why, size_t whylen) {
    char host[256], service[8];
    unsigned port;
    if (!ss__address_split(address, host, sizeof host, &port)) {
        snprintf(why, whylen, "not %s", SS_ADDRESS_RULE);
        return NULL;
    }
    snprintf(service, sizeof service, "%u", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0},
                    *list = NULL;
    int gai = getaddrinfo(host, service, &hints, &list);
    if (gai != 0) {
        snprintf(why, whylen, "%s", gai == EAI_NONAME ? "no such host" : gai_strerror(gai));
        return NULL;
    }
    return list;
}

int ss__tcp_connect(const char *address, uint32_t timeout_ms, char *why, size_t whylen) {
    struct addrinfo *list = resolve(address, false, why, whylen);
    if (!list)
        return -1;
    uint64_t deadline = ss__now_ns() + (uint64_t)timeout_ms * 1000000;
    int err = ETIMEDOUT, fd = -1;
    for (const struct addrinfo *ai = list; ai && err; ai = ai->ai_next)
        err = connect_one(ai, deadline, &fd);
    freeaddrinfo(list);
    if (err == ETIMEDOUT)
        snprintf(why, whylen, "no answer within %u ms", timeout_ms);
    else if (err)
        snprintf(why, whylen, "%s", strerror(err)); /* "Connection refused" */
    if (err && why[0])
        why[0] = (char)(why[0] >= 'A' && why[0] <= 'Z' ? why[0] - 'A' + 'a' : why[0]);
    return err ? -1 : fd;
}

void ss__tcp_keepalive(int fd) {
    const int one = 1, idle_s = SS_RPC_KEEPALIVE_MS / 1000,
              probes = SS_RPC_KEEPALIVE_TIMEOUT_MS / SS_RPC_KEEPALIVE_MS,
              user_ms = SS_RPC_KEEPALIVE_MS + SS_RPC_KEEPALIVE_TIMEOUT_MS;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle_s, sizeof idle_s);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof user_ms);
}

bool ss__tcp_reachable(const char *address, uint32_t timeout_ms, char *why, size_t whylen) {
    char host[256];
    unsigned port;
    if (!ss__address_split(address, host, sizeof host, &port))
        return true; /* not host:port (a gRPC URI): gRPC's own business */
    int fd = ss__tcp_connect(address, timeout_ms, why, whylen);
    if (fd >= 0)
        close(fd);
    return fd >= 0;
}

int ss__tcp_listen(const char *address, int *port, char *why, size_t whylen) {
    struct addrinfo *list = resolve(address, true, why, whylen);
    if (!list)
        return -1;
    int fd = socket(list->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_storage a;
    socklen_t alen = sizeof a;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, list->ai_addr, list->ai_addrlen) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
        snprintf(why, whylen, "%s", strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
    } else {
        *port = ntohs(a.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&a)->sin6_port
                                              : ((struct sockaddr_in *)&a)->sin_port);
    }
    freeaddrinfo(list);
    return fd;
}
