/* shadowsync-ctl: talks to the HTTP endpoint of an agent or a PS (libcurl).
 *   status      GET /status (JSON)
 *   metrics     GET /metrics (Prometheus text)
 *   checkpoint  POST /checkpoint
 *   watch       a live view of rounds/s, sync gap and divergence per
 *               group, refreshed every --interval-ms
 *   health      GET /healthz (exit 0 when it answers ok: an exec probe) */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/flags.h"
#include "common/json.h"
#include "common/strbuf.h"
#include "rpc/auth.h"

/* What --help and --version say. */
static const ss__program program = {
    "shadowsync-ctl", "Commands for a shadowsync-agent or shadowsync-ps HTTP endpoint:\n"
                      "  status      print /status (JSON: members, groups, last round, sync gap)\n"
                      "  metrics     print /metrics (Prometheus text)\n"
                      "  checkpoint  ask it to checkpoint (POST /checkpoint)\n"
                      "  watch       live view of rounds/s, sync gap and divergence per group\n"
                      "  health      GET /healthz; exit 0 when it answers (a container's probe)\n"
                      "Usage: shadowsync-ctl COMMAND [--url http://host:port] [flags]"};

static size_t on_body(char *data, size_t size, size_t n, void *ctx) {
    ss__strbuf_printf(ctx, "%.*s", (int)(size * n), data);
    return size * n;
}

/* GET or POST url + path; the body in *out (caller frees). Returns the
 * HTTP code, or -1 when nothing answered (err says why). */
static long fetch(const char *base, const char *path, bool post, long timeout_ms, char **out,
                  char *err, size_t errlen) {
    char url[1024];
    snprintf(url, sizeof url, "%s%s", base, path);
    CURL *c = curl_easy_init();
    if (!c) {
        snprintf(err, errlen, "curl_easy_init failed");
        return -1;
    }
    ss__strbuf body = {0};
    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    struct curl_slist *headers = NULL;
    if (post) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
        /* A POST changes state: it carries the shared token when there is one. */
        char auth[SS_AUTH_HEADER_MAX], header[SS_AUTH_HEADER_MAX + 32];
        if (ss__auth_header_from_env(auth, sizeof auth, err, errlen) != SS_OK) {
            curl_easy_cleanup(c);
            return -1;
        }
        if (auth[0]) {
            snprintf(header, sizeof header, "Authorization: %s", auth);
            headers = curl_slist_append(NULL, header);
            curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
        }
    }
    CURLcode rc = curl_easy_perform(c);
    long code = -1;
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    else
        snprintf(err, errlen, "%.200s: %.300s", url, cerr[0] ? cerr : curl_easy_strerror(rc));
    curl_easy_cleanup(c);
    curl_slist_free_all(headers);
    if (ss__strbuf_take(&body, out, NULL) != SS_OK) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return code;
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
        long code = fetch(url, "/status", false, timeout_ms, &body, err, sizeof err);
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

int main(int argc, char **argv) {
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
                "shadowsync-ctl: %s%s\n(commands: status, metrics, checkpoint, watch, health; "
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
        long code = fetch(url, path, post, (long)timeout_ms, &body, err, sizeof err);
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
