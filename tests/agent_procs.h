/* Agent-side helpers for the multi-process tests: start shadowsync-agent,
 * talk HTTP to it (libcurl), speak raw frames to its socket. */
#ifndef SS_TESTS_AGENT_PROCS_H
#define SS_TESTS_AGENT_PROCS_H

#include <curl/curl.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "common/strbuf.h"
#include "procs.h"

/* Starts shadowsync-agent on `sock` against `ps` with its HTTP endpoint on
 * a free loopback port, written to http ("http://127.0.0.1:port"). */
static inline pid_t agent_start(const char *log, const char *sock, const char *ps, char *http,
                                size_t httplen, char *const extra[]) {
    char *argv[24] = {SHADOWSYNC_AGENT, "--socket", (char *)sock,  "--ps",
                      (char *)ps,       "--http",   "127.0.0.1:0", NULL};
    int n = 7;
    for (int i = 0; extra && extra[i] && n < 22; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    pid_t pid = proc_spawn(argv, log);
    char addr[100];
    proc_address_after(log, "http on", addr, sizeof addr);
    snprintf(http, httplen, "http://%s", addr);
    return pid;
}

static size_t http_collect(char *data, size_t size, size_t n, void *ctx) {
    ss__strbuf_printf(ctx, "%.*s", (int)(size * n), data);
    return size * n;
}

/* GET (body == NULL) or POST; returns the HTTP code (-1: no answer) and
 * the reply in *out (caller frees; may be NULL). */
static inline long http_request(const char *base, const char *path, const char *method,
                                const char *body, size_t body_len, char **out) {
    char url[100000 + 256];
    snprintf(url, sizeof url, "%s%s", base, path);
    CURL *c = curl_easy_init();
    ss__strbuf b = {0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (method)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)body_len);
    }
    long code = -1;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    char *text = NULL;
    if (ss__strbuf_take(&b, &text, NULL) != SS_OK)
        text = NULL;
    if (out)
        *out = text;
    else
        free(text);
    return code;
}

/* Sum of every series of `name` (with any labels) in Prometheus text;
 * -1 when there is none. With `label` ("reason=\"uid\""), only series
 * whose labels contain it. */
static inline double metric_sum(const char *text, const char *name, const char *label) {
    double sum = -1;
    size_t nl = strlen(name);
    for (const char *line = text; line && *line; line = strchr(line, '\n')) {
        if (*line == '\n')
            line++;
        if (strncmp(line, name, nl) || (line[nl] != '{' && line[nl] != ' '))
            continue;
        const char *end = strchr(line, '\n');
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", (int)(end ? end - line : (long)strlen(line)), line);
        if (label && !strstr(buf, label))
            continue;
        const char *sp = strrchr(buf, ' ');
        sum = (sum < 0 ? 0 : sum) + atof(sp + 1);
    }
    return sum;
}

static inline double agent_metric(const char *http, const char *name, const char *label) {
    char *text = NULL;
    if (http_request(http, "/metrics", NULL, NULL, 0, &text) != 200) {
        free(text);
        return -2;
    }
    double v = metric_sum(text, name, label);
    free(text);
    return v;
}

static inline int unix_connect(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    memcpy(addr.sun_path, path, strlen(path) + 1);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

#endif
