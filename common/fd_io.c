/* Whole reads and writes on a descriptor (fd_io.h). */
#include "common/fd_io.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

/* The loop of both: send (MSG_NOSIGNAL) on a socket, else write. */
static bool out_all(int fd, const void *p, size_t n, bool socket) {
    const char *c = p;
    while (n) {
        ssize_t k = socket ? send(fd, c, n, MSG_NOSIGNAL) : write(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        c += k;
        n -= (size_t)k;
    }
    return true;
}

bool ss__write_all(int fd, const void *p, size_t n) {
    return out_all(fd, p, n, false);
}

bool ss__send_all(int fd, const void *p, size_t n) {
    return out_all(fd, p, n, true);
}

/* Moves iov[*at..n) past k bytes sent. */
static void advance(struct iovec *iov, int n, int *at, size_t k) {
    while (*at < n && k >= iov[*at].iov_len) {
        k -= iov[*at].iov_len;
        iov[(*at)++].iov_len = 0;
    }
    if (*at < n) {
        iov[*at].iov_base = (char *)iov[*at].iov_base + k;
        iov[*at].iov_len -= k;
    }
}

int ss__send_iov(int fd, struct iovec *iov, int n, bool dontwait) {
    int at = 0;
    advance(iov, n, &at, 0); /* past empty pieces */
    while (at < n) {
        struct msghdr m = {.msg_iov = iov + at, .msg_iovlen = (size_t)(n - at)};
        ssize_t k = sendmsg(fd, &m, MSG_NOSIGNAL | (dontwait ? MSG_DONTWAIT : 0));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && dontwait && (errno == EAGAIN || errno == EWOULDBLOCK))
            return at;
        if (k <= 0)
            return -1;
        advance(iov, n, &at, (size_t)k);
    }
    return n;
}

bool ss__read_all(int fd, void *p, size_t n) {
    char *c = p;
    while (n) {
        ssize_t k = read(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            if (k == 0)
                errno = 0;
            return false;
        }
        c += k;
        n -= (size_t)k;
    }
    return true;
}
