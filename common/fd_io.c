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
