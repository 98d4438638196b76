#include "rpc/auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/names.h"
#include "common/read_file.h"

ss_status ss__auth_header_from_file(const char *path, char *header, size_t headerlen, char *why,
                                    size_t whylen) {
    unsigned char *tok = NULL;
    size_t n = 0;
    /* An operator's file (a Kubernetes Secret's is a link); one longer
     * than a token and its newline holds none. */
    ss_status st = path && *path
                       ? ss__read_file(path, SS_FILE_OPERATORS, SS_AUTH_TOKEN_MAX + 1, &tok, &n)
                       : SS_ERR_IO;
    if (st != SS_OK && st != SS_ERR_TOO_LARGE) {
        snprintf(why, whylen, "cannot read the token file %s", path ? path : "(none)");
        return st == SS_ERR_NO_MEMORY ? st : SS_ERR_IO;
    }
    if (n && tok[n - 1] == '\n')
        tok[--n] = '\0';
    bool valid = st == SS_OK && n >= 16 && n <= SS_AUTH_TOKEN_MAX;
    for (size_t i = 0; valid && i < n; i++)
        valid = tok[i] > ' ' && tok[i] < 127;
    st = SS_OK;
    if (!valid) {
        snprintf(why, whylen,
                 "the token in %s must be 16 to %d printable characters without spaces", path,
                 SS_AUTH_TOKEN_MAX);
        st = SS_ERR_INVALID_ARGUMENT;
    } else if (snprintf(header, headerlen, "Bearer %s", (char *)tok) >= (int)headerlen) {
        st = SS_ERR_INVALID_ARGUMENT;
    }
    if (tok)
        explicit_bzero(tok, n); /* a secret: not left in freed memory */
    free(tok);
    return st;
}

ss_status ss__auth_header_from_env(char *header, size_t headerlen, char *why, size_t whylen) {
    const char *path = getenv("SHADOWSYNC_AUTH_TOKEN_FILE");
    header[0] = '\0';
    if (!path || !*path)
        return SS_OK;
    return ss__auth_header_from_file(path, header, headerlen, why, whylen);
}

bool ss__auth_header_matches(const char *expected, const char *got, size_t gotlen) {
    size_t n = strlen(expected);
    unsigned char diff = gotlen != n;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)expected[i] ^ (unsigned char)(i < gotlen ? got[i] : 0);
    return diff == 0;
}

bool ss__auth_identity_listed(const char *list, const char *value, size_t len) {
    for (const char *at = list; at && *at;) {
        size_t n = strcspn(at, ",");
        if (n && n == len && memcmp(at, value, len) == 0)
            return true;
        at += n + (at[n] == ',');
    }
    return false;
}

ss_status ss__auth_writers_valid(const char *list, char *why, size_t whylen) {
    size_t len = strlen(list);
    if (len >= SS_AUTH_WRITERS_MAX) {
        snprintf(why, whylen, "--tls-writers: %zu bytes, over the limit of %d", len,
                 SS_AUTH_WRITERS_MAX - 1);
        return SS_ERR_INVALID_ARGUMENT;
    }
    for (const char *at = list;;) {
        size_t n = strcspn(at, ",");
        if (n == 0) {
            snprintf(why, whylen, "--tls-writers: an empty identity (\"%s\")", list);
            return SS_ERR_INVALID_ARGUMENT;
        }
        for (size_t i = 0; i < n; i++)
            if (at[i] <= ' ' || at[i] > '~') {
                snprintf(why, whylen,
                         "--tls-writers: identity \"%.*s\" has a space or a non-printable "
                         "character",
                         (int)n, at);
                return SS_ERR_INVALID_ARGUMENT;
            }
        if (!at[n])
            return SS_OK;
        at += n + 1;
    }
}

ss_status ss__auth_daemon_setup(const char *file, const char *http, char *header, size_t headerlen,
                                char *why, size_t whylen) {
    header[0] = '\0';
    if (file && *file) {
        char inner[300];
        ss_status st = ss__auth_header_from_file(file, header, headerlen, inner, sizeof inner);
        if (st != SS_OK) {
            snprintf(why, whylen, "--auth-token-file: %s", inner);
            return st;
        }
    }
    if (!header[0] && http && *http && !ss__listen_is_loopback(http)) {
        snprintf(why, whylen, "--http %s is not loopback: POST /checkpoint needs --auth-token-file",
                 http);
        return SS_ERR_PERMISSION;
    }
    return SS_OK;
}

ss_status ss__auth_listener_check(const char *who, const char *listen, bool has_token,
                                  bool has_mtls, bool insecure_loopback, char *why, size_t whylen) {
    if (has_token || has_mtls)
        return SS_OK;
    if (!ss__listen_is_loopback(listen)) {
        snprintf(why, whylen,
                 "%s %s is not loopback: its calls need a token (--auth-token-file, or "
                 "SHADOWSYNC_AUTH_TOKEN_FILE: the same 16-256 printable characters on every side)",
                 who, listen);
        return SS_ERR_PERMISSION;
    }
    if (!insecure_loopback) {
        snprintf(why, whylen,
                 "%s %s: without a token every local user could call it (read the model, change "
                 "it); give one (--auth-token-file, or SHADOWSYNC_AUTH_TOKEN_FILE: the same "
                 "16-256 printable characters on every side), or, for a demo or a test, "
                 "--insecure-loopback (SHADOWSYNC_INSECURE_LOOPBACK=1)",
                 who, listen);
        return SS_ERR_PERMISSION;
    }
    return SS_OK;
}

bool ss__listen_is_loopback(const char *listen) {
    const size_t n = ss__address_host_len(listen);
    static const char *const loop[] = {"127.0.0.1", "localhost", "[::1]", "::1"};
    for (size_t i = 0; i < sizeof loop / sizeof *loop; i++)
        if (strlen(loop[i]) == n && !strncmp(listen, loop[i], n))
            return true;
    return n > 4 && !strncmp(listen, "127.", 4);
}
