/* Whole reads and writes on a descriptor: write() and read() may move
 * fewer bytes than asked (a socket's buffer, a signal), so every caller
 * that needs all of them loops; this is that loop, once. */
#ifndef SS_COMMON_FD_IO_H
#define SS_COMMON_FD_IO_H

#include <stdbool.h>
#include <stddef.h>

/* Writes all n bytes of p to fd, going on after short writes and EINTR.
 * false on an error or a write of 0 bytes (errno says why). */
bool ss__write_all(int fd, const void *p, size_t n);
/* ss__write_all on a socket, with MSG_NOSIGNAL: a peer gone is false
 * (EPIPE), not a SIGPIPE that kills a process that did not ignore it (a
 * trainer linking the library). */
bool ss__send_all(int fd, const void *p, size_t n);
/* Reads exactly n bytes into p, going on after short reads and EINTR.
 * false on an error or an end of file before n bytes (errno 0 then). */
bool ss__read_all(int fd, void *p, size_t n);

#endif
