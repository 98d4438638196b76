/* Whole reads and writes on a descriptor: write() and read() may move
 * fewer bytes than asked (a socket's buffer, a signal), so every caller
 * that needs all of them loops; this is that loop, once. */
#ifndef SS_COMMON_FD_IO_H
#define SS_COMMON_FD_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/uio.h>

/* Writes all n bytes of p to fd, going on after short writes and EINTR.
 * false on an error or a write of 0 bytes (errno says why). */
bool ss__write_all(int fd, const void *p, size_t n);
/* ss__write_all on a socket, with MSG_NOSIGNAL: a peer gone is false
 * (EPIPE), not a SIGPIPE that kills a process that did not ignore it (a
 * trainer linking the library). */
bool ss__send_all(int fd, const void *p, size_t n);
/* Sends iov[0..n) on a socket with one sendmsg (MSG_NOSIGNAL) a pass,
 * going on after short sends and EINTR, and advances iov in place past
 * what went out. dontwait: only what the socket takes now (MSG_DONTWAIT),
 * stopping where it is full. Returns the index of the first iovec not
 * wholly sent (n: all of them), or -1 on an error (errno says why; a
 * blocking send past SO_SNDTIMEO is one). One syscall where a send per
 * piece took one each: a frame's head, message and body. */
int ss__send_iov(int fd, struct iovec *iov, int n, bool dontwait);
/* Reads exactly n bytes into p, going on after short reads and EINTR.
 * false on an error or an end of file before n bytes (errno 0 then). */
bool ss__read_all(int fd, void *p, size_t n);

#endif
