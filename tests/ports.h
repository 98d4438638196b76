/* A port for a server that a test stops and starts again on the same
 * address (a PS restarted from its checkpoint, a tree member restarted).
 *
 * A port the kernel gives out (a bind to port 0, or the local end of any
 * client's connect) can be taken by another process in the gap between
 * the stop and the restart: under ctest -j the restart then failed with
 * "Address already in use". The kernel never gives out a port below
 * ip_local_port_range, and a lock file held for the test process's life
 * keeps the other tests, which pick the same way, off the one chosen. */
#ifndef SS_TESTS_PORTS_H
#define SS_TESTS_PORTS_H

#include <arpa/inet.h>
#include <check.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/names.h"

/* Can nobody else bind 127.0.0.1:port now? */
static inline int port_is_free(int port) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof sa) == 0;
    if (s >= 0)
        close(s);
    return ok;
}

/* A free port below the kernel's ephemeral range, locked for this process
 * (the lock's descriptor stays open until the process exits). */
static inline int test_reserve_port(void) {
    int low = 32768, high;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d %d", &low, &high) != 2)
            low = 32768;
        fclose(f);
    }
    const int lo = low > 12000 ? low - 10000 : 1024, span = low - lo;
    ck_assert_int_gt(span, 100);
    mkdir("/tmp/ss-test-ports", 0700);
    unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL);
    for (int tries = 0; tries < 1000; tries++) {
        const int port = lo + (int)(rand_r(&seed) % (unsigned)span);
        char lock[64];
        snprintf(lock, sizeof lock, "/tmp/ss-test-ports/%d.lock", port);
        int fd = open(lock, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0)
            continue;
        if (flock(fd, LOCK_EX | LOCK_NB) != 0 || !port_is_free(port)) {
            close(fd);
            continue;
        }
        return port; /* fd stays open: the lock lives as long as we do */
    }
    ck_abort_msg("no free port below %d in 1000 tries", low);
    return 0;
}

/* A socket listening on 127.0.0.1 that nobody accepts on: a connect to
 * *port succeeds and then nothing answers. Returns the socket. */
static inline int test_silent_listener(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(fd, 16), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

/* A TCP connection to target ("host:port") from the address src (NULL:
 * the kernel's choice), with a 10 s read timeout. */
static inline int test_connect(const char *src, const char *target) {
    char host[64];
    unsigned port;
    ck_assert(ss__address_split(target, host, sizeof host, &port));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    if (src) {
        struct sockaddr_in from = {.sin_family = AF_INET};
        inet_pton(AF_INET, src, &from.sin_addr);
        ck_assert_int_eq(bind(fd, (struct sockaddr *)&from, sizeof from), 0);
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &a.sin_addr);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    const struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

#endif
