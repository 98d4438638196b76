/* A whole file read into memory (read_file.h). */
#include "common/read_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads fd to its end into a buffer sized for hint bytes at first, grown
 * (doubled) as more come; SS_ERR_TOO_LARGE past max_bytes. The buffer
 * always has room for one byte past what is expected, so a file longer
 * than that shows itself, and for the NUL. */
static ss_status read_to_end(int fd, size_t hint, size_t max_bytes, unsigned char **buf,
                             size_t *len) {
    if (max_bytes > SIZE_MAX / 2)
        max_bytes = SIZE_MAX / 2;
    size_t cap = hint < max_bytes ? hint : max_bytes, n = 0;
    unsigned char *b = malloc(cap + 2);
    ss_status st = b ? SS_OK : SS_ERR_NO_MEMORY;
    while (st == SS_OK) {
        if (n > cap && cap == max_bytes) {
            st = SS_ERR_TOO_LARGE;
            break;
        }
        if (n > cap) {
            cap = max_bytes - cap <= cap + 4096 ? max_bytes : 2 * cap + 4096;
            unsigned char *nb = realloc(b, cap + 2);
            if (!nb) {
                st = SS_ERR_NO_MEMORY;
                break;
            }
            b = nb;
        }
        const ssize_t k = read(fd, b + n, cap + 1 - n);
        if (k < 0 && errno != EINTR)
            st = SS_ERR_IO;
        else if (k == 0)
            break;
        else if (k > 0)
            n += (size_t)k;
    }
    if (st != SS_OK) {
        const int e = errno;
        free(b);
        errno = e;
        return st;
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return SS_OK;
}

ss_status ss__read_fd(int fd, size_t max_bytes, unsigned char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return SS_ERR_IO;
    if (S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > max_bytes)
        return SS_ERR_TOO_LARGE;
    return read_to_end(fd, S_ISREG(sb.st_mode) ? (size_t)sb.st_size : 4096, max_bytes, buf, len);
}

ss_status ss__read_file(const char *path, ss__file_origin origin, size_t max_bytes,
                        unsigned char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    if (!path) {
        errno = EINVAL;
        return SS_ERR_IO;
    }
    /* Ours: O_NONBLOCK too, so that a FIFO in the file's place is refused
     * below rather than waited on here for a writer. */
    const int fd =
        open(path, O_RDONLY | O_CLOEXEC | (origin == SS_FILE_OURS ? O_NOFOLLOW | O_NONBLOCK : 0));
    if (fd < 0)
        return errno == ENOENT ? SS_ERR_NOT_FOUND : SS_ERR_IO;
    struct stat sb;
    ss_status st = SS_ERR_IO;
    if (fstat(fd, &sb) != 0)
        ; /* errno says why */
    else if (origin == SS_FILE_OURS && !S_ISREG(sb.st_mode))
        errno = EINVAL;
    else
        st = ss__read_fd(fd, max_bytes, buf, len);
    const int e = errno;
    close(fd);
    errno = e;
    return st;
}
