/* The HTTP endpoint of the agent and the PS (libmicrohttpd):
 *   GET  /metrics     Prometheus text format 0.0.4 of a metrics registry
 *   GET  /healthz     "ok" while the process serves
 *   GET  /status      JSON from the owner's callback
 *   POST /checkpoint  the owner's checkpoint callback (when it has one)
 * Anything else gets a clear 4xx and is counted in
 * shadowsync_http_rejected_total{reason}: not_found, method, too_large. */
#ifndef SHADOWSYNC_HTTP_H
#define SHADOWSYNC_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/metrics.h"
#include "shadowsync/status.h"

typedef struct ss__http_server ss__http_server;

typedef struct ss__http_config {
    const char *bind;     /* "host:port" (IPv4 or [IPv6]); port 0 picks one */
    ss__metrics *metrics; /* rendered on /metrics; the endpoint's counters go there */
    /* /status body (malloc'd JSON); NULL: 404. detail: the request carried
     * the token (or the server has none): names and sizes of what the
     * daemon holds may be shown; without it only counts (what gRPC reads
     * would refuse is not given to anyone who can reach the port). */
    ss_status (*status_json)(void *ctx, bool detail, char **out, size_t *len);
    /* POST /checkpoint: writes what the owner checkpoints; message says
     * where (or why not). NULL: 404 */
    ss_status (*checkpoint)(void *ctx, char *message, size_t message_len);
    /* Optional: called before each /metrics render (bring gauges and
     * counters that mirror other state up to date). */
    void (*before_metrics)(void *ctx);
    void *ctx;
    size_t max_body_bytes; /* larger request bodies: 413 (0 = 64 KiB) */
    /* "Bearer <token>" (rpc/auth.h): POST paths need it in an
     * Authorization header, else 401; GET /status shows details with it.
     * NULL or "": POST paths are refused (401) unless insecure_posts. */
    const char *auth_header;
    /* Without a token, POST paths are served to anyone who can reach the
     * port (--insecure-loopback: a demo, a test). */
    bool insecure_posts;
    /* A bind that fails only warns: *out = NULL and SS_OK (for a default
     * address, which another process on the host may hold). */
    bool optional;
} ss__http_config;

ss_status ss__http_server_start(const ss__http_config *cfg, ss__http_server **out, char *why,
                                size_t whylen);
uint16_t ss__http_server_port(const ss__http_server *s);
/* "host:port" actually served (the port picked for port 0), or "off" for
 * NULL. */
void ss__http_server_address(const ss__http_server *s, char *out, size_t outlen);
void ss__http_server_stop(ss__http_server *s);

/* A daemon's endpoint: cfg->bind "" means none (SS_OK, *out NULL); a
 * failure is said on stderr as "prog: cannot serve HTTP on ...". where
 * gets the address served ("off" for none), for the daemon's ready line. */
ss_status ss__http_daemon_start(const char *prog, const ss__http_config *cfg, ss__http_server **out,
                                char *where, size_t wherelen, char *why, size_t whylen);

#endif
