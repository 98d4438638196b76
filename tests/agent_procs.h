/* Agent-side helpers for the multi-process tests: start shadowsync-agent,
 * talk HTTP to it (http_client.h), speak raw frames to its socket. */
#ifndef SS_TESTS_AGENT_PROCS_H
#define SS_TESTS_AGENT_PROCS_H

#include <sys/socket.h>
#include <sys/un.h>

#include "http_client.h"
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
