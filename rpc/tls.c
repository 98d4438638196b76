/* TLS / mutual TLS credentials from PEM files for both sides. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/rpc_internal.h"

static _Thread_local char tls_failure[400];

const char *ss__rpc_tls_failure(void) {
    return tls_failure;
}

static bool tls_wanted(const ss__rpc_tls *tls) {
    return tls && (tls->ca_file || tls->cert_file || tls->key_file);
}

/* Whole file as a NUL-terminated string (gRPC wants PEM text). */
static ss_status read_pem(const char *path, char **out) {
    *out = NULL;
    if (!path)
        return SS_OK;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(tls_failure, sizeof tls_failure, "cannot read the PEM file %s: %s", path,
                 strerror(errno));
        return SS_ERR_IO;
    }
    ss_status st = SS_OK;
    char *buf = NULL;
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        len = ftell(f);
    if (len <= 0 || len > (1 << 20) || fseek(f, 0, SEEK_SET) != 0) {
        st = SS_ERR_IO; /* empty, unreadable or not a PEM-sized file */
        snprintf(tls_failure, sizeof tls_failure, "the PEM file %s is empty or over 1 MiB", path);
    } else if (!(buf = malloc((size_t)len + 1))) {
        st = SS_ERR_NO_MEMORY;
    } else if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
        st = SS_ERR_IO;
    } else {
        buf[len] = '\0';
    }
    fclose(f);
    if (st != SS_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    return SS_OK;
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
