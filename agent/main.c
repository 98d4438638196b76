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
#include "common/malloc_tune.h"
#include "common/private_files.h"
#include "common/shard_map.h"
#include "common/signals.h"
#include "rpc/auth.h"
#include "rpc/dense/grpc_transport.h"
#include "rpc/dense/recut_transport.h"
#include "rpc/http/http.h"
#include "shadow/host_average_transport.h"
#include "trainer-hooks/settings_flags.h"

/* What --help and --version say. */
static const ss__program program = {
    "shadowsync-agent", "ShadowSync host agent: trainer processes on this host connect "
                        "over a unix socket\n(libshadowsync with SHADOWSYNC_AGENT=<socket>) "
                        "and hand over their dense groups\nin shared memory; the agent "
                        "runs the shadow pool (S-EASGD, S-MA, S-BMUF) for all\nof them "
                        "against the PS shards. A trainer keeps training when the agent "
                        "is away\nand registers again when it is back. Stops on SIGINT or "
                        "SIGTERM."};

#define MAX_ALLOW 32

/* The command line: the agent's own flags, and the library's keys for
 * the sync it runs for its trainers (sync_keys). */
typedef struct agent_options {
    char default_socket[128];
    const char *socket_path, *socket_group, *allow, *http, *ckpt_dir, *auth_file;
    char auth[SS_AUTH_HEADER_MAX]; /* "Bearer <token>"; "" = none */
    int64_t max_sessions, host_deadline_ms, max_trainer_groups, max_trainer_mb;
    bool host_average;
    uid_t uids[MAX_ALLOW];
    size_t nuids;
    ss__setting_flags *settings; /* holds the strings sync points to */
    ss_trainer_config sync;      /* ps, shadow_threads, encoding, ... */
    ss__shard_map map;           /* --shard-map: sync.ps points into it */
} agent_options;

/* The library's keys the agent takes as flags (one declaration each, in
 * trainer-hooks/settings.c): what it needs to run a trainer's sync. */
static const char *const sync_keys[] = {"ps",
                                        "shadow_threads",
                                        "encoding",
                                        "chunk_floats",
                                        "bulk",
                                        "min_round_gap",
                                        "round_interval_us",
                                        "heartbeat_ms",
                                        "rpc_timeout_ms",
                                        "round_wait_ms",
                                        "tls_ca",
                                        "tls_cert",
                                        "tls_key",
                                        "shard_map",
                                        "insecure_loopback",
                                        NULL};

static const char default_http[] = "127.0.0.1:9470";

typedef struct agent_main {
    ss__agent *agent;
    const char *ckpt_dir;
    ss__metrics *metrics;
    ss__transport *to_ps;     /* gRPC to the PS shards */
    ss__transport *transport; /* to_ps, or host averaging over it */
    ss__http_server *web;
} agent_main;

static ss_status status_json(void *ctx, bool detail, char **out, size_t *len) {
    return ss__agent_status_json(((agent_main *)ctx)->agent, detail, out, len);
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

/* The agent's own flags into flags; returns how many. */
static size_t own_flag_table(agent_options *o, ss__flag *flags) {
    const ss__flag own[] = {
        {"socket", SS_FLAG_STRING, &o->socket_path,
         "unix socket trainers connect to (its directory is created 0700, or 0750 with "
         "--socket-group)",
         NULL, 0, 0},
        {"socket-group", SS_FLAG_STRING, &o->socket_group,
         "let this group's members (primary or supplementary gid) use the socket too: a name "
         "or a number",
         NULL, 0, 0},
        {"allow-uid", SS_FLAG_STRING, &o->allow,
         "more uids allowed at the socket, comma-separated (the agent's own uid always is)", NULL,
         0, 0},
        {"http", SS_FLAG_STRING, &o->http,
         "address of /metrics, /healthz, /status, /checkpoint (port 0: pick one; \"\" = off; "
         "the default port, when taken, only warns)",
         NULL, 0, 0},
        {"host-average", SS_FLAG_BOOL, &o->host_average,
         "average this host's replicas in memory first and send one exchange per local round to "
         "the PS (PS traffic / number of local trainers)",
         NULL, 0, 0},
        {"host-round-deadline-ms", SS_FLAG_INT, &o->host_deadline_ms,
         "--host-average: a local round closes this long after its first snapshot", NULL, 1, 3.6e6},
        {"max-trainers", SS_FLAG_INT, &o->max_sessions, "trainer connections served at once", NULL,
         1, 65536},
        {"max-trainer-groups", SS_FLAG_INT, &o->max_trainer_groups,
         "dense groups (memfds) one trainer may register", NULL, 1, SS_AGENT_MAX_TRAINER_GROUPS},
        {"max-trainer-mb", SS_FLAG_INT, &o->max_trainer_mb,
         "MiB of dense groups (floats * 4) one trainer may register", NULL, 1, 1 << 24},
        {"checkpoint-dir", SS_FLAG_STRING, &o->ckpt_dir,
         "POST /checkpoint writes each group's replica here as <group>.f32 (\"\" = refused)", NULL,
         0, 0},
        {"auth-token-file", SS_FLAG_STRING, &o->auth_file,
         "the shared token file: sent to the PS, and needed by POST /checkpoint and for the "
         "names in /status (required when --http is not loopback)",
         NULL, 0, 0},

    };
    memcpy(flags, own, sizeof own);
    return sizeof own / sizeof *own;
}

/* The checks across flags, and the token and checkpoint directory they
 * name. -1: go on; otherwise the exit code. */
static int check_options(agent_options *o) {
    ss__encoding enc;
    const char *why = NULL;
    char map_why[400];
    if (o->sync.shard_map && *o->sync.shard_map) {
        if (o->sync.ps && *o->sync.ps)
            why = "--ps and --shard-map: pick one (the map lists the shards)";
        else if (ss__shard_map_read(o->sync.shard_map, &o->map, map_why, sizeof map_why) != SS_OK)
            why = map_why;
        else
            o->sync.ps = o->map.ps;
    }
    if (why)
        ; /* said below */
    else if (!o->sync.ps || !*o->sync.ps)
        why = "--ps is required (the PS shards)";
    else if (!ss__encoding_parse(o->sync.encoding, &enc))
        why = "--encoding wants f32, fp16, bf16 or int8";
    else if (parse_uids(o->allow, o->uids, &o->nuids) != 0)
        why = "--allow-uid wants uids like 1000,1001";
    else if (!o->sync.tls_cert != !o->sync.tls_key)
        why = "--tls-cert and --tls-key go together";
    if (why) {
        ss__refuse("shadowsync-agent", "%s", why);
        return 2;
    }
    char reason[400];
    if (ss__auth_daemon_setup(o->auth_file, o->http, o->auth, sizeof o->auth, reason,
                              sizeof reason) != SS_OK ||
        (*o->ckpt_dir &&
         ss__private_dir(o->ckpt_dir, "--checkpoint-dir", reason, sizeof reason) != SS_OK)) {
        ss__refuse("shadowsync-agent", "%s", reason);
        return 2;
    }
    if (o->auth[0])
        setenv("SHADOWSYNC_AUTH_TOKEN_FILE", o->auth_file, 1); /* what the PS clients read */
    return -1;
}

/* Step 1: flags (the agent's own and the library's sync keys), --help,
 * --version, and the checks across flags. -1: go on; otherwise the exit
 * code. */
static int parse_options(int argc, char **argv, agent_options *o) {
    memset(o, 0, sizeof *o);
    snprintf(o->default_socket, sizeof o->default_socket, "/tmp/shadowsync-%d/agent.sock",
             (int)geteuid());
    o->socket_path = o->default_socket;
    o->socket_group = o->allow = o->ckpt_dir = o->auth_file = "";
    o->http = default_http;
    o->max_sessions = 256;
    o->max_trainer_groups = SS_AGENT_MAX_TRAINER_GROUPS;
    o->max_trainer_mb = (int64_t)(SS_AGENT_DEFAULT_MAX_TRAINER_BYTES >> 20);
    o->host_deadline_ms = 1000;
    ss__flag flags[32];
    size_t n = own_flag_table(o, flags);
    if (ss__setting_flags_add(sync_keys, NULL, NULL, flags, &n, sizeof flags / sizeof *flags,
                              &o->settings) != SS_OK) {
        ss__refuse("shadowsync-agent", "out of memory");
        return 1;
    }
    int exit_code = ss__flags_cli(&program, flags, n, argc, argv);
    if (exit_code >= 0)
        return exit_code;
    ss_table_config unused;
    ss_trainer_config_init(&o->sync);
    ss_table_config_init(&unused, "table", 8);
    if (ss__setting_flags_apply(o->settings, &o->sync, &unused) != SS_OK) {
        ss__refuse("shadowsync-agent", "%s", ss_last_error());
        return 2;
    }
    return check_options(o);
}

/* Step 2: the transport to the PS shards, wrapped for host averaging. */
static ss_status connect_ps(agent_main *m, const agent_options *o) {
    const ss_trainer_config *c = &o->sync;
    ss__rpc_tls tls = {.ca_file = c->tls_ca, .cert_file = c->tls_cert, .key_file = c->tls_key};
    ss__grpc_transport_config tcfg = {.targets = c->ps,
                                      .timeout_ms = c->timeout_ms,
                                      .round_wait_ms = c->round_wait_ms,
                                      .chunk_floats = c->chunk_floats,
                                      .retries = 3,
                                      .epoch = o->map.epoch,
                                      .tls = c->tls_ca || c->tls_cert ? &tls : NULL,
                                      .bulk = c->bulk};
    ss__encoding_parse(c->encoding, &tcfg.encoding); /* checked in check_options */
    /* With a map, the groups are cut again when it changes. */
    char why[300] = "";
    ss_status st = o->map.epoch
                       ? ss__recut_transport_create(c->shard_map, &tcfg, &m->to_ps, why, sizeof why)
                       : ss__grpc_transport_create(&tcfg, &m->to_ps, why, sizeof why);
    if (st != SS_OK) {
        ss__refuse("shadowsync-agent", "cannot reach --ps %s: %s (%s)", c->ps, ss_strerror(st),
                   why);
        return st;
    }
    m->transport = m->to_ps;
    if (o->host_average &&
        (st = ss__host_average_transport_create(m->to_ps, (uint32_t)o->host_deadline_ms,
                                                &m->transport, why, sizeof why)) != SS_OK)
        ss__refuse("shadowsync-agent", "cannot set up host averaging: %s (%s)", ss_strerror(st),
                   why);
    return st;
}

/* Step 3: the socket trainers connect to. */
static ss_status start_agent(agent_main *m, const agent_options *o) {
    ss__agent_config acfg = {.socket_path = o->socket_path,
                             .socket_group = o->socket_group,
                             .allow_uids = o->uids,
                             .nallow = o->nuids,
                             .transport = m->transport,
                             .metrics = m->metrics,
                             .shadow_threads = o->sync.shadow_threads,
                             .min_round_gap = o->sync.min_round_gap,
                             .round_interval_us = o->sync.round_interval_us,
                             .heartbeat_ms = o->sync.heartbeat_ms,
                             .max_sessions = (uint32_t)o->max_sessions,
                             .max_trainer_groups = (uint32_t)o->max_trainer_groups,
                             .max_trainer_bytes = (uint64_t)o->max_trainer_mb << 20};
    char why[300] = "";
    ss_status st = ss__agent_create(&acfg, &m->agent, why, sizeof why);
    if (st != SS_OK)
        ss__refuse("shadowsync-agent", "cannot serve on %s: %s%s (%s)", o->socket_path,
                   ss_strerror(st),
                   st == SS_ERR_EXISTS ? " (another agent is running there, or the path is not a "
                                         "socket)"
                                       : "",
                   why);
    return st;
}

/* Step 4: the HTTP endpoint, then the line scripts wait for. */
static ss_status start_http(agent_main *m, const agent_options *o) {
    ss__http_config hcfg = {.bind = o->http,
                            .metrics = m->metrics,
                            .status_json = status_json,
                            .checkpoint = checkpoint,
                            .ctx = m,
                            .auth_header = o->auth,
                            .insecure_posts = o->sync.insecure_loopback != 0,
                            .optional = o->http == default_http};
    char where[300];
    ss_status st =
        ss__http_daemon_start(program.name, &hcfg, &m->web, where, sizeof where, NULL, 0);
    if (st != SS_OK)
        return st;
    ss__say("shadowsync-agent", "listening on %s, http on %s, ps %s%s", o->socket_path, where,
            o->sync.ps, o->host_average ? " (host averaging)" : "");
    return SS_OK;
}

/* Step 5: stop serving; trainers keep their replicas. */
static void shut_down(agent_main *m) {
    ss__http_server_stop(m->web);
    ss__agent_destroy(m->agent);
    if (m->transport != m->to_ps)
        ss__transport_destroy(m->transport);
    ss__transport_destroy(m->to_ps);
    ss__metrics_destroy(m->metrics);
}

int main(int argc, char **argv) {
    ss__malloc_keep_large_buffers(); /* sync rounds reuse their megabyte buffers */
    ss__private_umask();             /* files it writes: 0640 at most */
    agent_options o;
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0) {
        ss__setting_flags_destroy(o.settings); /* --help, --version, a refused flag */
        return rc;
    }
    sigset_t sigs; /* for sigwait, not for the engines' threads */
    ss__signals_block(&sigs, 0);

    agent_main m = {.ckpt_dir = o.ckpt_dir};
    ss_status st = ss__metrics_create(&m.metrics, NULL, 0);
    if (st == SS_OK)
        st = ss__metrics_build_info(m.metrics);
    if (st == SS_OK)
        st = connect_ps(&m, &o);
    if (st == SS_OK)
        st = start_agent(&m, &o);
    if (st == SS_OK)
        st = start_http(&m, &o);
    if (st == SS_OK) {
        int sig;
        sigwait(&sigs, &sig);
        ss__log(SS_LOG_INFO, "agent", "event=stopping signal=%d", sig);
    }
    shut_down(&m);
    ss__setting_flags_destroy(o.settings);
    if (st != SS_OK)
        return 1;
    ss__say("shadowsync-agent", "stopped");
    return 0;
}
