/* TLS / mutual TLS credentials from PEM files for both sides. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/read_file.h"
#include "common/strbuf.h"
#include "rpc/rpc_internal.h"

static bool tls_wanted(const ss__rpc_tls *tls) {
    return tls && (tls->ca_file || tls->cert_file || tls->key_file);
}

/* Whole file as a NUL-terminated string (gRPC wants PEM text); an
 * operator's file, so a link (a Kubernetes Secret's) is followed. */
static ss_status read_pem(const char *path, char **out, char *why, size_t whylen) {
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
        return ss__fail(why, whylen, st, "no memory for the PEM file %s", path);
    if (st == SS_OK || st == SS_ERR_TOO_LARGE)
        return ss__fail(why, whylen, SS_ERR_IO, "the PEM file %s is empty or over 1 MiB", path);
    return ss__fail(why, whylen, SS_ERR_IO, "cannot read the PEM file %s: %s", path, strerror(e));
}

typedef struct pem_set {
    char *ca, *cert, *key;
} pem_set;

static void pem_free(pem_set *p) {
    free(p->ca);
    free(p->cert);
    free(p->key);
}

static ss_status pem_load(const ss__rpc_tls *tls, pem_set *p, char *why, size_t whylen) {
    *p = (pem_set){0};
    if (!tls->cert_file != !tls->key_file)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                        "a TLS certificate needs its key file, and a key its certificate");
    ss_status st;
    if ((st = read_pem(tls->ca_file, &p->ca, why, whylen)) != SS_OK ||
        (st = read_pem(tls->cert_file, &p->cert, why, whylen)) != SS_OK ||
        (st = read_pem(tls->key_file, &p->key, why, whylen)) != SS_OK)
        pem_free(p);
    return st;
}

ss_status ss__rpc_client_credentials(const ss__rpc_tls *tls, grpc_channel_credentials **out,
                                     char *why, size_t whylen) {
    if (!tls_wanted(tls)) {
        *out = grpc_insecure_credentials_create();
        return *out ? SS_OK : ss__fail(why, whylen, SS_ERR_INTERNAL, "gRPC gave no credentials");
    }
    pem_set p;
    ss_status st = pem_load(tls, &p, why, whylen);
    if (st != SS_OK)
        return st;
    grpc_ssl_pem_key_cert_pair pair = {.private_key = p.key, .cert_chain = p.cert};
    *out = grpc_ssl_credentials_create(p.ca, p.cert ? &pair : NULL, NULL, NULL);
    pem_free(&p);
    return *out ? SS_OK
                : ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                           "gRPC refused the TLS files (CA %s, certificate %s)",
                           tls->ca_file ? tls->ca_file : "none",
                           tls->cert_file ? tls->cert_file : "none");
}

ss_status ss__rpc_server_credentials(const ss__rpc_tls *tls, grpc_server_credentials **out,
                                     char *why, size_t whylen) {
    if (!tls_wanted(tls)) {
        *out = grpc_insecure_server_credentials_create();
        return *out ? SS_OK : ss__fail(why, whylen, SS_ERR_INTERNAL, "gRPC gave no credentials");
    }
    if (!tls->cert_file || !tls->key_file)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                        "a TLS server needs its own certificate and key");
    pem_set p;
    ss_status st = pem_load(tls, &p, why, whylen);
    if (st != SS_OK)
        return st;
    grpc_ssl_pem_key_cert_pair pair = {.private_key = p.key, .cert_chain = p.cert};
    *out = grpc_ssl_server_credentials_create_ex(
        p.ca, &pair, 1,
        p.ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
             : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
        NULL);
    pem_free(&p);
    return *out ? SS_OK
                : ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                           "gRPC refused the TLS files (certificate %s, key %s)", tls->cert_file,
                           tls->key_file);
}
