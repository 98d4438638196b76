/* The shared bearer token that authorizes mutating calls when the PS is
 * not on loopback and mutual TLS is not used. Both sides read it from a
 * file: the server from --auth-token-file, every client (hooks, agent,
 * ctr-train, shadowsync-ctl) from SHADOWSYNC_AUTH_TOKEN_FILE. */
#ifndef SS_RPC_AUTH_H
#define SS_RPC_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "shadowsync/status.h"

#define SS_AUTH_TOKEN_MAX 256
/* "Bearer " + token + NUL */
#define SS_AUTH_HEADER_MAX (SS_AUTH_TOKEN_MAX + 8)

/* Reads a token file into header as "Bearer <token>": 16..256 printable
 * characters without spaces (one trailing newline allowed). why says what
 * is wrong with it. */
ss_status ss__auth_header_from_file(const char *path, char *header, size_t headerlen, char *why,
                                    size_t whylen);

/* The client side: the header from SHADOWSYNC_AUTH_TOKEN_FILE into header
 * ("" when the variable is unset). */
ss_status ss__auth_header_from_env(char *header, size_t headerlen, char *why, size_t whylen);

/* Constant-time comparison of a received header with the expected one. */
bool ss__auth_header_matches(const char *expected, const char *got, size_t gotlen);

/* What both daemons check at start: the token of file (when set) into
 * header, and an HTTP endpoint bound off loopback needs one (POST
 * /checkpoint changes state). why names the flag. */
ss_status ss__auth_daemon_setup(const char *file, const char *http, char *header, size_t headerlen,
                                char *why, size_t whylen);

/* Mutual TLS: the client certificate identities allowed to call methods
 * that change state (--tls-writers), comma-separated, each matched whole
 * against the certificate's common name or one of its subject alternative
 * names. */
#define SS_AUTH_WRITERS_MAX 2048
/* true when value[0..len) is one of the entries of the comma-separated
 * list (empty entries never match). */
bool ss__auth_identity_listed(const char *list, const char *value, size_t len);
/* A --tls-writers value: non-empty entries of printable characters without
 * spaces, SS_AUTH_WRITERS_MAX bytes at most. why says what is wrong. */
ss_status ss__auth_writers_valid(const char *list, char *why, size_t whylen);

/* true when a listen address ("host:port") is loopback only. */
bool ss__listen_is_loopback(const char *listen);

/* The one rule of every gRPC listener (the PS, tree and gossip members):
 * its calls need the token, or mutual TLS where the listener has it
 * (has_mtls). Without either, it serves only on a loopback address and
 * only when told so (insecure_loopback: any local user may then call: a
 * demo, a test). SS_ERR_PERMISSION otherwise, why saying what to set
 * (who: "shadowsync-ps --listen", "peer_rank 2's address", ...). */
ss_status ss__auth_listener_check(const char *who, const char *listen, bool has_token,
                                  bool has_mtls, bool insecure_loopback, char *why, size_t whylen);

#endif
