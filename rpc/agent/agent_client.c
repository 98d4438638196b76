/* The hooks' side of the agent socket. */
#include "rpc/agent/agent_client.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "rpc/agent/agent_wire.h"

#define MAX_GROUPS     256
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 1000
#define WATCH_MS       100 /* how fast a dead agent is noticed */

typedef struct spec_copy {
    ss__agent_group_spec spec;
    char name[64], algo[16];
    /* Random, drawn once: sent at every registration, so that the agent
     * after a restart joins the PS as the member the dead one left
     * (agent.proto RegisterGroup.member_key). */
    uint64_t member_key;
} spec_copy;

struct ss__agent_client {
    char path[108];
    uid_t agent_uid; /* the only uid trusted at the socket */
    char trainer[64];
    uint32_t timeout_ms;
    pthread_t thread;
    pthread_mutex_t lock; /* guards everything below; held for a request and its reply */
    pthread_cond_t cond;  /* connected changes */
    int sock;             /* -1 when not connected; only the thread closes it */
    bool connected, broken, stopping;
    bool finishing, finished; /* Finish under way / done: no new groups / no reconnecting */
    spec_copy groups[MAX_GROUPS];
    size_t ngroups;
    _Atomic uint64_t sessions;
    uint64_t failures; /* connection attempts failed in a row (for the log) */
    char why[400];     /* why the last connection attempt failed ("" when none did) */
};

/* Why connect() to the agent's socket failed, in the words an operator
 * acts on: a permission problem names the socket's mode and owner and the
 * setting that fixes it. */
static ss_status connect_failed(ss__agent_client *c, int err) {
    struct stat sb;
    if (err == EACCES || err == EPERM) {
        if (stat(c->path, &sb) == 0)
            snprintf(c->why, sizeof c->why,
                     "permission denied on %s: it is %04o uid %d gid %d, this process uid %d gid "
                     "%d; the agent's --socket-group (SHADOWSYNC_SOCKET_GROUP) lets a group's "
                     "members in",
                     c->path, (unsigned)(sb.st_mode & 07777), (int)sb.st_uid, (int)sb.st_gid,
                     (int)geteuid(), (int)getegid());
        else
            snprintf(c->why, sizeof c->why,
                     "permission denied on %s (its directory: this process uid %d gid %d may not "
                     "enter it)",
                     c->path, (int)geteuid(), (int)getegid());
        return SS_ERR_PERMISSION;
    }
    snprintf(c->why, sizeof c->why, "cannot connect to %s: %s%s", c->path, strerror(err),
             err == ENOENT || err == ECONNREFUSED ? " (is the agent running?)" : "");
    return SS_ERR_IO;
}

/* Caller holds the lock; the socket is connected. */
static ss_status send_group(ss__agent_client *c, const spec_copy *s, ss_status *verdict, char *why,
                            size_t whylen) {
    const ss__agent_group_spec *g = &s->spec;
    ss__pb_register_group r = SHADOWSYNC__AGENT__V1__REGISTER_GROUP__INIT;
    r.member_key = s->member_key;
    r.name = (char *)g->name;
    r.n = g->n;
    r.algo = (char *)g->algo;
    r.alpha = g->alpha;
    r.bmuf_eta = g->bmuf_eta;
    r.bmuf_zeta = g->bmuf_zeta;
    r.bmuf_nesterov = g->bmuf_nesterov != 0;
    if (g->on_device) {
        r.cuda_ipc_handle.data = (uint8_t *)g->cuda_ipc_handle;
        r.cuda_ipc_handle.len = sizeof g->cuda_ipc_handle;
        r.device = (uint32_t)g->device;
    }
    ss__pb_agent_request rq = SHADOWSYNC__AGENT__V1__AGENT_REQUEST__INIT;
    rq.body_case = SHADOWSYNC__AGENT__V1__AGENT_REQUEST__BODY_REGISTER_GROUP;
    rq.register_group = &r;
    ss_status st = ss__agent_send_request(c->sock, &rq, g->fd);
    if (st == SS_OK)
        st = ss__agent_recv_reply(c->sock, (int)c->timeout_ms, verdict, why, whylen);
    return st;
}

/* A trainer hands its replicas (memfds) to whatever listens on the
 * socket: it talks only to a process of the expected uid, through a
 * directory that uid (or root) owns and nobody else may write. why says
 * what was wrong. */
static ss_status check_agent(const ss__agent_client *c, int fd, char *why, size_t whylen) {
    char dir[sizeof c->path];
    snprintf(dir, sizeof dir, "%s", c->path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    struct stat sb;
    if (slash && slash != dir && stat(dir, &sb) == 0 &&
        ((sb.st_uid != c->agent_uid && sb.st_uid != 0) || (sb.st_mode & (S_IWGRP | S_IWOTH)))) {
        snprintf(why, whylen,
                 "socket directory %s is owned by uid %d with mode %03o; expected uid %d (or "
                 "root) and no group or other write (SHADOWSYNC_AGENT_UID)",
                 dir, (int)sb.st_uid, (unsigned)(sb.st_mode & 0777), (int)c->agent_uid);
        return SS_ERR_PERMISSION;
    }
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        snprintf(why, whylen, "cannot read the agent's credentials: %s", strerror(errno));
        return SS_ERR_IO;
    }
    if (cred.uid != c->agent_uid) {
        snprintf(why, whylen,
                 "the process on %s runs as uid %d, not the expected agent uid %d "
                 "(SHADOWSYNC_AGENT_UID)",
                 c->path, (int)cred.uid, (int)c->agent_uid);
        return SS_ERR_PERMISSION;
    }
    return SS_OK;
}

/* Connects, says Hello, registers every group. Caller holds the lock. */
static ss_status connect_and_register(ss__agent_client *c) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return SS_ERR_IO;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", c->path);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        const int err = errno;
        close(fd);
        return connect_failed(c, err);
    }
    c->why[0] = '\0';
    char distrust[300];
    ss_status trust = check_agent(c, fd, distrust, sizeof distrust);
    if (trust != SS_OK) {
        if (c->failures == 0)
            SS_LOG_ERRORF("hooks", "event=agent_not_trusted socket=%s why=\"%s\"", c->path,
                          distrust);
        close(fd);
        return trust;
    }
    c->sock = fd;
    ss__pb_hello h = SHADOWSYNC__AGENT__V1__HELLO__INIT;
    h.protocol = SS_AGENT_PROTOCOL;
    h.trainer = c->trainer;
    h.pid = (uint32_t)getpid();
    ss__pb_agent_request rq = SHADOWSYNC__AGENT__V1__AGENT_REQUEST__INIT;
    rq.body_case = SHADOWSYNC__AGENT__V1__AGENT_REQUEST__BODY_HELLO;
    rq.hello = &h;
    ss_status verdict = SS_OK;
    char why[256] = "";
    ss_status st = ss__agent_send_request(fd, &rq, -1);
    if (st == SS_OK)
        st = ss__agent_recv_reply(fd, (int)c->timeout_ms, &verdict, why, sizeof why);
    for (size_t i = 0; st == SS_OK && verdict == SS_OK && i < c->ngroups; i++)
        st = send_group(c, &c->groups[i], &verdict, why, sizeof why);
    if (st != SS_OK || verdict != SS_OK) {
        if (verdict != SS_OK && c->failures == 0)
            SS_LOG_ERRORF("hooks", "event=agent_refused socket=%s status=%s why=\"%s\"", c->path,
                          ss_status_name(verdict), why);
        close(fd);
        c->sock = -1;
        return verdict != SS_OK ? verdict : st;
    }
    return SS_OK;
}

static void *client_main(void *arg) {
    ss__agent_client *c = arg;
    uint32_t backoff = BACKOFF_MIN_MS;
    pthread_mutex_lock(&c->lock);
    while (!c->stopping) {
        if (!c->connected && c->finished) { /* nothing left to sync */
            pthread_mutex_unlock(&c->lock);
            ss__sleep_ns(WATCH_MS * 1000000ull);
            pthread_mutex_lock(&c->lock);
            continue;
        }
        if (!c->connected) {
            ss_status st = connect_and_register(c);
            if (st == SS_OK) {
                c->connected = true;
                c->broken = false;
                backoff = BACKOFF_MIN_MS;
                uint64_t k = atomic_fetch_add(&c->sessions, 1) + 1;
                SS_LOG_INFOF("hooks", "event=agent_connected socket=%s groups=%zu session=%llu",
                             c->path, c->ngroups, (unsigned long long)k);
                c->failures = 0;
                pthread_cond_broadcast(&c->cond);
                continue;
            }
            if (c->failures++ == 0)
                SS_LOG_WARNF("hooks",
                             "event=agent_unreachable socket=%s status=%s why=\"%s\" "
                             "note=\"training goes on; retrying\"",
                             c->path, ss_status_name(st), c->why);
            pthread_mutex_unlock(&c->lock);
            ss__sleep_ns((uint64_t)backoff * 1000000ull);
            backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
            pthread_mutex_lock(&c->lock);
            continue;
        }
        /* Watch for the agent going away without reading: replies are
         * read by the thread that sent the request. */
        int fd = c->sock;
        bool broken = c->broken;
        pthread_mutex_unlock(&c->lock);
        struct pollfd p = {.fd = fd, .events = POLLRDHUP};
        int r = broken ? 1 : poll(&p, 1, WATCH_MS);
        pthread_mutex_lock(&c->lock);
        if (c->broken || (r > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))) {
            SS_LOG_WARNF("hooks",
                         "event=agent_lost socket=%s note=\"training goes on; "
                         "reconnecting\"",
                         c->path);
            close(c->sock);
            c->sock = -1;
            c->connected = false;
            c->broken = false;
            c->failures = 1; /* already said */
            pthread_cond_broadcast(&c->cond);
        }
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

ss_status ss__agent_client_create(const char *socket_path, const char *trainer, uint32_t timeout_ms,
                                  ss__agent_client **out, char *why, size_t whylen) {
    if (!socket_path || !*socket_path || !trainer || !out ||
        strlen(socket_path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return ss__fail(
            why, whylen, SS_ERR_INVALID_ARGUMENT,
            "an agent client needs a socket path shorter than %zu bytes and a trainer name",
            sizeof(((struct sockaddr_un *)0)->sun_path));
    ss__agent_client *c = calloc(1, sizeof *c);
    if (!c)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the agent client");
    snprintf(c->path, sizeof c->path, "%s", socket_path);
    /* The agent runs as this uid unless SHADOWSYNC_AGENT_UID names another. */
    c->agent_uid = geteuid();
    const char *uid_env = getenv("SHADOWSYNC_AGENT_UID");
    if (uid_env && *uid_env) {
        char *end;
        long v = strtol(uid_env, &end, 10);
        if (*end || v < 0 || v > 0x7fffffff) {
            SS_LOG_ERRORF("hooks",
                          "event=bad_setting SHADOWSYNC_AGENT_UID=\"%s\" why=\"not a uid\"",
                          uid_env);
            free(c);
            return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                            "SHADOWSYNC_AGENT_UID=%s: not a uid", uid_env);
        }
        c->agent_uid = (uid_t)v;
    }
    snprintf(c->trainer, sizeof c->trainer, "%s", trainer);
    c->timeout_ms = timeout_ms ? timeout_ms : 10000;
    c->sock = -1;
    pthread_mutex_init(&c->lock, NULL);
    ss__cond_init_monotonic(&c->cond);
    if (pthread_create(&c->thread, NULL, client_main, c) != 0) {
        pthread_mutex_destroy(&c->lock);
        pthread_cond_destroy(&c->cond);
        free(c);
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no thread for the agent client");
    }
    *out = c;
    return SS_OK;
}

ss_status ss__agent_client_add_group(ss__agent_client *c, const ss__agent_group_spec *g) {
    if (!c || !g || !g->name || strlen(g->name) >= 64 || !g->algo || strlen(g->algo) >= 16 ||
        g->fd < 0)
        return SS_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&c->lock);
    if (c->ngroups == MAX_GROUPS || c->finishing) {
        pthread_mutex_unlock(&c->lock);
        return c->finishing ? SS_ERR_STATE : SS_ERR_TOO_LARGE;
    }
    spec_copy *s = &c->groups[c->ngroups];
    s->spec = *g;
    snprintf(s->name, sizeof s->name, "%s", g->name);
    snprintf(s->algo, sizeof s->algo, "%s", g->algo);
    s->spec.name = s->name;
    s->spec.algo = s->algo;
    if (getrandom(&s->member_key, sizeof s->member_key, 0) != (ssize_t)sizeof s->member_key)
        s->member_key = 0; /* none: a restarted agent's PS waits for the old member to expire */
    ss_status verdict = SS_OK;
    if (c->connected && !c->broken) {
        char why[256] = "";
        ss_status st = send_group(c, s, &verdict, why, sizeof why);
        if (st != SS_OK)
            c->broken = true; /* registered with the rest at the next connection */
        else if (verdict != SS_OK)
            SS_LOG_ERRORF("hooks", "event=group_refused group=%s status=%s why=\"%s\"", g->name,
                          ss_status_name(verdict), why);
    }
    if (verdict == SS_OK)
        c->ngroups++;
    pthread_mutex_unlock(&c->lock);
    return verdict;
}

ss_status ss__agent_client_finish(ss__agent_client *c, uint32_t final_rounds,
                                  uint32_t final_sync_ms, uint32_t wait_ms, char *why_out,
                                  size_t whylen) {
    if (!c)
        return SS_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&c->lock);
    if (c->finishing) {
        pthread_mutex_unlock(&c->lock);
        return SS_OK;
    }
    c->finishing = true;
    uint64_t until = ss__now_ns() + (uint64_t)wait_ms * 1000000ull;
    while ((!c->connected || c->broken) && ss__now_ns() < until) {
        struct timespec ts = ss__deadline_in(50000000ull);
        pthread_cond_timedwait(&c->cond, &c->lock, &ts);
    }
    ss_status st = SS_ERR_IO, verdict = SS_OK;
    char why[256] = "";
    if (c->connected && !c->broken) {
        ss__pb_finish f = SHADOWSYNC__AGENT__V1__FINISH__INIT;
        f.final_rounds = final_rounds;
        f.final_sync_ms = final_sync_ms;
        ss__pb_agent_request rq = SHADOWSYNC__AGENT__V1__AGENT_REQUEST__INIT;
        rq.body_case = SHADOWSYNC__AGENT__V1__AGENT_REQUEST__BODY_FINISH;
        rq.finish = &f;
        /* Final rounds take final_sync_ms and a few deadlines at most. */
        int wait = (int)(final_sync_ms + 4 * c->timeout_ms + 10000);
        st = ss__agent_send_request(c->sock, &rq, -1);
        if (st == SS_OK)
            st = ss__agent_recv_reply(c->sock, wait, &verdict, why, sizeof why);
        if (st != SS_OK)
            c->broken = true;
    }
    c->finished = true;
    const bool denied = !c->connected && !strncmp(c->why, "permission denied", 17);
    if (st != SS_OK && why_out && whylen)
        snprintf(why_out, whylen, "%s", c->why[0] ? c->why : "the agent did not answer");
    pthread_mutex_unlock(&c->lock);
    if (st != SS_OK) {
        SS_LOG_WARNF("hooks",
                     "event=final_rounds_skipped socket=%s status=%s note=\"no agent; "
                     "the replicas are kept as trained\"",
                     c->path, ss_status_name(st));
        return denied ? SS_ERR_PERMISSION : SS_ERR_IO;
    }
    return verdict;
}

uint64_t ss__agent_client_sessions(ss__agent_client *c) {
    return c ? atomic_load(&c->sessions) : 0;
}

void ss__agent_client_destroy(ss__agent_client *c) {
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    c->stopping = true;
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->thread, NULL);
    if (c->sock >= 0)
        close(c->sock);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    free(c);
}
