/* shadowsync-agent: the per-host sidecar. Trainer processes (libshadowsync
 * with SHADOWSYNC_AGENT=<socket>) hand it their dense groups in memfds; it
 * runs the shadow pool for all of them against the PS shards and serves
 * /metrics, /healthz, /status and /checkpoint over HTTP. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/flags.h"
#include "common/log.h"
#include "rpc/grpc_transport.h"
#include "rpc/http.h"
#include "shadow/host_average_transport.h"

#define MAX_ALLOW 32

typedef struct agent_main {
    ss__agent *agent;
    const char *ckpt_dir;
} agent_main;

static ss_status status_json(void *ctx, char **out, size_t *len) {
    return ss__agent_status_json(((agent_main *)ctx)->agent, out, len);
}

static ss_status checkpoint(void *ctx, char *msg, size_t msglen) {
    agent_main *m = ctx;
    if (!*m->ckpt_dir) {
        snprintf(msg, msglen, "the agent runs without --checkpoint-dir");
        return SS_ERR_STATE;
    }
    size_t groups = 0;
    ss_status st = ss__agent_checkpoint(m->agent, m->ckpt_dir, &groups);
    snprintf(msg, msglen, "%zu group replicas written to %s", groups, m->ckpt_dir);
    return st;
}

/* "1000,1001" into uids. */
static int parse_uids(const char *text, uid_t *uids, size_t *n) {
    *n = 0;
    while (*text) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(text, &end, 10);
        if (end == text || errno || v > 0x7fffffffUL || *n == MAX_ALLOW || (*end && *end != ','))
            return -1;
        uids[(*n)++] = (uid_t)v;
        text = *end ? end + 1 : end;
    }
    return 0;
}

int main(int argc, char **argv) {
    char default_socket[128];
    snprintf(default_socket, sizeof default_socket, "/tmp/shadowsync-%d/agent.sock",
             (int)geteuid());
    const char *socket_path = default_socket, *socket_group = "", *allow = "", *ps = "";
    static const char default_http[] = "127.0.0.1:9470";
    const char *http = default_http, *ckpt_dir = "", *tls_ca = "", *tls_cert = "", *tls_key = "";
    int64_t threads = 1, min_round_gap = 4, round_interval_us = 0, heartbeat_ms = 1000;
    int64_t timeout_ms = 10000, round_wait_ms = 5000, max_sessions = 256, host_deadline_ms = 1000;
    bool host_average = false;
    ss__flag flags[] = {
        {"socket", SS_FLAG_STRING, &socket_path,
         "unix socket trainers connect to (its directory is created 0700, or 0750 with "
         "--socket-group)",
         NULL, 0, 0},
        {"socket-group", SS_FLAG_STRING, &socket_group,
         "let this group's members (primary or supplementary gid) use the socket too", NULL, 0, 0},
        {"allow-uid", SS_FLAG_STRING, &allow,
         "more uids allowed at the socket, comma-separated (the agent's own uid always is)", NULL,
         0, 0},
        {"ps", SS_FLAG_STRING, &ps, "PS shards host:port[,host:port...] (required)", NULL, 0, 0},
        {"http", SS_FLAG_STRING, &http,
         "address of /metrics, /healthz, /status, /checkpoint (port 0: pick one; \"\" = off; "
         "the default port, when taken, only warns)",
         NULL, 0, 0},
        {"shadow-threads", SS_FLAG_INT, &threads, "shadow threads per trainer", NULL, 1, 64},
        {"min-round-gap", SS_FLAG_INT, &min_round_gap,
         "a group's next round waits until its trainer ran this many steps", NULL, 0, 1e9},
        {"round-interval-us", SS_FLAG_INT, &round_interval_us,
         "pause between two rounds of a shadow thread", NULL, 0, 6e7},
        {"heartbeat-ms", SS_FLAG_INT, &heartbeat_ms, "idle groups tell the PS they live", NULL, 0,
         3.6e6},
        {"rpc-timeout-ms", SS_FLAG_INT, &timeout_ms, "deadline of one RPC to the PS", NULL, 1,
         3.6e6},
        {"round-wait-ms", SS_FLAG_INT, &round_wait_ms, "extra wait for an MA/BMUF round to close",
         NULL, 0, 3.6e6},
        {"host-average", SS_FLAG_BOOL, &host_average,
         "average this host's replicas in memory first and send one exchange per local round to "
         "the PS (PS traffic / number of local trainers)",
         NULL, 0, 0},
        {"host-round-deadline-ms", SS_FLAG_INT, &host_deadline_ms,
         "--host-average: a local round closes this long after its first snapshot", NULL, 1, 3.6e6},
        {"max-trainers", SS_FLAG_INT, &max_sessions, "trainer connections served at once", NULL, 1,
         65536},
        {"checkpoint-dir", SS_FLAG_STRING, &ckpt_dir,
         "POST /checkpoint writes each group's replica here as <group>.f32 (\"\" = refused)", NULL,
         0, 0},
        {"tls-ca", SS_FLAG_STRING, &tls_ca, "PEM CA bundle to verify the PS (enables TLS)", NULL, 0,
         0},
        {"tls-cert", SS_FLAG_STRING, &tls_cert, "PEM client certificate (mutual TLS)", NULL, 0, 0},
        {"tls-key", SS_FLAG_STRING, &tls_key, "PEM private key of --tls-cert", NULL, 0, 0},
    };
    static const ss__program prog = {
        "shadowsync-agent", "ShadowSync host agent: trainer processes on this host connect "
                            "over a unix socket\n(libshadowsync with SHADOWSYNC_AGENT=<socket>) "
                            "and hand over their dense groups\nin shared memory; the agent "
                            "runs the shadow pool (S-EASGD, S-MA, S-BMUF) for all\nof them "
                            "against the PS shards. A trainer keeps training when the agent "
                            "is away\nand registers again when it is back. Stops on SIGINT or "
                            "SIGTERM."};
    int exit_code = ss__flags_cli(&prog, flags, sizeof flags / sizeof *flags, argc, argv);
    if (exit_code >= 0)
        return exit_code;
    uid_t uids[MAX_ALLOW];
    size_t nuids;
    if (!*ps) {
        fprintf(stderr, "shadowsync-agent: --ps is required (the PS shards)\n");
        return 2;
    }
    if (parse_uids(allow, uids, &nuids) != 0) {
        fprintf(stderr, "shadowsync-agent: --allow-uid wants uids like 1000,1001\n");
        return 2;
    }
    if (!*tls_cert != !*tls_key) {
        fprintf(stderr, "shadowsync-agent: --tls-cert and --tls-key go together\n");
        return 2;
    }
    if (*ckpt_dir && mkdir(ckpt_dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "shadowsync-agent: cannot create --checkpoint-dir %s: %s\n", ckpt_dir,
                strerror(errno));
        return 2;
    }
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    ss__metrics *metrics = NULL;
    ss__transport *transport = NULL, *to_ps = NULL;
    ss__rpc_tls tls = {.ca_file = *tls_ca ? tls_ca : NULL,
                       .cert_file = *tls_cert ? tls_cert : NULL,
                       .key_file = *tls_key ? tls_key : NULL};
    ss__grpc_transport_config tcfg = {.targets = ps,
                                      .timeout_ms = (uint32_t)timeout_ms,
                                      .round_wait_ms = (uint32_t)round_wait_ms,
                                      .retries = 3,
                                      .tls = *tls_ca || *tls_cert ? &tls : NULL};
    ss_status st = ss__metrics_create(&metrics);
    if (st == SS_OK && (st = ss__grpc_transport_create(&tcfg, &to_ps)) != SS_OK)
        fprintf(stderr, "shadowsync-agent: cannot reach --ps %s: %s\n", ps, ss_strerror(st));
    transport = to_ps;
    if (st == SS_OK && host_average &&
        (st = ss__host_average_transport_create(to_ps, (uint32_t)host_deadline_ms, &transport)) !=
            SS_OK)
        fprintf(stderr, "shadowsync-agent: cannot set up host averaging: %s\n", ss_strerror(st));
    agent_main m = {.ckpt_dir = ckpt_dir};
    ss__agent_config acfg = {.socket_path = socket_path,
                             .socket_group = socket_group,
                             .allow_uids = uids,
                             .nallow = nuids,
                             .transport = transport,
                             .metrics = metrics,
                             .shadow_threads = (uint32_t)threads,
                             .min_round_gap = (uint64_t)min_round_gap,
                             .round_interval_us = (uint64_t)round_interval_us,
                             .heartbeat_ms = (uint32_t)heartbeat_ms,
                             .max_sessions = (uint32_t)max_sessions};
    if (st == SS_OK && (st = ss__agent_create(&acfg, &m.agent)) != SS_OK)
        fprintf(stderr, "shadowsync-agent: cannot serve on %s: %s%s\n", socket_path,
                ss_strerror(st),
                st == SS_ERR_EXISTS ? " (another agent is running there, or the path is not a "
                                      "socket)"
                                    : "");
    ss__http_server *srv = NULL;
    ss__http_config hcfg = {.bind = http,
                            .metrics = metrics,
                            .status_json = status_json,
                            .checkpoint = checkpoint,
                            .ctx = &m,
                            .optional = http == default_http};
    if (st == SS_OK && *http && (st = ss__http_server_start(&hcfg, &srv)) != SS_OK)
        fprintf(stderr, "shadowsync-agent: cannot serve HTTP on %s: %s\n", http, ss_strerror(st));
    if (st == SS_OK) {
        char where[300];
        ss__http_server_address(srv, where, sizeof where);
        printf("shadowsync-agent: listening on %s, http on %s, ps %s%s\n", socket_path, where, ps,
               host_average ? " (host averaging)" : "");
        fflush(stdout);
        int sig;
        sigwait(&sigs, &sig);
        ss__log(SS_LOG_INFO, "agent", "event=stopping signal=%d", sig);
    }
    ss__http_server_stop(srv);
    ss__agent_destroy(m.agent);
    if (transport != to_ps)
        ss__transport_destroy(transport);
    ss__transport_destroy(to_ps);
    ss__metrics_destroy(metrics);
    if (st != SS_OK)
        return 1;
    printf("shadowsync-agent: stopped\n");
    return 0;
}
