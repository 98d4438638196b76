/* shadowsync-ctl: talks to the HTTP endpoint of an agent or a PS (libcurl).
 *   status      GET /status (JSON)
 *   metrics     GET /metrics (Prometheus text)
 *   checkpoint  POST /checkpoint
 *   watch       a live view of rounds/s, sync gap and divergence per
 *               group, refreshed every --interval-ms
 *   health      GET /healthz (exit 0 when it answers ok: an exec probe)
 *   reshard     N stopped shards' stores into M (tools/reshard/), offline
 *   shard-map   the shard map of a StatefulSet's PS pods (their stable names)
 *   scale       the fleet to M pods while training runs (tools/ctl_scale.c) */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/flags.h"
#include "common/json.h"
#include "common/shard_map.h"
#include "common/strbuf.h"
#include "rpc/auth.h"
#include "tools/ctl.h"
#include "tools/reshard/reshard.h"

/* What --help and --version say. */
static const ss__program program = {
    "shadowsync-ctl", "shadowsync-ctl COMMAND [--url http://host:port] [flags]: commands for a\n"
                      "shadowsync-agent or shadowsync-ps HTTP endpoint:\n"
                      "  status      print /status (JSON: members, groups, last round, sync gap)\n"
                      "  metrics     print /metrics (Prometheus text)\n"
                      "  checkpoint  ask it to checkpoint (POST /checkpoint)\n"
                      "  watch       live view of rounds/s, sync gap and divergence per group\n"
                      "  health      GET /healthz; exit 0 when it answers (a container's probe)\n"
                      "  reshard     the stores of N stopped PS shards into M, offline\n"
                      "              (shadowsync-ctl reshard --help)\n"
                      "  shard-map   the shard map of a StatefulSet's PS pods\n"
                      "              (shadowsync-ctl shard-map --help)\n"
                      "  scale       the PS fleet to M pods while training runs: the next map\n"
                      "              written, the moves waited for (shadowsync-ctl scale --help)"};

static const ss__program reshard_program = {
    "shadowsync-ctl reshard",
    "Converts the stores of N stopped shadowsync-ps shards into M: embedding rows (with their\n"
    "optimizer state) placed by the jump hash trainers route by, dense groups (each\n"
    "--checkpoint-dir's dense.ckpt) put together and cut again for M shards. Copies every\n"
    "row and float as it is (N -> M -> N is bit-exact) and checks the outputs against the\n"
    "inputs (rows on their shard, row counts and checksums). A PS starts on an output as\n"
    "is (--emb-db OUT, --checkpoint-dir OUT). Inputs must be stopped (a store in use is\n"
    "refused); outputs must not exist yet.\n"
    "  shadowsync-ctl reshard --in-emb-db a,b --out-emb-db x,y,z \\\n"
    "      --in-checkpoint-dir ca,cb --out-checkpoint-dir cx,cy,cz"};

/* "a,b,c" into at most max pieces (the string is cut in place); how many. */
static size_t split_list(char *s, const char **out, size_t max) {
    size_t n = 0;
    for (char *p = s; p && *p && n < max; n++) {
        out[n] = p;
        p = strchr(p, ',');
        if (p)
            *p++ = '\0';
    }
    return n;
}

static int reshard_main(int argc, char **argv) {
    const char *in_db = "", *out_db = "", *in_ckpt = "", *out_ckpt = "";
    int64_t chunk = 0;
    ss__flag flags[] = {
        {"in-emb-db", SS_FLAG_STRING, &in_db,
         "the --emb-db directories of the N stopped shards, "
         "comma-separated, in shard order",
         NULL, 0, 0},
        {"out-emb-db", SS_FLAG_STRING, &out_db, "the M new --emb-db directories, in shard order",
         NULL, 0, 0},
        {"in-checkpoint-dir", SS_FLAG_STRING, &in_ckpt,
         "the --checkpoint-dir directories (dense.ckpt) of the N stopped shards", NULL, 0, 0},
        {"out-checkpoint-dir", SS_FLAG_STRING, &out_ckpt,
         "the M new --checkpoint-dir directories (made 0700)", NULL, 0, 0},
        {"chunk-floats", SS_FLAG_INT, &chunk, "the trainers' chunk_floats (0: the default, 131072)",
         NULL, 0, 64 << 20},
    };
    int rc = ss__flags_cli(&reshard_program, flags, sizeof flags / sizeof *flags, argc, argv);
    if (rc >= 0)
        return rc;
    static const char *lists[4][SS_RESHARD_MAX_SHARDS + 1];
    char *copies[4] = {strdup(in_db), strdup(out_db), strdup(in_ckpt), strdup(out_ckpt)};
    size_t n[4];
    for (int i = 0; i < 4; i++)
        n[i] = copies[i] ? split_list(copies[i], lists[i], SS_RESHARD_MAX_SHARDS + 1) : 0;
    const ss__reshard_config cfg = {.in_db = lists[0],
                                    .out_db = lists[1],
                                    .in_ckpt = lists[2],
                                    .out_ckpt = lists[3],
                                    .n_in_db = n[0],
                                    .n_out_db = n[1],
                                    .n_in_ckpt = n[2],
                                    .n_out_ckpt = n[3],
                                    .chunk_floats = (size_t)chunk};
    ss__reshard_report rep;
    char why[1024] = "";
    ss_status st = ss__reshard(&cfg, &rep, why, sizeof why);
    if (st == SS_OK)
        printf("reshard: %zu -> %zu embedding shards: tables=%zu rows=%llu checksum=%016llx "
               "(outputs checked); %zu -> %zu dense shards: groups=%zu floats=%llu\n",
               n[0], n[1], rep.tables, (unsigned long long)rep.rows,
               (unsigned long long)rep.checksum, n[2], n[3], rep.groups,
               (unsigned long long)rep.floats);
    else
        fprintf(stderr, "shadowsync-ctl reshard: %s\n", *why ? why : ss_strerror(st));
    for (int i = 0; i < 4; i++)
        free(copies[i]);
    return st == SS_OK ? 0 : st == SS_ERR_INVALID_ARGUMENT ? 2 : 1;
}

/* ---- watch ---- */

/* A number member of a JSON object; NAN when absent or not a number. */
static double num_of(json_object *o, const char *key) {
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) ||
        !(json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)))
        return __builtin_nan("");
    return json_object_get_double(v);
}

/* A string member of a JSON object; "" when absent. */
static void str_of(json_object *o, const char *key, char *out, size_t outlen) {
    json_object *v;
    const char *s =
        json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string)
            ? json_object_get_string(v)
            : "";
    snprintf(out, outlen, "%s", s);
}

#define WATCH_MAX 256

typedef struct seen {
    char key[160];
    double rounds;
} seen;

/* One screen: a row per object of /status's "groups". Rounds/s from the
 * change in "rounds" since the previous screen. */
static void watch_screen(json_object *doc, seen *prev, size_t *nprev, double dt, bool tty) {
    seen now[WATCH_MAX];
    size_t nnow = 0;
    if (tty)
        fputs("\033[H\033[2J", stdout);
    printf("%-20s %-14s %10s %9s %10s %8s %11s\n", "group", "trainer", "rounds", "rounds/s",
           "gap_mean", "gap_p99", "divergence");
    json_object *groups;
    size_t ng = json_object_object_get_ex(doc, "groups", &groups) &&
                        json_object_is_type(groups, json_type_array)
                    ? json_object_array_length(groups)
                    : 0;
    for (size_t i = 0; i < ng; i++) {
        json_object *g = json_object_array_get_idx(groups, i);
        char group[64], trainer[64];
        str_of(g, "group", group, sizeof group);
        str_of(g, "trainer", trainer, sizeof trainer);
        if (!trainer[0])
            snprintf(trainer, sizeof trainer, "(ps)");
        double rounds = num_of(g, "rounds");
        double rate = __builtin_nan("");
        char key[160];
        snprintf(key, sizeof key, "%s/%s", group, trainer);
        for (size_t j = 0; j < *nprev; j++)
            if (!strcmp(prev[j].key, key) && dt > 0)
                rate = (rounds - prev[j].rounds) / dt;
        if (nnow < WATCH_MAX) {
            snprintf(now[nnow].key, sizeof now[nnow].key, "%s", key);
            now[nnow++].rounds = rounds;
        }
        printf("%-20s %-14s %10.0f %9.1f %10.2f %8.0f %11.4g\n", group, trainer, rounds, rate,
               num_of(g, "sync_gap_mean"), num_of(g, "sync_gap_p99"), num_of(g, "divergence"));
    }
    memcpy(prev, now, nnow * sizeof *now);
    *nprev = nnow;
    fflush(stdout);
}

static int watch(const char *url, long interval_ms, long count, long timeout_ms) {
    static seen prev[WATCH_MAX];
    size_t nprev = 0;
    bool tty = isatty(STDOUT_FILENO);
    uint64_t last = 0;
    for (long i = 0; count == 0 || i < count; i++) {
        char *body = NULL, err[512] = "";
        long code = ss__ctl_fetch(url, "/status", false, timeout_ms, &body, err, sizeof err);
        uint64_t t = ss__now_ns();
        json_object *doc = code == 200 ? ss__json_parse(body, err, sizeof err) : NULL;
        if (!doc) {
            if (tty)
                fputs("\033[H\033[2J", stdout);
            printf("shadowsync-ctl: %s (retrying every %ld ms)\n",
                   code < 0 || code == 200 ? err : "endpoint answered an error", interval_ms);
            fflush(stdout);
        } else {
            watch_screen(doc, prev, &nprev, last ? (double)(t - last) / 1e9 : 0, tty);
            json_object_put(doc);
            if (!tty)
                printf("--\n");
            last = t;
        }
        free(body);
        if (count == 0 || i + 1 < count)
            ss__sleep_ns((uint64_t)interval_ms * 1000000ull);
    }
    return 0;
}

static const ss__program map_program = {
    "shadowsync-ctl shard-map",
    "Prints the shard map of a StatefulSet's PS pods, by their stable names\n"
    "(NAME-0.SERVICE:PORT, ...), checked as every PS and trainer reads it. With\n"
    "--from-replicas, a \"from\" line: the fleet before (embedding rows move while\n"
    "training runs; deploy/README.md says in which order to scale and apply).\n"
    "  shadowsync-ctl shard-map --replicas 3 --from-replicas 2 --epoch 4 > fleet.map"};

static int shard_map_main(int argc, char **argv) {
    const char *sts = "ps", *svc = "ps", *ns = "";
    int64_t port = 7070, replicas = 2, from = 0, epoch = 1;
    ss__flag flags[] = {
        {"statefulset", SS_FLAG_STRING, &sts, "the PS StatefulSet's name", NULL, 0, 0},
        {"service", SS_FLAG_STRING, &svc, "its headless Service (serviceName)", NULL, 0, 0},
        {"namespace", SS_FLAG_STRING, &ns, "their namespace (\"\" = the reader's own)", NULL, 0, 0},
        {"port", SS_FLAG_INT, &port, "the PS's gRPC port", NULL, 1, 65535},
        {"replicas", SS_FLAG_INT, &replicas, "the PS pods of the map", NULL, 1, 256},
        {"from-replicas", SS_FLAG_INT, &from,
         "the PS pods before this map (0 = no \"from\" line: nothing moves)", NULL, 0, 256},
        {"epoch", SS_FLAG_INT, &epoch, "the map's epoch (one more than the map it replaces)", NULL,
         1, (double)(1ll << 53)},
    };
    int rc = ss__flags_cli(&map_program, flags, sizeof flags / sizeof *flags, argc, argv);
    if (rc >= 0)
        return rc;
    char now[SS_SHARD_MAP_PS_MAX], was[SS_SHARD_MAP_PS_MAX], text[2 * SS_SHARD_MAP_PS_MAX + 64];
    ss__ctl_pod_list(sts, svc, ns, port, replicas, now, sizeof now);
    ss__ctl_pod_list(sts, svc, ns, port, from, was, sizeof was);
    snprintf(text, sizeof text, "epoch %lld\nps %s\n%s%s%s", (long long)epoch, now,
             from ? "from " : "", from ? was : "", from ? "\n" : "");
    ss__shard_map m;
    char why[400];
    if (ss__shard_map_parse(text, "(printed)", &m, why, sizeof why) != SS_OK) {
        fprintf(stderr, "shadowsync-ctl shard-map: %s\n", why);
        return 2;
    }
    fputs(text, stdout);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "reshard"))
        return reshard_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "shard-map"))
        return shard_map_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "scale"))
        return ss__ctl_scale_main(argc - 1, argv + 1);
    const char *url = "http://127.0.0.1:9470";
    int64_t interval_ms = 1000, count = 0, timeout_ms = 5000;
    ss__flag flags[] = {
        {"url", SS_FLAG_STRING, &url, "the agent's or PS's HTTP endpoint", NULL, 0, 0},
        {"interval-ms", SS_FLAG_INT, &interval_ms, "watch: refresh period", NULL, 50, 3.6e6},
        {"count", SS_FLAG_INT, &count, "watch: screens to show (0 = until interrupted)", NULL, 0,
         1e9},
        {"timeout-ms", SS_FLAG_INT, &timeout_ms, "deadline of one HTTP request", NULL, 1, 3.6e6},
    };
    const char *cmd = argc > 1 && argv[1][0] != '-' ? argv[1] : NULL;
    int exit_code = ss__flags_cli(&program, flags, sizeof flags / sizeof *flags,
                                  cmd ? argc - 1 : argc, cmd ? argv + 1 : argv);
    if (exit_code >= 0)
        return exit_code;
    if (!cmd || (strcmp(cmd, "status") && strcmp(cmd, "metrics") && strcmp(cmd, "checkpoint") &&
                 strcmp(cmd, "watch") && strcmp(cmd, "health"))) {
        fprintf(stderr,
                "shadowsync-ctl: %s%s\n(commands: status, metrics, checkpoint, watch, health, "
                "reshard, shard-map, scale; "
                "--help for more)\n",
                cmd ? "unknown command " : "a command is needed", cmd ? cmd : "");
        return 2;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "shadowsync-ctl: curl_global_init failed\n");
        return 1;
    }
    int rc;
    if (!strcmp(cmd, "watch")) {
        rc = watch(url, (long)interval_ms, (long)count, (long)timeout_ms);
    } else {
        char *body = NULL, err[512];
        bool post = !strcmp(cmd, "checkpoint");
        const char *path = post                     ? "/checkpoint"
                           : !strcmp(cmd, "status") ? "/status"
                           : !strcmp(cmd, "health") ? "/healthz"
                                                    : "/metrics";
        long code = ss__ctl_fetch(url, path, post, (long)timeout_ms, &body, err, sizeof err);
        if (code < 0) {
            fprintf(stderr, "shadowsync-ctl: %s\n", err);
            rc = 1;
        } else if (code == 200 && !strcmp(cmd, "status")) {
            /* Checked and printed by json-c: what is shown is a document. */
            json_object *doc = ss__json_parse(body, err, sizeof err);
            char *text = NULL;
            if (doc && ss__json_take(doc, &text, NULL) == SS_OK) {
                fputs(text, stdout);
                rc = 0;
            } else {
                fprintf(stderr, "shadowsync-ctl: %s/status: %s\n", url,
                        doc ? "out of memory" : err);
                rc = 1;
            }
            free(text);
        } else {
            fputs(body, code == 200 ? stdout : stderr);
            if (code != 200)
                fprintf(stderr, "shadowsync-ctl: %s answered HTTP %ld\n", url, code);
            rc = code == 200 ? 0 : 1;
        }
        free(body);
    }
    curl_global_cleanup();
    return rc;
}
