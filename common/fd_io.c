/* Whole reads and writes on a descriptor (fd_io.h). */
#include "common/fd_io.h"

#include <errno.h>
#include <unistd.h>

bool ss__write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        c += k;
        n -= (size_t)k;
    }
    return true;
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
