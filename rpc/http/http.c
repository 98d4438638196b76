/* /metrics, /healthz, /status and /checkpoint over libmicrohttpd. */
#include "rpc/http/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/names.h"
#include "common/process_metrics.h"
#include "common/strbuf.h"
#include "rpc/auth.h"

/* Request lines and headers beyond this: MHD answers 414/431 itself. */
#define CONNECTION_MEMORY 32768
/* One address may hold this many connections: 64 idle connections (or a
 * 70-connection slowloris) from one client took every slot of the old
 * 64-connection cap, and /healthz went unanswered for the whole attack,
 * so a liveness probe restarted the PS. Prometheus, a probe and a
 * shadowsync-ctl watch need a few. */
#define CONNECTIONS_PER_IP 8
/* All addresses together (a thread each). */
#define CONNECTIONS_MAX 256
/* A connection silent this long is closed: a request's headers arrive
 * in one go from any real client. */
#define IDLE_TIMEOUT_S 3

struct ss__http_server {
    ss__http_config cfg;
    char bind[300]; /* cfg.bind, kept */
    struct MHD_Daemon *daemon;
    uint16_t port;
    ss__counter *m_requests[4];
};

enum { PATH_METRICS, PATH_HEALTHZ, PATH_STATUS, PATH_CHECKPOINT, PATH_COUNT };
static const char *const paths[PATH_COUNT] = {"/metrics", "/healthz", "/status", "/checkpoint"};

/* Per request: body bytes seen, and whether it was already answered. */
typedef struct request {
    size_t body;
    bool answered;
} request;

static void count_reject(ss__http_server *s, const char *reason) {
    ss__metrics_count(s->cfg.metrics, "shadowsync_http_rejected_total",
                      "HTTP requests refused by the endpoint, by reason.", "reason", reason, 1);
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned code, const char *type,
                             char *body, size_t len, bool owned) {
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, body, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_MUST_COPY);
    if (!r) {
        if (owned)
            free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result ok = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned code, const char *text) {
    return reply(conn, code, "text/plain; charset=utf-8", (char *)text, strlen(text), false);
}

/* The request carries the server's token (true too when it has none). */
static bool carries_token(const ss__http_server *s, struct MHD_Connection *conn) {
    if (!s->cfg.auth_header || !*s->cfg.auth_header)
        return true;
    const char *got = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    return got && ss__auth_header_matches(s->cfg.auth_header, got, strlen(got));
}

static enum MHD_Result serve(ss__http_server *s, struct MHD_Connection *conn, int path) {
    char *body = NULL;
    size_t len = 0;
    ss_status st;
    switch (path) {
    case PATH_METRICS:
        if (s->cfg.before_metrics)
            s->cfg.before_metrics(s->cfg.ctx);
        ss__process_metrics_refresh(s->cfg.metrics); /* process_*: memory, CPU, fds */
        if ((st = ss__metrics_render(s->cfg.metrics, &body, &len)) != SS_OK)
            return reply_text(conn, 500, "cannot render metrics\n");
        return reply(conn, 200, "text/plain; version=0.0.4; charset=utf-8", body, len, true);
    case PATH_HEALTHZ:
        return reply_text(conn, 200, "ok\n");
    case PATH_STATUS:
        if ((st = s->cfg.status_json(s->cfg.ctx, carries_token(s, conn), &body, &len)) != SS_OK)
            return reply_text(conn, 500, "cannot build status\n");
        return reply(conn, 200, "application/json", body, len, true);
    default: {
        char msg[512], text[600];
        st = s->cfg.checkpoint(s->cfg.ctx, msg, sizeof msg);
        snprintf(text, sizeof text, "%s%s: %s\n",
                 st == SS_OK ? "" : "checkpoint failed: ", ss_status_name(st), msg);
        SS_LOG_INFOF("http", "event=checkpoint status=%s", ss_status_name(st));
        return reply_text(conn, st == SS_OK ? 200 : st == SS_ERR_STATE ? 409 : 500, text);
    }
    }
}

static int path_index(const ss__http_server *s, const char *url) {
    for (int i = 0; i < PATH_COUNT; i++)
        if (!strcmp(url, paths[i])) {
            if ((i == PATH_STATUS && !s->cfg.status_json) ||
                (i == PATH_CHECKPOINT && !s->cfg.checkpoint))
                return -1;
            return i;
        }
    return -1;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    (void)version;
    (void)upload_data;
    ss__http_server *s = cls;
    size_t limit = s->cfg.max_body_bytes ? s->cfg.max_body_bytes : 65536;
    request *rq = *con_cls;
    if (!rq) { /* headers are in: decide what can be decided before the body */
        if (!(rq = calloc(1, sizeof *rq)))
            return MHD_NO;
        *con_cls = rq;
        const char *cl =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > limit) {
            rq->answered = true;
            count_reject(s, "too_large");
            return reply_text(conn, 413, "request body over the limit\n");
        }
        return MHD_YES;
    }
    if (*upload_data_size) { /* a body arrives: only counted, no path takes one */
        rq->body += *upload_data_size;
        *upload_data_size = 0;
        if (rq->body > limit && !rq->answered) {
            rq->answered = true;
            count_reject(s, "too_large");
            return reply_text(conn, 413, "request body over the limit\n");
        }
        return MHD_YES;
    }
    if (rq->answered)
        return MHD_YES;
    rq->answered = true;
    int path = path_index(s, url);
    if (path < 0) {
        count_reject(s, "not_found");
        char text[256];
        snprintf(text, sizeof text, "unknown path %.80s (served: /metrics /healthz /status%s)\n",
                 url, s->cfg.checkpoint ? " /checkpoint" : "");
        return reply_text(conn, 404, text);
    }
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    bool post = !strcmp(method, "POST");
    if ((path == PATH_CHECKPOINT) ? !post : !get) {
        count_reject(s, "method");
        return reply_text(conn, 405, path == PATH_CHECKPOINT ? "use POST\n" : "use GET or HEAD\n");
    }
    const bool has_token = s->cfg.auth_header && *s->cfg.auth_header;
    if (post && has_token && !carries_token(s, conn)) {
        count_reject(s, "unauthorized");
        return reply_text(conn, 401,
                          "POST needs the server's token: Authorization: Bearer <token> "
                          "(shadowsync-ctl reads SHADOWSYNC_AUTH_TOKEN_FILE)\n");
    }
    if (post && !has_token && !s->cfg.insecure_posts) {
        count_reject(s, "unauthorized");
        return reply_text(conn, 401,
                          "POST changes state and this server has no token: start it with "
                          "--auth-token-file (or --insecure-loopback: any local user may then "
                          "call)\n");
    }
    ss__counter_add(s->m_requests[path], 1);
    return serve(s, conn, path);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode code) {
    (void)cls;
    (void)conn;
    (void)code;
    free(*con_cls);
    *con_cls = NULL;
}

/* "host:port" or "[v6]:port" into a socket address. */
static ss_status parse_bind(const char *bind, struct sockaddr_storage *ss, bool *v6) {
    char host[256];
    unsigned port;
    if (!ss__address_split(bind, host, sizeof host, &port))
        return SS_ERR_INVALID_ARGUMENT;
    memset(ss, 0, sizeof *ss);
    *v6 = bind[0] == '[';
    if (*v6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        return inet_pton(AF_INET6, host, &a->sin6_addr) == 1 ? SS_OK : SS_ERR_INVALID_ARGUMENT;
    }
    struct sockaddr_in *a = (struct sockaddr_in *)ss;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    if (!strcmp(host, "localhost"))
        snprintf(host, sizeof host, "127.0.0.1");
    return inet_pton(AF_INET, host, &a->sin_addr) == 1 ? SS_OK : SS_ERR_INVALID_ARGUMENT;
}

ss_status ss__http_server_start(const ss__http_config *cfg, ss__http_server **out, char *why,
                                size_t whylen) {
    if (!cfg || !out || !cfg->bind || !cfg->metrics)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                        "an HTTP endpoint needs an address and metrics");
    struct sockaddr_storage addr;
    bool v6;
    ss_status st = parse_bind(cfg->bind, &addr, &v6);
    if (st != SS_OK)
        return ss__fail(why, whylen, st, "%s: not host:port", cfg->bind);
    ss__http_server *s = calloc(1, sizeof *s);
    if (!s)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the HTTP endpoint");
    s->cfg = *cfg;
    for (int i = 0; i < PATH_COUNT; i++) {
        const char *labels[] = {"path", paths[i], NULL};
        if ((st = ss__metrics_counter(cfg->metrics, "shadowsync_http_requests_total",
                                      "HTTP requests served, by path.", labels,
                                      &s->m_requests[i])) != SS_OK) {
            free(s);
            return ss__fail(why, whylen, st, "cannot register the HTTP series");
        }
    }
    /* A thread per connection: a slow request (POST /checkpoint writes
     * files) never holds up /healthz or a scrape. Bounded per address
     * and in all, with a short idle timeout (see the limits above). */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_POLL | (v6 ? MHD_USE_IPv6 : 0);
    s->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONNECTION_MEMORY,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)CONNECTIONS_MAX, MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)CONNECTIONS_PER_IP,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
    if (!s->daemon) {
        free(s);
        if (cfg->optional) {
            SS_LOG_WARNF("http", "event=http_off bind=%s note=\"address taken; pass --http\"",
                         cfg->bind);
            *out = NULL;
            return SS_OK;
        }
        return ss__fail(why, whylen, SS_ERR_IO, "cannot listen on %s: %s", cfg->bind,
                        strerror(errno));
    }
    snprintf(s->bind, sizeof s->bind, "%s", cfg->bind);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : 0;
    *out = s;
    return SS_OK;
}

uint16_t ss__http_server_port(const ss__http_server *s) {
    return s ? s->port : 0;
}

void ss__http_server_address(const ss__http_server *s, char *out, size_t outlen) {
    if (!s) {
        snprintf(out, outlen, "off");
        return;
    }
    snprintf(out, outlen, "%.*s:%u", (int)ss__address_host_len(s->bind), s->bind,
             (unsigned)s->port);
}

void ss__http_server_stop(ss__http_server *s) {
    if (!s)
        return;
    MHD_stop_daemon(s->daemon);
    free(s);
}

ss_status ss__http_daemon_start(const char *prog, const ss__http_config *cfg, ss__http_server **out,
                                char *where, size_t wherelen, char *why, size_t whylen) {
    *out = NULL;
    ss_status st = SS_OK;
    if (*cfg->bind && (st = ss__http_server_start(cfg, out, why, whylen)) != SS_OK)
        fprintf(stderr, "%s: cannot serve HTTP on %s: %s (%s)\n", prog, cfg->bind, ss_strerror(st),
                why && *why ? why : "no reason given");
    ss__http_server_address(*out, where, wherelen);
    return st;
}
