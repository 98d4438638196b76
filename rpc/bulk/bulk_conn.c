/* A bulk stream's connection, plain or TLS (bulk_conn.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/fd_io.h"
#include "rpc/bulk/bulk_conn.h"

#define READ_BUFFER (256 * 1024) /* bytes OpenSSL reads ahead at once, at most */

struct ss__bulk_tls {
    SSL_CTX *ctx;
};

/* OpenSSL's newest reason, after what (the setting or file). */
static void say_ssl(char *why, size_t whylen, const char *what) {
    char reason[256] = "no reason given";
    const unsigned long e = ERR_get_error();
    if (e)
        ERR_error_string_n(e, reason, sizeof reason);
    ERR_clear_error();
    snprintf(why, whylen, "%s: %s", what, reason);
}

/* The certificate (chain) and key of this side, when named. */
static bool load_own(SSL_CTX *ctx, const ss__rpc_tls *tls, char *why, size_t whylen) {
    char what[300];
    const char *files[2] = {tls->cert_file, tls->key_file};
    for (int i = 0; i < 2; i++) /* said in the words gRPC's credentials use (rpc/tls.c) */
        if (files[i] && access(files[i], R_OK) != 0) {
            snprintf(why, whylen, "cannot read the PEM file %s: %s", files[i], strerror(errno));
            return false;
        }
    if (tls->cert_file && SSL_CTX_use_certificate_chain_file(ctx, tls->cert_file) != 1) {
        snprintf(what, sizeof what, "the certificate %s", tls->cert_file);
        say_ssl(why, whylen, what);
        return false;
    }
    if (tls->key_file && (SSL_CTX_use_PrivateKey_file(ctx, tls->key_file, SSL_FILETYPE_PEM) != 1 ||
                          SSL_CTX_check_private_key(ctx) != 1)) {
        snprintf(what, sizeof what, "the key %s", tls->key_file);
        say_ssl(why, whylen, what);
        return false;
    }
    return true;
}

ss_status ss__bulk_tls_create(const ss__rpc_tls *tls, bool server, ss__bulk_tls **out, char *why,
                              size_t whylen) {
    *out = NULL;
    if (!tls || !(tls->ca_file || tls->cert_file || tls->key_file))
        return SS_OK;
    if (server && !(tls->cert_file && tls->key_file)) {
        snprintf(why, whylen, "a TLS server needs its certificate and key");
        return SS_ERR_INVALID_ARGUMENT;
    }
    ss__bulk_tls *t = calloc(1, sizeof *t);
    if (!t)
        return SS_ERR_NO_MEMORY;
    t->ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    bool ok = t->ctx && SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION) == 1;
    if (!ok)
        say_ssl(why, whylen, "a TLS context");
    ok = ok && load_own(t->ctx, tls, why, whylen);
    if (ok && tls->ca_file && SSL_CTX_load_verify_locations(t->ctx, tls->ca_file, NULL) != 1) {
        char what[300];
        snprintf(what, sizeof what, "the CA bundle %s", tls->ca_file);
        say_ssl(why, whylen, what);
        ok = false;
    } else if (ok && !tls->ca_file && !server && SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
        say_ssl(why, whylen, "the system's CA certificates");
        ok = false;
    }
    if (!ok) {
        ss__bulk_tls_destroy(t);
        return SS_ERR_IO;
    }
    /* A client always checks the server; a server with a CA demands a
     * client certificate signed by it, as the gRPC door does. */
    if (!server || tls->ca_file)
        SSL_CTX_set_verify(
            t->ctx, server ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT : SSL_VERIFY_PEER,
            NULL);
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* Records read ahead, many a read(): without it OpenSSL reads each
     * 16 KiB record's header and body apart, two system calls a record.
     * (tls_io reads what is buffered before it waits for the socket.) */
    SSL_CTX_set_read_ahead(t->ctx, 1);
    SSL_CTX_set_default_read_buffer_len(t->ctx, READ_BUFFER);
    *out = t;
    return SS_OK;
}

void ss__bulk_tls_destroy(ss__bulk_tls *t) {
    if (!t)
        return;
    SSL_CTX_free(t->ctx);
    free(t);
}

/* OpenSSL's socket BIO writes with write(): to a peer that is gone that
 * raises SIGPIPE, which kills a trainer that links this library and
 * does not ignore it. This BIO is the socket BIO with its writes made
 * with send(MSG_NOSIGNAL), as ss__send_all's on a plain stream. */
static int nosignal_write(BIO *b, const char *in, int len) {
    int fd = -1;
    BIO_get_fd(b, &fd);
    ssize_t r = send(fd, in, (size_t)len, MSG_NOSIGNAL);
    BIO_clear_retry_flags(b);
    if (r <= 0 && BIO_sock_should_retry((int)r))
        BIO_set_retry_write(b);
    return (int)r;
}

static BIO_METHOD *nosignal_method;
static pthread_once_t nosignal_once = PTHREAD_ONCE_INIT;

static void make_nosignal_method(void) {
    const BIO_METHOD *sock = BIO_s_socket();
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR,
                                 "socket without SIGPIPE");
    if (m && BIO_meth_set_write(m, nosignal_write) == 1 &&
        BIO_meth_set_read(m, BIO_meth_get_read(sock)) == 1 &&
        BIO_meth_set_puts(m, BIO_meth_get_puts(sock)) == 1 &&
        BIO_meth_set_ctrl(m, BIO_meth_get_ctrl(sock)) == 1 &&
        BIO_meth_set_create(m, BIO_meth_get_create(sock)) == 1 &&
        BIO_meth_set_destroy(m, BIO_meth_get_destroy(sock)) == 1)
        nosignal_method = m;
    else
        BIO_meth_free(m);
}

/* A BIO over fd (not closed with the BIO); NULL when none can be made. */
static BIO *nosignal_bio(int fd) {
    pthread_once(&nosignal_once, make_nosignal_method);
    BIO *b = nosignal_method ? BIO_new(nosignal_method) : NULL;
    if (b)
        BIO_set_fd(b, fd, BIO_NOCLOSE);
    return b;
}

/* Waits until fd can do what OpenSSL wants (err: its SSL_get_error),
 * within timeout_ms; false for any other error or a wait past it. */
static bool wait_for_socket(int fd, int err, int timeout_ms) {
    struct pollfd pf = {.fd = fd};
    if (err == SSL_ERROR_WANT_READ)
        pf.events = POLLIN;
    else if (err == SSL_ERROR_WANT_WRITE)
        pf.events = POLLOUT;
    else
        return false;
    int r;
    while ((r = poll(&pf, 1, timeout_ms)) < 0 && errno == EINTR)
        ;
    return r > 0;
}

/* The server's name or address as the client verifies it. */
static bool expect_host(SSL *ssl, const char *host) {
    unsigned char ip[16];
    if (inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1)
        return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) == 1;
    return SSL_set_tlsext_host_name(ssl, host) == 1 && SSL_set1_host(ssl, host) == 1;
}

static ss_status handshake(ss__bulk_conn *c, bool server, char *why, size_t whylen) {
    SSL *ssl = c->ssl;
    for (;;) {
        ERR_clear_error();
        const int r = server ? SSL_accept(ssl) : SSL_connect(ssl);
        if (r == 1)
            return SS_OK;
        const int err = SSL_get_error(ssl, r);
        if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
            if (wait_for_socket(c->fd, err, c->timeout_ms))
                continue;
            snprintf(why, whylen, "the TLS handshake took over %d ms", c->timeout_ms);
            return SS_ERR_IO;
        }
        const long v = SSL_get_verify_result(ssl);
        if (v != X509_V_OK) {
            snprintf(why, whylen, "the TLS handshake: the peer's certificate: %s",
                     X509_verify_cert_error_string(v));
            ERR_clear_error();
        } else {
            say_ssl(why, whylen, "the TLS handshake");
        }
        return SS_ERR_IO;
    }
}

/* The TLS state freed and the socket closed; the lock stays (conn_end's). */
static void release(ss__bulk_conn *c) {
    if (c->ssl)
        SSL_free(c->ssl); /* no close_notify: the stream's frames say where it ends */
    c->ssl = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

ss_status ss__bulk_conn_start(ss__bulk_conn *c, int fd, const ss__bulk_tls *tls, bool server,
                              const char *host, int timeout_ms, char *why, size_t whylen) {
    *c = (ss__bulk_conn){.fd = fd, .timeout_ms = timeout_ms};
    pthread_mutex_init(&c->lock, NULL);
    if (!tls)
        return SS_OK;
    const int fl = fcntl(fd, F_GETFL);
    SSL *ssl = SSL_new(tls->ctx);
    BIO *bio = ssl ? nosignal_bio(fd) : NULL;
    c->ssl = ssl;
    if (bio)
        SSL_set_bio(ssl, bio, bio); /* the SSL owns it from now on */
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 || !ssl || !bio ||
        (!server && host && !expect_host(ssl, host))) {
        say_ssl(why, whylen, "a TLS connection");
        c->fd = -1; /* the caller's still */
        release(c);
        return SS_ERR_IO;
    }
    ss_status st = handshake(c, server, why, whylen);
    if (st != SS_OK) {
        c->fd = -1;
        release(c);
    }
    return st;
}

/* n bytes read (write false) or sent, in slices, each under the lock;
 * a slice that wants the socket waits for it without the lock. */
static bool tls_io(ss__bulk_conn *c, void *p, size_t n, bool write) {
    SSL *ssl = c->ssl;
    size_t done = 0;
    while (done < n) {
        const size_t want = n - done < SS_BULK_TLS_SLICE ? n - done : SS_BULK_TLS_SLICE;
        size_t moved = 0;
        pthread_mutex_lock(&c->lock);
        ERR_clear_error();
        const int r = write ? SSL_write_ex(ssl, (char *)p + done, want, &moved)
                            : SSL_read_ex(ssl, (char *)p + done, want, &moved);
        const int err = r == 1 ? SSL_ERROR_NONE : SSL_get_error(ssl, r);
        pthread_mutex_unlock(&c->lock);
        if (r == 1)
            done += moved;
        else if (!wait_for_socket(c->fd, err, c->timeout_ms))
            return false;
    }
    return true;
}

bool ss__bulk_conn_read(ss__bulk_conn *c, void *p, size_t n) {
    return c->ssl ? tls_io(c, p, n, false) : ss__read_all(c->fd, p, n);
}

ssize_t ss__bulk_conn_read_some(ss__bulk_conn *c, void *p, size_t n) {
    if (!c->ssl) {
        ssize_t k;
        while ((k = recv(c->fd, p, n, 0)) < 0 && errno == EINTR)
            ;
        return k > 0 ? k : -1;
    }
    const size_t want = n < SS_BULK_TLS_SLICE ? n : SS_BULK_TLS_SLICE;
    for (;;) {
        size_t moved = 0;
        pthread_mutex_lock(&c->lock);
        ERR_clear_error();
        const int r = SSL_read_ex(c->ssl, p, want, &moved);
        const int err = r == 1 ? SSL_ERROR_NONE : SSL_get_error(c->ssl, r);
        pthread_mutex_unlock(&c->lock);
        if (r == 1)
            return (ssize_t)moved;
        if (!wait_for_socket(c->fd, err, c->timeout_ms))
            return -1;
    }
}

bool ss__bulk_conn_send(ss__bulk_conn *c, const void *p, size_t n) {
    return c->ssl ? tls_io(c, (void *)p, n, true) : ss__send_all(c->fd, p, n);
}

bool ss__bulk_conn_sendv(ss__bulk_conn *c, struct iovec *iov, int n) {
    if (!c->ssl)
        return ss__send_iov(c->fd, iov, n, false) == n;
    for (int i = 0; i < n; i++)
        if (iov[i].iov_len && !tls_io(c, iov[i].iov_base, iov[i].iov_len, true))
            return false;
    return true;
}

void ss__bulk_conn_set_timeout(ss__bulk_conn *c, int timeout_ms) {
    c->timeout_ms = timeout_ms;
    if (c->ssl)
        return;
    const struct timeval tv = {timeout_ms < 0 ? 0 : timeout_ms / 1000,
                               timeout_ms < 0 ? 0 : (timeout_ms % 1000) * 1000};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

void ss__bulk_conn_end(ss__bulk_conn *c) {
    release(c);
    pthread_mutex_destroy(&c->lock);
}
