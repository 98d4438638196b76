/* shadowsync-agent core: the socket, peer checks, and one session (engine
 * + mapped replicas) per connected trainer process. */
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent/agent_internal.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/names.h"
#include "common/strbuf.h"
#include "rpc/rpc.h"

#define POLL_MS 250 /* how often sessions publish stats and notice a stop */

static void count_reject_n(ss__metrics *m, const char *reason, uint64_t n) {
    ss__metrics_count(m, "shadowsync_agent_rejected_total",
                      "Connections and socket requests the agent refused, by reason.", "reason",
                      reason, n);
}

void ss__agent_count_reject(ss__agent *a, const char *reason) {
    count_reject_n(a->cfg.metrics, reason, 1);
}

/* ---- publishing stats into the trainers' shared headers ---- */

static void publish(agent_group *g, bool with_gaps) {
    ss__group_stats s;
    if (!g->eg || ss__engine_group_stats(g->eg, &s) != SS_OK)
        return;
    ss__shm_header *h = g->shm.hdr;
    atomic_store(&h->rounds, g->base_rounds + s.rounds);
    atomic_store(&h->failed_rounds, g->base_failed + s.failed_rounds);
    atomic_store(&h->rejoins, g->base_rejoins + s.rejoins);
    ss__shm_store_double(&h->divergence_bits, s.divergence);
    if (with_gaps) {
        atomic_store(&h->gap_p50, s.gap_p50);
        atomic_store(&h->gap_p99, s.gap_p99);
        atomic_store(&h->gap_max, s.gap_max);
        ss__shm_store_double(&h->gap_mean_bits, s.gap_mean);
    }
}

static void publish_all(agent_session *s, bool with_gaps) {
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->ngroups; i++)
        publish(&s->groups[i], with_gaps);
    pthread_mutex_unlock(&s->lock);
}

/* The engine goes (its rounds stop, its groups leave the PS), then the
 * mappings. The replicas are the trainer's: nothing of them is lost. */
static void drop_engine(agent_session *s) {
    pthread_mutex_lock(&s->lock);
    ss__engine *e = s->engine;
    s->engine = NULL;
    for (size_t i = 0; i < s->ngroups; i++)
        s->groups[i].eg = NULL;
    pthread_mutex_unlock(&s->lock);
    if (!e)
        return;
    atomic_fetch_add(&s->agent->rounds_done, ss__engine_rounds(e));
    ss__engine_destroy(e);
}

static void drop_groups(agent_session *s) {
    pthread_mutex_lock(&s->lock);
    size_t k = s->ngroups;
    s->ngroups = 0;
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < k; i++) {
        ss__replica_destroy(s->groups[i].replica);
        ss__shm_group_release(&s->groups[i].shm);
    }
    if (k)
        ss__gauge_add(s->agent->m_groups, -(double)k);
}

/* ---- requests ---- */

static bool handle_hello(agent_session *s, const ss__pb_hello *h) {
    ss__agent *a = s->agent;
    if (s->hello) {
        ss__agent_count_reject(a, "wrong_message");
        ss__agent_send_reply(s->sock, SS_ERR_STATE, "Hello sent twice on one connection");
        return true;
    }
    if (h->protocol != SS_AGENT_PROTOCOL) {
        ss__agent_count_reject(a, "wrong_message");
        char msg[128];
        snprintf(msg, sizeof msg, "protocol %u not supported (agent speaks %u)", h->protocol,
                 SS_AGENT_PROTOCOL);
        ss__agent_send_reply(s->sock, SS_ERR_INVALID_ARGUMENT, msg);
        return false;
    }
    if (!ss__name_valid(h->trainer)) {
        ss__agent_count_reject(a, "invalid");
        ss__agent_send_reply(s->sock, SS_ERR_INVALID_ARGUMENT,
                             "trainer name must be " SS_NAME_RULE);
        return false;
    }
    ss__engine_config ecfg = {.transport = a->cfg.transport,
                              .metrics = a->cfg.metrics,
                              .trainer = h->trainer,
                              .threads = a->cfg.shadow_threads ? a->cfg.shadow_threads : 1,
                              .round_interval_us = a->cfg.round_interval_us,
                              .min_round_gap = a->cfg.min_round_gap,
                              .heartbeat_interval_ms = a->cfg.heartbeat_ms,
                              .drop_metrics_at_destroy = true};
    ss__engine *e = NULL;
    char why[200] = "";
    ss_status st = ss__engine_create(&ecfg, &e, why, sizeof why);
    if (st == SS_OK && (st = ss__engine_start(e, why, sizeof why)) != SS_OK)
        ss__engine_destroy(e);
    if (st != SS_OK) {
        char said[300];
        snprintf(said, sizeof said, "cannot start a shadow pool: %s", why);
        ss__agent_send_reply(s->sock, st, said);
        return false;
    }
    pthread_mutex_lock(&s->lock);
    snprintf(s->trainer, sizeof s->trainer, "%s", h->trainer);
    s->engine = e;
    s->hello = true;
    pthread_mutex_unlock(&s->lock);
    SS_LOG_INFOF("agent", "event=trainer_joined session=%llu trainer=%s pid=%d uid=%d",
                 (unsigned long long)s->id, s->trainer, (int)s->peer_pid, (int)s->peer_uid);
    return ss__agent_send_reply(s->sock, SS_OK, NULL) == SS_OK;
}

/* Checks a registration's fields before anything is mapped. */
static ss_status check_register(agent_session *s, const ss__pb_register_group *r,
                                ss__sync_params *p, char *why, size_t whylen) {
    memset(p, 0, sizeof *p);
    if (!ss__name_valid(r->name)) {
        ss__why(why, whylen, "group name must be " SS_NAME_RULE);
        return SS_ERR_INVALID_ARGUMENT;
    }
    if (r->n == 0 || r->n > (1ull << 32)) {
        ss__why(why, whylen, "group size must be 1..2^32 floats");
        return SS_ERR_INVALID_ARGUMENT;
    }
    if (!r->algo || ss__algo_parse(r->algo, &p->algo) != SS_OK) {
        ss__why(why, whylen, "algo must be easgd, ma or bmuf");
        return SS_ERR_INVALID_ARGUMENT;
    }
    p->alpha = r->alpha;
    p->member_key = r->member_key; /* the trainer's, the same through our restarts */
    p->bmuf =
        (ss__bmuf_params){.eta = r->bmuf_eta, .zeta = r->bmuf_zeta, .nesterov = r->bmuf_nesterov};
    ss_status st = ss__sync_params_check(p, why, whylen);
    if (st != SS_OK)
        return st;
    for (size_t i = 0; i < s->ngroups; i++)
        if (!strcmp(s->groups[i].name, r->name)) {
            ss__why(why, whylen, "group already registered by this trainer");
            return SS_ERR_EXISTS;
        }
    const ss__agent_config *c = &s->agent->cfg;
    const size_t max_groups = c->max_trainer_groups && c->max_trainer_groups < AGENT_MAX_GROUPS
                                  ? c->max_trainer_groups
                                  : AGENT_MAX_GROUPS;
    if (s->ngroups >= max_groups) {
        ss__why(why, whylen, "a trainer may register %zu groups here (--max-trainer-groups)",
                max_groups);
        return SS_ERR_TOO_LARGE;
    }
    const uint64_t max_bytes =
        c->max_trainer_bytes ? c->max_trainer_bytes : SS_AGENT_DEFAULT_MAX_TRAINER_BYTES;
    if (s->group_bytes + r->n * 4 > max_bytes) {
        ss__why(why, whylen,
                "group of %llu floats would take this trainer's groups to %llu bytes, over the "
                "agent's limit of %llu (--max-trainer-mb)",
                (unsigned long long)r->n, (unsigned long long)(s->group_bytes + r->n * 4),
                (unsigned long long)max_bytes);
        return SS_ERR_TOO_LARGE;
    }
    return SS_OK;
}

static bool handle_register(agent_session *s, const ss__pb_register_group *r, ss__agent_frame *f) {
    ss__agent *a = s->agent;
    char why[256] = "";
    ss__sync_params params;
    if (!s->hello || s->finished) {
        ss__agent_count_reject(a, "wrong_message");
        ss__agent_send_reply(s->sock, SS_ERR_STATE,
                             s->finished ? "RegisterGroup after Finish"
                                         : "RegisterGroup before Hello");
        return true;
    }
    if (f->fd_truncated || f->fd < 0) {
        ss__agent_count_reject(a, "bad_fd");
        ss__agent_send_reply(s->sock, SS_ERR_INVALID_ARGUMENT,
                             f->fd_truncated
                                 ? "RegisterGroup must carry exactly one descriptor (control "
                                   "message truncated)"
                                 : "RegisterGroup must carry the group's memfd (SCM_RIGHTS)");
        return true;
    }
    ss_status st = check_register(s, r, &params, why, sizeof why);
    if (st != SS_OK) {
        ss__agent_count_reject(a, st == SS_ERR_TOO_LARGE ? "too_large" : "invalid");
        ss__agent_send_reply(s->sock, st, why);
        return true;
    }
    agent_group g = {0};
    snprintf(g.name, sizeof g.name, "%s", r->name);
    g.algo = params.algo;
    int fd = f->fd;
    f->fd = -1; /* map() closes it either way */
    if ((st = ss__shm_group_map(fd, (size_t)r->n, &g.shm, why, sizeof why)) != SS_OK) {
        ss__agent_count_reject(a, "bad_fd");
        ss__agent_send_reply(s->sock, st, why);
        return true;
    }
    ss__shm_header *h = g.shm.hdr;
    g.base_rounds = atomic_load(&h->rounds);
    g.base_failed = atomic_load(&h->failed_rounds);
    g.base_rejoins = atomic_load(&h->rejoins);
    g.registered_ns = ss__now_ns();
    if (r->cuda_ipc_handle.len == 0) {
        st = ss__replica_wrap_shared(g.shm.data, g.shm.n, &h->iterations, &g.replica);
    } else {
        /* A device group: the floats are in the trainer's GPU memory. */
        char dwhy[300] = "a CUDA IPC handle is 64 bytes";
        st = r->cuda_ipc_handle.len == SS_DEVICE_IPC_HANDLE_BYTES && r->device <= INT32_MAX
                 ? ss__replica_open_device_ipc((int)r->device, r->cuda_ipc_handle.data, g.shm.n,
                                               &h->iterations, &g.replica, dwhy, sizeof dwhy)
                 : SS_ERR_INVALID_ARGUMENT;
        if (st != SS_OK) {
            ss__agent_count_reject(a, "device");
            ss__shm_group_release(&g.shm);
            snprintf(why, sizeof why, "device group %s on device %u: %s", g.name, r->device, dwhy);
            ss__agent_send_reply(s->sock, st, why);
            return true;
        }
    }
    /* Not under the session lock: joining is an RPC that may wait for a
     * slow PS, and /status, the accept thread and other trainers must not
     * wait behind it. Only this session's thread adds its groups. */
    if (st == SS_OK) {
        ss__rpc_clear_failure();
        st = ss__engine_add_group(s->engine, g.name, g.replica, &params, &g.eg);
    }
    if (st == SS_OK) {
        pthread_mutex_lock(&s->lock);
        s->groups[s->ngroups++] = g;
        s->group_bytes += r->n * 4;
        pthread_mutex_unlock(&s->lock);
    }
    if (st != SS_OK) {
        /* Said here, for the operator, and to the trainer: which server and why. */
        const char *said = ss__rpc_last_failure();
        SS_LOG_ERRORF("agent", "event=group_join_failed trainer=%s group=%s status=%s why=\"%s\"",
                      s->trainer, g.name, ss_status_name(st), said[0] ? said : ss_strerror(st));
        snprintf(why, sizeof why, "cannot join group %s at the parameter servers: %s", g.name,
                 said[0] ? said : ss_strerror(st));
        ss__counter_add(a->m_join_failed, 1);
        pthread_mutex_lock(&a->lock);
        snprintf(a->join_failure, sizeof a->join_failure, "trainer %s: %s", s->trainer, why);
        a->join_failure_ns = ss__now_ns();
        pthread_mutex_unlock(&a->lock);
        ss__replica_destroy(g.replica);
        ss__shm_group_release(&g.shm);
        ss__agent_send_reply(s->sock, st, why);
        return true;
    }
    atomic_fetch_add(&h->agent_sessions, 1);
    ss__gauge_add(a->m_groups, 1);
    SS_LOG_INFOF("agent", "event=group_registered trainer=%s group=%s n=%llu algo=%s", s->trainer,
                 g.name, (unsigned long long)r->n, r->algo);
    return ss__agent_send_reply(s->sock, SS_OK, NULL) == SS_OK;
}

/* Final rounds in this session's thread (the trainer waits for the
 * reply), then the trainer leaves the PS. */
static bool handle_finish(agent_session *s, const ss__pb_finish *fin) {
    if (!s->hello || s->finished) {
        ss__agent_count_reject(s->agent, "wrong_message");
        ss__agent_send_reply(s->sock, SS_ERR_STATE,
                             s->finished ? "Finish sent twice" : "Finish before Hello");
        return true;
    }
    ss__engine_stop(s->engine);
    publish_all(s, true); /* the gap describes training: frozen before the final rounds */
    ss_status st = ss__engine_final_rounds(s->engine, fin->final_rounds, fin->final_sync_ms);
    publish_all(s, false);
    drop_engine(s);
    s->finished = true;
    SS_LOG_INFOF("agent", "event=trainer_finished trainer=%s status=%s", s->trainer,
                 ss_status_name(st));
    return ss__agent_send_reply(s->sock, st, st == SS_OK ? NULL : "final rounds failed") == SS_OK;
}

/* One frame. Returns false when the connection must end. */
static bool handle_frame(agent_session *s, ss__agent_frame *f) {
    ss__pb_agent_request *rq = shadowsync__agent__v1__agent_request__unpack(NULL, f->len, f->buf);
    if (!rq) {
        ss__agent_count_reject(s->agent, "garbage");
        ss__agent_send_reply(s->sock, SS_ERR_PARSE, "malformed frame: not an AgentRequest");
        return true;
    }
    bool keep = true;
    if (rq->body_case != SHADOWSYNC__AGENT__V1__AGENT_REQUEST__BODY_REGISTER_GROUP &&
        (f->fd >= 0 || f->fd_truncated)) {
        ss__agent_count_reject(s->agent, "bad_fd");
        ss__agent_send_reply(s->sock, SS_ERR_INVALID_ARGUMENT,
                             "a descriptor came with a message that takes none");
    } else if (rq->body_case == SHADOWSYNC__AGENT__V1__AGENT_REQUEST__BODY_HELLO) {
        keep = handle_hello(s, rq->hello);
    } else if (!s->hello) {
        ss__agent_count_reject(s->agent, "wrong_message");
        ss__agent_send_reply(s->sock, SS_ERR_STATE, "expected Hello first");
    } else if (rq->body_case == SHADOWSYNC__AGENT__V1__AGENT_REQUEST__BODY_REGISTER_GROUP) {
        keep = handle_register(s, rq->register_group, f);
    } else if (rq->body_case == SHADOWSYNC__AGENT__V1__AGENT_REQUEST__BODY_FINISH) {
        keep = handle_finish(s, rq->finish);
    } else {
        ss__agent_count_reject(s->agent, "wrong_message");
        ss__agent_send_reply(s->sock, SS_ERR_INVALID_ARGUMENT, "empty or unknown request");
    }
    shadowsync__agent__v1__agent_request__free_unpacked(rq, NULL);
    return keep;
}

static void *session_main(void *arg) {
    agent_session *s = arg;
    ss__agent *a = s->agent;
    while (!atomic_load(&a->stopping)) {
        ss__agent_frame f;
        ss_status st = ss__agent_recv_frame(s->sock, SS_AGENT_MAX_FRAME, POLL_MS, &f);
        if (st == SS_ERR_TIMEOUT) {
            if (!s->finished)
                publish_all(s, true);
            continue;
        }
        if (st != SS_OK) {
            if (st != SS_ERR_END) {
                const char *reason = st == SS_ERR_TOO_LARGE ? "too_large"
                                     : st == SS_ERR_PARSE   ? "truncated"
                                                            : "io";
                ss__agent_count_reject(a, reason);
                ss__agent_send_reply(s->sock, st, f.why);
                SS_LOG_WARNF("agent", "event=connection_dropped session=%llu reason=%s why=\"%s\"",
                             (unsigned long long)s->id, reason, f.why ? f.why : "");
            }
            ss__agent_frame_release(&f);
            break;
        }
        bool keep = handle_frame(s, &f);
        ss__agent_frame_release(&f);
        if (!keep)
            break;
    }
    if (!s->finished)
        publish_all(s, true);
    drop_engine(s);
    drop_groups(s);
    SS_LOG_INFOF("agent", "event=trainer_dropped session=%llu trainer=%s",
                 (unsigned long long)s->id, s->trainer[0] ? s->trainer : "-");
    shutdown(s->sock, SHUT_RDWR);
    atomic_store(&s->done, true);
    return NULL;
}

/* ---- accepting ---- */

/* With --socket-group, a member of the group by its primary gid or by a
 * supplementary one (SO_PEERGROUPS: the peer's groups at connect time). */
static bool peer_in_group(const ss__agent *a, int fd, const struct ucred *c) {
    if (a->group_gid == (gid_t)-1)
        return false;
    if (c->gid == a->group_gid)
        return true;
    gid_t groups[256];
    socklen_t len = sizeof groups;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0)
        return false;
    for (size_t i = 0; i < len / sizeof *groups; i++)
        if (groups[i] == a->group_gid)
            return true;
    return false;
}

static bool peer_allowed(const ss__agent *a, int fd, const struct ucred *c) {
    if (c->uid == a->self_uid)
        return true;
    for (size_t i = 0; i < a->cfg.nallow; i++)
        if (a->cfg.allow_uids[i] == c->uid)
            return true;
    return peer_in_group(a, fd, c);
}

static void session_free(agent_session *s) {
    close(s->sock);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* Joins and frees sessions whose thread has returned. */
static void reap_sessions(ss__agent *a, bool all) {
    pthread_mutex_lock(&a->lock);
    agent_session **pp = &a->sessions;
    while (*pp) {
        agent_session *s = *pp;
        if (all)
            shutdown(s->sock, SHUT_RDWR);
        if (all || atomic_load(&s->done)) {
            *pp = s->next;
            pthread_mutex_unlock(&a->lock);
            pthread_join(s->thread, NULL);
            session_free(s);
            ss__gauge_add(a->m_sessions, -1);
            pthread_mutex_lock(&a->lock);
            pp = &a->sessions;
            continue;
        }
        pp = &s->next;
    }
    pthread_mutex_unlock(&a->lock);
}

static size_t live_sessions(ss__agent *a) {
    size_t k = 0;
    pthread_mutex_lock(&a->lock);
    for (agent_session *s = a->sessions; s; s = s->next)
        k++;
    pthread_mutex_unlock(&a->lock);
    return k;
}

static void accept_one(ss__agent *a) {
    int fd = accept4(a->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        close(fd);
        return;
    }
    if (!peer_allowed(a, fd, &cred)) {
        ss__agent_count_reject(a, "uid");
        char msg[128];
        snprintf(msg, sizeof msg, "uid %d may not use this agent", (int)cred.uid);
        ss__agent_send_reply(fd, SS_ERR_PERMISSION, msg);
        SS_LOG_WARNF("agent", "event=peer_refused pid=%d uid=%d", (int)cred.pid, (int)cred.uid);
        close(fd);
        return;
    }
    uint32_t max = a->cfg.max_sessions ? a->cfg.max_sessions : 256;
    if (live_sessions(a) >= max) {
        ss__agent_count_reject(a, "too_many_sessions");
        ss__agent_send_reply(fd, SS_ERR_TOO_LARGE, "agent serves its maximum of trainers");
        close(fd);
        return;
    }
    agent_session *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        return;
    }
    s->agent = a;
    s->sock = fd;
    s->peer_pid = cred.pid;
    s->peer_uid = cred.uid;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_lock(&a->lock);
    s->id = ++a->next_session;
    if (pthread_create(&s->thread, NULL, session_main, s) != 0) {
        pthread_mutex_unlock(&a->lock);
        session_free(s);
        return;
    }
    s->next = a->sessions;
    a->sessions = s;
    pthread_mutex_unlock(&a->lock);
    ss__counter_add(a->m_accepted, 1);
    ss__gauge_add(a->m_sessions, 1);
}

static void *accept_main(void *arg) {
    ss__agent *a = arg;
    while (!atomic_load(&a->stopping)) {
        struct pollfd p = {.fd = a->listen_fd, .events = POLLIN};
        if (poll(&p, 1, POLL_MS) > 0)
            accept_one(a);
        reap_sessions(a, false);
    }
    return NULL;
}

/* ---- socket setup ---- */

/* The socket's directory: created 0700 (0750 and the group when one is
 * named). An existing one must be ours: a directory someone else owns
 * could hold their socket in place of ours (or let them replace it). */
static ss_status prepare_dir(const ss__agent *a, const char *path) {
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return SS_OK;
    *slash = '\0';
    bool grouped = a->group_gid != (gid_t)-1;
    if (mkdir(dir, grouped ? 0750 : 0700) == 0) {
        if (grouped && (chown(dir, (uid_t)-1, a->group_gid) != 0 || chmod(dir, 0750) != 0))
            return SS_ERR_IO;
        return SS_OK;
    }
    struct stat sb;
    if (errno != EEXIST || lstat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        SS_LOG_ERRORF("agent", "event=socket_dir_failed dir=%s why=\"%s\"", dir,
                      errno == EEXIST ? "exists and is not a directory" : strerror(errno));
        return SS_ERR_IO;
    }
    if (sb.st_uid != geteuid()) {
        SS_LOG_ERRORF("agent",
                      "event=socket_dir_refused dir=%s owner_uid=%d agent_uid=%d why=\"the "
                      "socket directory exists and belongs to another user\"",
                      dir, (int)sb.st_uid, (int)geteuid());
        return SS_ERR_PERMISSION;
    }
    if (sb.st_mode & (S_IWGRP | S_IWOTH)) {
        SS_LOG_ERRORF("agent",
                      "event=socket_dir_refused dir=%s mode=%03o why=\"group or others may "
                      "write the socket directory\"",
                      dir, (unsigned)(sb.st_mode & 0777));
        return SS_ERR_PERMISSION;
    }
    return SS_OK;
}

/* A socket file left by a dead agent is replaced; a live agent's is not. */
static ss_status clear_stale(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return errno == ENOENT ? SS_OK : SS_ERR_IO;
    if (!S_ISSOCK(sb.st_mode))
        return SS_ERR_EXISTS;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    int live = fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0;
    if (fd >= 0)
        close(fd);
    if (live)
        return SS_ERR_EXISTS;
    return unlink(path) == 0 ? SS_OK : SS_ERR_IO;
}

static ss_status bind_socket(ss__agent *a) {
    const char *path = a->socket_path;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path)
        return SS_ERR_INVALID_ARGUMENT;
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    ss_status st;
    if ((st = prepare_dir(a, path)) != SS_OK || (st = clear_stale(path)) != SS_OK)
        return st;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return SS_ERR_IO;
    bool grouped = a->group_gid != (gid_t)-1;
    /* Created with no access, opened up once the owner and mode are right. */
    mode_t old = umask(0777);
    int bound = bind(fd, (struct sockaddr *)&addr, sizeof addr);
    umask(old);
    if (bound != 0 || (grouped && chown(path, (uid_t)-1, a->group_gid) != 0) ||
        chmod(path, grouped ? 0660 : 0600) != 0 || listen(fd, 64) != 0) {
        if (bound == 0)
            unlink(path);
        close(fd);
        return SS_ERR_IO;
    }
    a->listen_fd = fd;
    return SS_OK;
}

ss_status ss__agent_create(const ss__agent_config *cfg, ss__agent **out, char *why, size_t whylen) {
    if (!cfg || !out || !cfg->socket_path || !*cfg->socket_path || !cfg->transport ||
        !cfg->metrics || (cfg->nallow && !cfg->allow_uids))
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                        "an agent needs a socket path, a transport and metrics");
    ss__agent *a = calloc(1, sizeof *a);
    if (!a)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the agent");
    a->cfg = *cfg;
    a->listen_fd = -1;
    a->self_uid = geteuid();
    a->group_gid = (gid_t)-1;
    a->start_ns = ss__now_ns();
    pthread_mutex_init(&a->lock, NULL);
    ss_status st = SS_OK;
    if (cfg->socket_group && *cfg->socket_group) {
        /* A name, or a number (a pod's groups are numbers, named in no
         * /etc/group of the image). */
        struct group *gr = getgrnam(cfg->socket_group);
        char *end;
        errno = 0;
        unsigned long gid = gr ? gr->gr_gid : strtoul(cfg->socket_group, &end, 10);
        if (!gr && (errno || *end || end == cfg->socket_group || gid >= (gid_t)-1))
            st = ss__fail(why, whylen, SS_ERR_NOT_FOUND,
                          "--socket-group %s: no such group, nor a number", cfg->socket_group);
        else
            a->group_gid = (gid_t)gid;
    }
    if (st == SS_OK && !(a->socket_path = strdup(cfg->socket_path)))
        st = SS_ERR_NO_MEMORY;
    if (st == SS_OK)
        st = ss__metrics_gauge(cfg->metrics, "shadowsync_agent_sessions",
                               "Trainer processes connected to the agent.", NULL, &a->m_sessions);
    if (st == SS_OK)
        st =
            ss__metrics_gauge(cfg->metrics, "shadowsync_agent_groups",
                              "Dense groups the agent syncs for its trainers.", NULL, &a->m_groups);
    if (st == SS_OK)
        st = ss__metrics_counter(cfg->metrics, "shadowsync_agent_connections_total",
                                 "Trainer connections accepted.", NULL, &a->m_accepted);
    if (st == SS_OK)
        st = ss__metrics_counter(cfg->metrics, "shadowsync_agent_join_failures_total",
                                 "Dense groups of its trainers the agent could not join at the "
                                 "PS shards (unreachable, or refused): /status says the last.",
                                 NULL, &a->m_join_failed);
    /* Every reason's series exists from the start, at 0, so that rate()
     * sees the first refusal. */
    static const char *const reasons[] = {"wrong_message",     "invalid",   "bad_fd", "garbage",
                                          "too_large",         "truncated", "io",     "uid",
                                          "too_many_sessions", "device"};
    for (size_t i = 0; st == SS_OK && i < sizeof reasons / sizeof *reasons; i++)
        count_reject_n(cfg->metrics, reasons[i], 0);
    if (st == SS_OK && (st = bind_socket(a)) != SS_OK)
        ss__why(why, whylen, "cannot serve the socket %s: %s", cfg->socket_path, ss_strerror(st));
    if (st == SS_OK && pthread_create(&a->accept_thread, NULL, accept_main, a) != 0) {
        unlink(a->socket_path);
        st = ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no thread for the agent's acceptor");
    }
    if (st != SS_OK) {
        if (a->listen_fd >= 0)
            close(a->listen_fd);
        pthread_mutex_destroy(&a->lock);
        free(a->socket_path);
        free(a);
        return st;
    }
    *out = a;
    return SS_OK;
}

void ss__agent_destroy(ss__agent *a) {
    if (!a)
        return;
    atomic_store(&a->stopping, true);
    pthread_join(a->accept_thread, NULL);
    close(a->listen_fd);
    unlink(a->socket_path);
    reap_sessions(a, true);
    pthread_mutex_destroy(&a->lock);
    free(a->socket_path);
    free(a);
}

uint64_t ss__agent_rounds(ss__agent *a) {
    uint64_t r = atomic_load(&a->rounds_done);
    pthread_mutex_lock(&a->lock);
    for (agent_session *s = a->sessions; s; s = s->next) {
        pthread_mutex_lock(&s->lock);
        if (s->engine)
            r += ss__engine_rounds(s->engine);
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&a->lock);
    return r;
}
