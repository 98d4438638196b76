/* A bulk stream's connection (rpc/bulk/bulk.h): a plain TCP socket, or TLS
 * over it when TLS is configured (OpenSSL, from the same PEM files as
 * gRPC's credentials: rpc.h ss__rpc_tls).
 *
 * Over TLS the socket is non-blocking and one OpenSSL call runs at a
 * time (a lock): a client's writer thread sends a batch's requests while
 * its reader takes the replies on the same stream, and an SSL object
 * takes no two calls at once. A call that wants the socket lets the lock
 * go and waits in poll(), so the two directions still overlap; each send
 * or read encrypts or decrypts at most SS_BULK_TLS_SLICE bytes under the
 * lock, so neither direction holds the other up for long. OpenSSL's
 * writes go through send(MSG_NOSIGNAL): a peer that is gone is a failed
 * send, not a SIGPIPE in the trainer that links the library. */
#ifndef SS_RPC_BULK_CONN_H
#define SS_RPC_BULK_CONN_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "rpc/rpc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_BULK_TLS_SLICE (64 * 1024)

/* A TLS context, a server's or a client's (an OpenSSL SSL_CTX). */
typedef struct ss__bulk_tls ss__bulk_tls;

/* The server's: its certificate and key, and with ca_file every client
 * must show a certificate signed by it (mutual TLS, as gRPC's door). The
 * client's: ca_file verifies the server (the system's roots without it),
 * cert_file and key_file are its own certificate for mutual TLS. NULL
 * *out (and SS_OK) when tls names no file: plain TCP. SS_ERR_IO with why
 * (the file, OpenSSL's reason) when a file does not load. */
ss_status ss__bulk_tls_create(const ss__rpc_tls *tls, bool server, ss__bulk_tls **out, char *why,
                              size_t whylen);
void ss__bulk_tls_destroy(ss__bulk_tls *t);

typedef struct ss__bulk_conn {
    int fd;
    void *ssl;            /* SSL *; NULL: plain TCP */
    pthread_mutex_t lock; /* TLS: one OpenSSL call at a time */
    int timeout_ms;       /* TLS: the longest wait for the socket (-1: none) */
} ss__bulk_conn;

/* A connection over the connected socket fd, which it owns from now on
 * when it starts (on failure the socket is still the caller's). tls NULL: plain TCP, its waits
 * bounded by the socket's own timeouts. Else the TLS handshake within timeout_ms, as the server, or
 * as a client that verifies the server's certificate names host (an IP address or a DNS name).
 * SS_ERR_IO with why on failure. Either way, ss__bulk_conn_end once after it. */
ss_status ss__bulk_conn_start(ss__bulk_conn *c, int fd, const ss__bulk_tls *tls, bool server,
                              const char *host, int timeout_ms, char *why, size_t whylen);
/* All n bytes, or false (the peer's end, an error, a wait past the
 * timeout). Safe for one reader and one writer at once. */
bool ss__bulk_conn_read(ss__bulk_conn *c, void *p, size_t n);
/* Some of n bytes (at least 1): how many, or -1 (the peer's end, an
 * error, a wait past the timeout). */
ssize_t ss__bulk_conn_read_some(ss__bulk_conn *c, void *p, size_t n);
bool ss__bulk_conn_send(ss__bulk_conn *c, const void *p, size_t n);
/* All of iov[0..n) (advanced in place): one sendmsg a pass on plain TCP,
 * a send a piece over TLS. */
bool ss__bulk_conn_sendv(ss__bulk_conn *c, struct iovec *iov, int n);
/* The longest wait from now on (-1: none), for TLS and plain alike. */
void ss__bulk_conn_set_timeout(ss__bulk_conn *c, int timeout_ms);
/* Closes the socket and frees the TLS state. */
void ss__bulk_conn_end(ss__bulk_conn *c);

#ifdef __cplusplus
}
#endif

#endif
