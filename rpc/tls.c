/* TLS / mutual TLS credentials from PEM files for both sides. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/read_file.h"
#include "rpc/rpc_internal.h"

static _Thread_local char tls_failure[400];

const char *ss__rpc_tls_failure(void) {
    return tls_failure;
}

static bool tls_wanted(const ss__rpc_tls *tls) {
    return tls && (tls->ca_file || tls->cert_file || tls->key_file);
}

/* Whole file as a NUL-terminated string (gRPC wants PEM text); an
 * operator's file, so a link (a Kubernetes Secret's) is followed. */
static ss_status read_pem(const char *path, char **out) {
    *out = NULL;
    if (!path)
        return SS_OK;
    unsigned char *buf;
    size_t len;
    const ss_status st = ss__read_file(path, SS_FILE_OPERATORS, 1 << 20, &buf, &len);
    const int e = errno;
    if (st == SS_OK && len > 0) {
        *out = (char *)buf;
        return SS_OK;
    }
    if (st == SS_OK)
        free(buf);
    if (st == SS_ERR_NO_MEMORY)
        return st;
    if (st == SS_OK || st == SS_ERR_TOO_LARGE)
        snprintf(tls_failure, sizeof tls_failure, "the PEM file %s is empty or over 1 MiB", path);
    else
        snprintf(tls_failure, sizeof tls_failure, "cannot read the PEM file %s: %s", path,
                 strerror(e));
    return SS_ERR_IO;
}

typedef struct pem_set {
    char *ca, *cert, *key;
} pem_set;

static void pem_free(pem_set *p) {
    free(p->ca);
    free(p->cert);
    free(p->key);
}

static ss_status pem_load(const ss__rpc_tls *tls, pem_set *p) {
    *p = (pem_set){0};
    if (!tls->cert_file != !tls->key_file)
        return SS_ERR_INVALID_ARGUMENT; /* a certificate needs its key, and back */
    ss_status st;
    if ((st = read_pem(tls->ca_file, &p->ca)) != SS_OK ||
        (st = read_pem(tls->cert_file, &p->cert)) != SS_OK ||
        (st = read_pem(tls->key_file, &p->key)) != SS_OK)
        pem_free(p);
    return st;
}

ss_status ss__rpc_client_credentials(const ss__rpc_tls *tls, grpc_channel_credentials **out) {
    if (!tls_wanted(tls)) {
        *out = grpc_insecure_credentials_create();
        return *out ? SS_OK : SS_ERR_INTERNAL;
    }
    pem_set p;
    ss_status st = pem_load(tls, &p);
    if (st != SS_OK)
        return st;
    grpc_ssl_pem_key_cert_pair pair = {.private_key = p.key, .cert_chain = p.cert};
    *out = grpc_ssl_credentials_create(p.ca, p.cert ? &pair : NULL, NULL, NULL);
    pem_free(&p);
    return *out ? SS_OK : SS_ERR_INVALID_ARGUMENT;
}

ss_status ss__rpc_server_credentials(const ss__rpc_tls *tls, grpc_server_credentials **out) {
    if (!tls_wanted(tls)) {
        *out = grpc_insecure_server_credentials_create();
        return *out ? SS_OK : SS_ERR_INTERNAL;
    }
    if (!tls->cert_file || !tls->key_file)
        return SS_ERR_INVALID_ARGUMENT; /* a TLS server needs its own certificate */
    pem_set p;
    ss_status st = pem_load(tls, &p);
    if (st != SS_OK)
        return st;
    grpc_ssl_pem_key_cert_pair pair = {.private_key = p.key, .cert_chain = p.cert};
    *out = grpc_ssl_server_credentials_create_ex(
        p.ca, &pair, 1,
        p.ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
             : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
        NULL);
    pem_free(&p);
    return *out ? SS_OK : SS_ERR_INVALID_ARGUMENT;
}
