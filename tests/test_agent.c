/* shadowsync-agent as a process: every kind of bad input at its socket and
 * its HTTP endpoint gets a clear answer, is counted, and leaves the agent
 * serving; other uids are refused; /metrics passes promtool. */
#include <check.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_procs.h"
#include "check_run.h"
#include "common/clock.h"
#include "http_client.h"
#include "planted_link.h"
#include "rpc/agent/agent_client.h"
#include "rpc/agent/agent_wire.h"
#include "shadowsync/shadowsync.h"

static char dir[64], sock_path[128], ps_target[64], http[128];
static pid_t ps_pid, agent_pid;

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/ss-agent-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(sock_path, sizeof sock_path, "%s/run/agent.sock", dir);
    char log[128];
    snprintf(log, sizeof log, "%s/ps.log", dir);
    char *ps_extra[] = {"--http", "", NULL};
    ps_pid = proc_start_ps(log, ps_target, sizeof ps_target, "127.0.0.1:0", ps_extra);
    snprintf(log, sizeof log, "%s/agent.log", dir);
    agent_pid = agent_start(log, sock_path, ps_target, http, sizeof http, NULL);
}

static void teardown(void) {
    kill(agent_pid, SIGTERM);
    int st = proc_wait(agent_pid, 20);
    kill(ps_pid, SIGTERM);
    proc_wait(ps_pid, 20);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "agent did not stop cleanly (%d)", st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* ---- raw protocol ---- */

static int hello(int fd, const char *trainer, ss_status *verdict) {
    ss__pb_hello h = SHADOWSYNC__AGENT__V1__HELLO__INIT;
    h.protocol = SS_AGENT_PROTOCOL;
    h.trainer = (char *)trainer;
    ss__pb_agent_request rq = SHADOWSYNC__AGENT__V1__AGENT_REQUEST__INIT;
    rq.body_case = SHADOWSYNC__AGENT__V1__AGENT_REQUEST__BODY_HELLO;
    rq.hello = &h;
    if (ss__agent_send_request(fd, &rq, -1) != SS_OK)
        return -1;
    return ss__agent_recv_reply(fd, 10000, verdict, NULL, 0) == SS_OK ? 0 : -1;
}

static void register_request(ss__pb_agent_request *rq, ss__pb_register_group *r, const char *name,
                             size_t n) {
    *r = (ss__pb_register_group)SHADOWSYNC__AGENT__V1__REGISTER_GROUP__INIT;
    r->name = (char *)name;
    r->n = n;
    r->algo = "easgd";
    r->alpha = 0.5f;
    *rq = (ss__pb_agent_request)SHADOWSYNC__AGENT__V1__AGENT_REQUEST__INIT;
    rq->body_case = SHADOWSYNC__AGENT__V1__AGENT_REQUEST__BODY_REGISTER_GROUP;
    rq->register_group = r;
}

/* A request's reply: status and message. */
static ss_status reply_of(int fd, char *msg, size_t msglen) {
    ss_status verdict = SS_ERR_INTERNAL;
    ck_assert_int_eq(ss__agent_recv_reply(fd, 10000, &verdict, msg, msglen), SS_OK);
    return verdict;
}

/* Creates a group's memfd (into g) and registers it on fd: the agent's
 * verdict (its message into msg when not NULL), or SS_ERR_IO when the
 * memfd or the socket failed. */
static ss_status register_group_said(int fd, const char *name, size_t n, ss__shm_group *g,
                                     char *msg, size_t msglen) {
    ss__pb_agent_request rq;
    ss__pb_register_group r;
    register_request(&rq, &r, name, n);
    ss_status v = SS_ERR_IO;
    if (ss__shm_group_create(name, n, g, NULL, 0) != SS_OK ||
        ss__agent_send_request(fd, &rq, g->fd) != SS_OK ||
        ss__agent_recv_reply(fd, 10000, &v, msg, msglen) != SS_OK)
        return SS_ERR_IO;
    return v;
}

static ss_status register_group(int fd, const char *name, size_t n, ss__shm_group *g) {
    return register_group_said(fd, name, n, g, NULL, 0);
}

/* A trainer's connection to the agent at sock, welcomed. */
static int trainer_connect(const char *sock, const char *trainer) {
    int fd = unix_connect(sock);
    ck_assert_int_ge(fd, 0);
    ss_status v;
    ck_assert_int_eq(hello(fd, trainer, &v), 0);
    ck_assert_int_eq(v, SS_OK);
    return fd;
}

/* The agent still serves: a new trainer says Hello and registers a group. */
static void assert_still_serving(void) {
    int fd = trainer_connect(sock_path, "healthy");
    ss__shm_group g;
    ck_assert_int_eq(register_group(fd, "ok", 16, &g), SS_OK);
    close(fd);
    ss__shm_group_release(&g);
}

static double rejected(const char *reason) {
    char label[64];
    snprintf(label, sizeof label, "reason=\"%s\"", reason);
    double v = agent_metric(http, "shadowsync_agent_rejected_total", label);
    return v < 0 ? 0 : v;
}

START_TEST(socket_garbage) {
    double before = rejected("garbage");
    int fd = unix_connect(sock_path);
    ck_assert_int_ge(fd, 0);
    const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x13, 0x37};
    ck_assert_int_eq(ss__agent_send_frame(fd, junk, sizeof junk, -1), SS_OK);
    char msg[256];
    ck_assert_int_eq(reply_of(fd, msg, sizeof msg), SS_ERR_PARSE);
    ck_assert_ptr_nonnull(strstr(msg, "not an AgentRequest"));
    close(fd);
    ck_assert_double_eq(rejected("garbage"), before + 1);
    assert_still_serving();
}
END_TEST

START_TEST(socket_wrong_message) {
    double before = rejected("wrong_message"), fd_before = rejected("bad_fd");
    int fd = unix_connect(sock_path);
    ss__shm_group g;
    ck_assert_int_eq(ss__shm_group_create("early", 16, &g, NULL, 0), SS_OK);
    ss__pb_agent_request rq;
    ss__pb_register_group r;
    register_request(&rq, &r, "early", 16);
    char msg[256];
    /* RegisterGroup before Hello. */
    ck_assert_int_eq(ss__agent_send_request(fd, &rq, g.fd), SS_OK);
    ck_assert_int_eq(reply_of(fd, msg, sizeof msg), SS_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(msg, "expected Hello first"));
    /* Hello with a descriptor it does not take. */
    ss__pb_hello h = SHADOWSYNC__AGENT__V1__HELLO__INIT;
    h.protocol = SS_AGENT_PROTOCOL;
    h.trainer = "t";
    ss__pb_agent_request hq = SHADOWSYNC__AGENT__V1__AGENT_REQUEST__INIT;
    hq.body_case = SHADOWSYNC__AGENT__V1__AGENT_REQUEST__BODY_HELLO;
    hq.hello = &h;
    ck_assert_int_eq(ss__agent_send_request(fd, &hq, g.fd), SS_OK);
    ck_assert_int_eq(reply_of(fd, msg, sizeof msg), SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(msg, "descriptor came with a message"));
    ss_status v;
    ck_assert_int_eq(hello(fd, "t", &v), 0);
    ck_assert_int_eq(v, SS_OK);
    /* A request with no body, then a second Hello. */
    ss__pb_agent_request empty = SHADOWSYNC__AGENT__V1__AGENT_REQUEST__INIT;
    ck_assert_int_eq(ss__agent_send_request(fd, &empty, -1), SS_OK);
    ck_assert_int_eq(reply_of(fd, msg, sizeof msg), SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(msg, "empty or unknown request"));
    ck_assert_int_eq(hello(fd, "t", &v), 0);
    ck_assert_int_eq(v, SS_ERR_STATE);
    close(fd);
    ss__shm_group_release(&g);
    ck_assert_double_eq(rejected("wrong_message"), before + 3);
    ck_assert_double_eq(rejected("bad_fd"), fd_before + 1);
    assert_still_serving();
}
END_TEST

/* Sends a RegisterGroup frame with `nfds` descriptors (raw sendmsg). */
static void send_with_fds(int sock, const int *fds, int nfds) {
    ss__pb_agent_request rq;
    ss__pb_register_group r;
    register_request(&rq, &r, "g", 16);
    uint8_t buf[512];
    size_t len = shadowsync__agent__v1__agent_request__pack(&rq, buf + 4);
    buf[0] = (uint8_t)len, buf[1] = buf[2] = buf[3] = 0;
    struct iovec iov = {.iov_base = buf, .iov_len = len + 4};
    union {
        char b[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } control;
    struct msghdr m = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = control.b,
                       .msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int))};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
    ck_assert_int_eq(sendmsg(sock, &m, 0), (ssize_t)(len + 4));
}

START_TEST(socket_truncated_fd_message) {
    double before = rejected("bad_fd");
    int fd = unix_connect(sock_path);
    ss_status v;
    ck_assert_int_eq(hello(fd, "t", &v), 0);
    char msg[256];
    /* 1: RegisterGroup without its memfd. */
    ss__pb_agent_request rq;
    ss__pb_register_group r;
    register_request(&rq, &r, "g", 16);
    ck_assert_int_eq(ss__agent_send_request(fd, &rq, -1), SS_OK);
    ck_assert_int_eq(reply_of(fd, msg, sizeof msg), SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(msg, "must carry the group's memfd"));
    /* 2: three descriptors where one fits: the control message is cut. */
    ss__shm_group g;
    ck_assert_int_eq(ss__shm_group_create("g", 16, &g, NULL, 0), SS_OK);
    int three[3] = {g.fd, g.fd, g.fd};
    send_with_fds(fd, three, 3);
    ck_assert_int_eq(reply_of(fd, msg, sizeof msg), SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(msg, "truncated"));
    /* 3: a memfd that can still shrink (unsealed): a trainer could pull the
     * pages from under the agent. */
    int loose = memfd_create("loose", MFD_CLOEXEC);
    ck_assert_int_eq(ftruncate(loose, 8192), 0);
    send_with_fds(fd, &loose, 1);
    ck_assert_int_eq(reply_of(fd, msg, sizeof msg), SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(msg, "not sealed"));
    /* 4: a sealed memfd of another size than announced. */
    ss__shm_group small;
    ck_assert_int_eq(ss__shm_group_create("g", 4096, &small, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__agent_send_request(fd, &rq, small.fd), SS_OK);
    ck_assert_int_eq(reply_of(fd, msg, sizeof msg), SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(msg, "size does not match"));
    /* The same connection then registers properly. */
    ck_assert_int_eq(ss__agent_send_request(fd, &rq, g.fd), SS_OK);
    ck_assert_int_eq(reply_of(fd, msg, sizeof msg), SS_OK);
    close(fd);
    close(loose);
    ss__shm_group_release(&g);
    ss__shm_group_release(&small);
    ck_assert_double_eq(rejected("bad_fd"), before + 4);
    assert_still_serving();
}
END_TEST

START_TEST(socket_huge_and_cut_frames) {
    double huge_before = rejected("too_large"), cut_before = rejected("truncated");
    int fd = unix_connect(sock_path);
    const uint8_t huge[4] = {0xf0, 0xff, 0xff, 0x7f}; /* ~2 GiB announced */
    ck_assert_int_eq(write(fd, huge, 4), 4);
    char msg[256];
    ck_assert_int_eq(reply_of(fd, msg, sizeof msg), SS_ERR_TOO_LARGE);
    ck_assert_ptr_nonnull(strstr(msg, "over the limit"));
    uint8_t b;
    ck_assert_int_eq(read(fd, &b, 1), 0); /* the stream cannot be trusted: closed */
    close(fd);
    /* 100 bytes announced, 10 sent, then the peer leaves. */
    fd = unix_connect(sock_path);
    const uint8_t cut[14] = {100, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    ck_assert_int_eq(write(fd, cut, sizeof cut), (ssize_t)sizeof cut);
    close(fd);
    for (int i = 0; i < 100 && rejected("truncated") < cut_before + 1; i++)
        usleep(20000);
    ck_assert_double_eq(rejected("too_large"), huge_before + 1);
    ck_assert_double_eq(rejected("truncated"), cut_before + 1);
    assert_still_serving();
}
END_TEST

/* A trainer process that dies is dropped at once: its session (and its
 * rounds) end as soon as the kernel closes its socket. */
static int register_and_die(void) {
    int fd = unix_connect(sock_path);
    ss_status v;
    if (fd < 0 || hello(fd, "doomed", &v) != 0 || v != SS_OK)
        return 1;
    ss__shm_group g;
    if (register_group(fd, "doomed", 16, &g) != SS_OK)
        return 1;
    raise(SIGKILL);
    return 1;
}

START_TEST(dead_trainer_dropped_at_once) {
    pid_t pid = fork();
    if (pid == 0)
        _exit(register_and_die());
    for (int i = 0; i < 200 && agent_metric(http, "shadowsync_agent_groups", NULL) < 1; i++)
        usleep(10000);
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    uint64_t t0 = ss__now_ns();
    double groups = 1, sessions = 1;
    while ((groups > 0 || sessions > 0) && ss__now_ns() - t0 < 5000000000ull) {
        usleep(10000);
        groups = agent_metric(http, "shadowsync_agent_groups", NULL);
        sessions = agent_metric(http, "shadowsync_agent_sessions", NULL);
    }
    double dropped_s = (double)(ss__now_ns() - t0) / 1e9;
    fprintf(stderr, "dead trainer dropped after %.3f s\n", dropped_s);
    ck_assert_double_eq(groups, 0);
    ck_assert_double_eq(sessions, 0);
    ck_assert_double_lt(dropped_s, 2.0);
    /* Its series left with it (a departed trainer leaves no stale series). */
    char *metrics = NULL;
    ck_assert_int_eq(http_request(http, "/metrics", NULL, NULL, 0, &metrics), 200);
    ck_assert_ptr_null(strstr(metrics, "trainer=\"doomed\""));
    free(metrics);
}
END_TEST

/* Runs fn as uid/gid 65534 (nobody) with the supplementary groups
 * `groups` in a child; returns its exit code. */
static int as_nobody(int (*fn)(void), const gid_t *groups, size_t ngroups) {
    pid_t pid = fork();
    if (pid == 0) {
        if (setgroups(ngroups, groups) != 0 || setgid(65534) != 0 || setuid(65534) != 0)
            _exit(100);
        _exit(fn());
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 101;
}

/* 0: refused at the socket by the agent with SS_ERR_PERMISSION; 1: could
 * not even connect; 2: the agent let it in. */
static int nobody_hello(void) {
    int fd = unix_connect(sock_path);
    if (fd < 0)
        return 1;
    ss_status v = SS_OK;
    ss__agent_recv_reply(fd, 5000, &v, NULL, 0); /* the refusal comes unasked */
    return v == SS_ERR_PERMISSION ? 0 : 2;
}

START_TEST(other_uid_refused) {
    /* CI runs as root: this test must run there, so it fails elsewhere. */
    ck_assert_msg(geteuid() == 0, "other_uid_refused needs root to act as another uid");
    /* The socket is 0600 in a 0700 directory: another uid cannot connect. */
    struct stat sb;
    ck_assert_int_eq(stat(sock_path, &sb), 0);
    ck_assert_int_eq(sb.st_mode & 0777, 0600);
    ck_assert_int_eq(as_nobody(nobody_hello, NULL, 0), 1);
    /* Opened up by mistake: the agent's SO_PEERCRED check still says no. */
    char run_dir[160];
    snprintf(run_dir, sizeof run_dir, "%s/run", dir);
    ck_assert_int_eq(chmod(dir, 0755), 0);
    ck_assert_int_eq(chmod(run_dir, 0755), 0);
    ck_assert_int_eq(chmod(sock_path, 0666), 0);
    double before = rejected("uid");
    ck_assert_int_eq(as_nobody(nobody_hello, NULL, 0), 0);
    ck_assert_double_eq(rejected("uid"), before + 1);
    assert_still_serving();
}
END_TEST

/* As nobody, a trainer through the agent whose socket is 0600 root's: 0
 * when its finish says permission denied, naming the socket's mode and
 * owner and the setting that lets it in (it trains alone meanwhile). */
static int nobody_trainer_is_told(void) {
    ss_trainer_config c;
    ss_trainer_config_init(&c);
    c.mode = SS_SYNC_BACKGROUND;
    c.agent = sock_path;
    c.timeout_ms = 500;
    ss_trainer *t;
    ss_dense *g;
    if (ss_trainer_open(&c, &t) != SS_OK || ss_trainer_add_dense(t, "w", 4, NULL, &g) != SS_OK)
        return 3;
    ss_status st = ss_trainer_finish(t);
    char want[512];
    snprintf(want, sizeof want,
             "final rounds through the agent: permission denied on %s: it is 0600 uid 0 gid 0, "
             "this process uid 65534 gid 65534; the agent's --socket-group "
             "(SHADOWSYNC_SOCKET_GROUP) lets a group's members in",
             sock_path);
    int rc = st == SS_ERR_PERMISSION && !strcmp(ss_last_error(), want) ? 0 : 4;
    if (rc)
        fprintf(stderr, "finish said %s: %s\n", ss_status_name(st), ss_last_error());
    ss_trainer_close(t);
    return rc;
}

START_TEST(trainer_denied_at_the_socket_is_told_why) {
    ck_assert_msg(geteuid() == 0, "this test needs root to act as another uid");
    char run_dir[160];
    snprintf(run_dir, sizeof run_dir, "%s/run", dir);
    ck_assert_int_eq(chmod(dir, 0755), 0); /* the way in open, the socket not */
    ck_assert_int_eq(chmod(run_dir, 0755), 0);
    ck_assert_int_eq(as_nobody(nobody_trainer_is_told, NULL, 0), 0);
}
END_TEST

/* As nobody with the supplementary group `users`: 0 when the agent lets
 * it register, 1 when it cannot connect, 2 when the agent refuses it. */
static char group_sock[160];
static int nobody_in_users_hello(void) {
    int fd = unix_connect(group_sock);
    if (fd < 0)
        return 1;
    ss_status v = SS_ERR_INTERNAL;
    if (hello(fd, "grouped", &v) != 0 || v != SS_OK)
        return 2;
    return 0;
}

/* --socket-group: the directory and socket open to the group, and a
 * member by a supplementary group (not its primary gid) gets in. */
/* The group by name, or by number (a pod's groups are numbers). */
static void group_member_allowed_as(const char *group) {
    char log[160], http2[128], run2[100];
    snprintf(run2, sizeof run2, "%s/grouped-%s", dir, group);
    snprintf(group_sock, sizeof group_sock, "%s/agent.sock", run2);
    snprintf(log, sizeof log, "%s/agent-group-%s.log", dir, group);
    ck_assert_int_eq(chmod(dir, 0755), 0); /* the test's own directory */
    char *extra[] = {"--socket-group", (char *)group, NULL};
    pid_t a2 = agent_start(log, group_sock, ps_target, http2, sizeof http2, extra);
    struct stat sb;
    ck_assert_int_eq(stat(run2, &sb), 0);
    ck_assert_int_eq(sb.st_mode & 0777, 0750);
    ck_assert_int_eq(sb.st_gid, 100);
    ck_assert_int_eq(stat(group_sock, &sb), 0);
    ck_assert_int_eq(sb.st_mode & 0777, 0660);
    const gid_t users = 100;
    ck_assert_int_eq(as_nobody(nobody_in_users_hello, &users, 1), 0);
    snprintf(group_sock, sizeof group_sock, "%s", sock_path); /* the fixture's agent: no group */
    ck_assert_int_ne(as_nobody(nobody_in_users_hello, &users, 1), 0);
    kill(a2, SIGTERM);
    int st = proc_wait(a2, 20);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

START_TEST(socket_group_member_allowed) {
    ck_assert_msg(geteuid() == 0 && getgrnam("users"),
                  "socket_group_member_allowed needs root and the group users");
    group_member_allowed_as("users");
    group_member_allowed_as("100");
}
END_TEST

/* Per trainer, groups (memfds) and their bytes are bounded by flags: the
 * registration past either limit is refused with a reason naming the
 * flag, counted under "too_large", and the trainer's earlier groups and
 * other trainers go on. */
/* --chunk-floats: the agent cuts a trainer's group into chunks of that
 * size at the PS (its /status lists them), and refuses a bad value. */
START_TEST(agent_cuts_chunks_as_told) {
    char log[160], http2[128], sock2[160], ps2[64], ps_http[100], addr[64];
    snprintf(log, sizeof log, "%s/ps-chunks.log", dir);
    char *ps_extra[] = {"--http", "127.0.0.1:0", NULL};
    pid_t p2 = proc_start_ps(log, ps2, sizeof ps2, "127.0.0.1:0", ps_extra);
    proc_address_after(log, "http on", addr, sizeof addr);
    snprintf(ps_http, sizeof ps_http, "http://%s", addr);
    snprintf(sock2, sizeof sock2, "%s/chunks/agent.sock", dir);
    snprintf(log, sizeof log, "%s/agent-chunks.log", dir);
    char *extra[] = {"--chunk-floats", "100", NULL};
    pid_t a2 = agent_start(log, sock2, ps2, http2, sizeof http2, extra);
    int fd = trainer_connect(sock2, "chunky");
    ss__shm_group g;
    ck_assert_int_eq(register_group(fd, "cut", 300, &g), SS_OK);
    char *text = NULL;
    bool cut = false;
    for (int i = 0; i < 1000 && !cut; i++) {
        free(text);
        text = NULL;
        http_request(ps_http, "/status", NULL, NULL, 0, &text);
        cut = text && strstr(text, "\"cut[0:100)\"") && strstr(text, "\"cut[200:300)\"");
        if (!cut)
            usleep(10000);
    }
    ck_assert_msg(cut, "the PS holds no chunks of 100 floats of group cut: %s", text ? text : "");
    ck_assert_ptr_null(strstr(text, "\"cut[0:300)\""));
    free(text);
    close(fd);
    ss__shm_group_release(&g);
    kill(a2, SIGTERM);
    int st = proc_wait(a2, 20);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    kill(p2, SIGTERM);
    proc_wait(p2, 20);
    /* a bad value is refused at the start, naming the flag */
    char out[4096];
    snprintf(log, sizeof log, "%s/agent-bad-chunks.log", dir);
    char *argv[] = {SHADOWSYNC_AGENT, "--ps", ps2, "--chunk-floats", "-1", NULL};
    pid_t bad = proc_spawn(argv, log);
    st = proc_wait(bad, 20);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    char *said = proc_read(log);
    snprintf(out, sizeof out, "%s", said ? said : "");
    free(said);
    ck_assert_msg(strstr(out, "--chunk-floats"), "agent said: %s", out);
}
END_TEST

START_TEST(trainer_groups_and_bytes_are_bounded) {
    char log[160], http2[128], sock2[160];
    snprintf(sock2, sizeof sock2, "%s/limited/agent.sock", dir);
    snprintf(log, sizeof log, "%s/agent-limited.log", dir);
    char *extra[] = {"--max-trainer-groups", "3", "--max-trainer-mb", "1", NULL};
    pid_t a2 = agent_start(log, sock2, ps_target, http2, sizeof http2, extra);
    double before = agent_metric(http2, "shadowsync_agent_rejected_total", "reason=\"too_large\"");
    ck_assert_double_eq(before, 0); /* exists from the start */
    int fd = unix_connect(sock2);
    ck_assert_int_ge(fd, 0);
    ss_status v;
    ck_assert_int_eq(hello(fd, "bounded", &v), 0);
    ck_assert_int_eq(v, SS_OK);
    ss__shm_group g[5];
    char msg[256] = "";
    /* 1 MiB = 262144 floats: 200000 fit, 62144 more fit, one more does not */
    ck_assert_int_eq(register_group(fd, "big", 200000, &g[0]), SS_OK);
    ck_assert_int_eq(register_group(fd, "rest", 62144, &g[1]), SS_OK);
    ss__pb_agent_request rq;
    ss__pb_register_group r;
    register_request(&rq, &r, "over", 1);
    ck_assert_int_eq(ss__shm_group_create("over", 1, &g[2], NULL, 0), SS_OK);
    ck_assert_int_eq(ss__agent_send_request(fd, &rq, g[2].fd), SS_OK);
    ck_assert_int_eq(reply_of(fd, msg, sizeof msg), SS_ERR_TOO_LARGE);
    ck_assert_ptr_nonnull(strstr(msg, "--max-trainer-mb"));
    /* a second trainer: 3 groups fit, a fourth does not */
    int fd2 = unix_connect(sock2);
    ck_assert_int_ge(fd2, 0);
    ck_assert_int_eq(hello(fd2, "many", &v), 0);
    ss__shm_group h[4];
    const char *names[] = {"a", "b", "c", "d"};
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(register_group(fd2, names[i], 8, &h[i]), SS_OK);
    register_request(&rq, &r, "d", 8);
    ck_assert_int_eq(ss__shm_group_create("d", 8, &h[3], NULL, 0), SS_OK);
    ck_assert_int_eq(ss__agent_send_request(fd2, &rq, h[3].fd), SS_OK);
    ck_assert_int_eq(reply_of(fd2, msg, sizeof msg), SS_ERR_TOO_LARGE);
    ck_assert_ptr_nonnull(strstr(msg, "--max-trainer-groups"));
    ck_assert_double_eq(
        agent_metric(http2, "shadowsync_agent_rejected_total", "reason=\"too_large\""), 2);
    close(fd);
    close(fd2);
    for (int i = 0; i < 3; i++)
        ss__shm_group_release(&g[i]);
    for (int i = 0; i < 4; i++)
        ss__shm_group_release(&h[i]);
    kill(a2, SIGTERM);
    int st = proc_wait(a2, 20);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
END_TEST

START_TEST(http_bad_requests) {
    char *body = NULL;
    ck_assert_int_eq(http_request(http, "/healthz", NULL, NULL, 0, &body), 200);
    ck_assert_str_eq(body, "ok\n");
    free(body);
    ck_assert_int_eq(http_request(http, "/nope", NULL, NULL, 0, &body), 404);
    ck_assert_ptr_nonnull(strstr(body, "unknown path /nope"));
    free(body);
    ck_assert_int_eq(http_request(http, "/metrics", "DELETE", NULL, 0, &body), 405);
    free(body);
    /* A 1 MiB body: refused from its Content-Length, nothing buffered. */
    size_t big = 1 << 20;
    char *payload = malloc(big);
    memset(payload, 'x', big);
    ck_assert_int_eq(http_request(http, "/checkpoint", "POST", payload, big, &body), 413);
    ck_assert_ptr_nonnull(strstr(body, "over the limit"));
    free(body);
    free(payload);
    /* A 64 KiB URL: over the connection's memory, libmicrohttpd says 414. */
    char *path = malloc(65536 + 2);
    path[0] = '/';
    memset(path + 1, 'a', 65536);
    path[65537] = '\0';
    long code = http_request(http, path, NULL, NULL, 0, NULL);
    ck_assert_msg(code == 414 || code == 431, "huge URL answered %ld", code);
    free(path);
    ck_assert_int_eq(http_request(http, "/healthz", NULL, NULL, 0, NULL), 200);
    char *metrics = NULL;
    ck_assert_int_eq(http_request(http, "/metrics", NULL, NULL, 0, &metrics), 200);
    ck_assert_double_eq(metric_sum(metrics, "shadowsync_http_rejected_total", "not_found"), 1);
    ck_assert_double_eq(metric_sum(metrics, "shadowsync_http_rejected_total", "method"), 1);
    ck_assert_double_eq(metric_sum(metrics, "shadowsync_http_rejected_total", "too_large"), 1);
    free(metrics);
    /* Checkpoint without --checkpoint-dir: a clear refusal. */
    ck_assert_int_eq(http_request(http, "/checkpoint", "POST", "", 0, &body), 409);
    ck_assert_ptr_nonnull(strstr(body, "without --checkpoint-dir"));
    free(body);
}
END_TEST

/* /metrics of the agent (with a trainer's series in it) and of the PS
 * pass promtool's linter. */
START_TEST(metrics_pass_promtool) {
    if (system("command -v promtool >/dev/null") != 0) {
        ck_abort_msg("promtool not installed (Debian package prometheus; deploy/install-deps.sh)");
    }
    int fd = unix_connect(sock_path);
    ss_status v;
    ck_assert_int_eq(hello(fd, "lint", &v), 0);
    ss__shm_group g;
    ck_assert_int_eq(register_group(fd, "lint", 16, &g), SS_OK);
    http_request(http, "/nope", NULL, NULL, 0, NULL); /* a labelled rejection series too */
    char *metrics = NULL;
    ck_assert_int_eq(http_request(http, "/metrics", NULL, NULL, 0, &metrics), 200);
    ck_assert_ptr_nonnull(strstr(metrics, "# TYPE shadowsync_sync_rounds_total counter"));
    ck_assert_ptr_nonnull(strstr(metrics, "# HELP shadowsync_sync_gap_iterations"));
    /* Refusal reasons exist before the first refusal, at 0. */
    ck_assert_ptr_nonnull(strstr(metrics, "shadowsync_agent_rejected_total{reason=\"garbage\"} 0"));
    ck_assert_ptr_nonnull(
        strstr(metrics, "shadowsync_agent_rejected_total{reason=\"too_many_sessions\"} 0"));
    char path[160], cmd[400];
    snprintf(path, sizeof path, "%s/agent.prom", dir);
    FILE *f = fopen(path, "w");
    fputs(metrics, f);
    fclose(f);
    free(metrics);
    snprintf(cmd, sizeof cmd, "promtool check metrics < %s", path);
    ck_assert_msg(system(cmd) == 0, "promtool rejected the agent's /metrics");
    close(fd);
    ss__shm_group_release(&g);
}
END_TEST

/* A socket directory that exists and belongs to another user could hold
 * that user's socket in place of the agent's: the agent refuses to start
 * there and says why. */
START_TEST(foreign_socket_dir_refused) {
    ck_assert_msg(geteuid() == 0, "foreign_socket_dir_refused needs root to chown");
    char foreign[160], sock[200], log[160];
    snprintf(foreign, sizeof foreign, "%s/foreign", dir);
    snprintf(sock, sizeof sock, "%s/agent.sock", foreign);
    snprintf(log, sizeof log, "%s/agent-foreign.log", dir);
    ck_assert_int_eq(mkdir(foreign, 0700), 0);
    ck_assert_int_eq(chown(foreign, 65534, 65534), 0);
    char *argv[] = {SHADOWSYNC_AGENT, "--socket", sock, "--ps", ps_target, "--http", "", NULL};
    int st = proc_wait(proc_spawn(argv, log), 20);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    char *out = proc_read(log);
    ck_assert_ptr_nonnull(strstr(out, "belongs to another user"));
    free(out);
    /* Writable by group or others: refused too. */
    ck_assert_int_eq(chown(foreign, 0, 0), 0);
    ck_assert_int_eq(chmod(foreign, 0777), 0);
    st = proc_wait(proc_spawn(argv, log), 20);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    out = proc_read(log);
    ck_assert_ptr_nonnull(strstr(out, "group or others may write"));
    free(out);
    assert_still_serving();
}
END_TEST

/* An agent routed by a stale shard map: the PS (epoch 2) refuses its join
 * of a trainer's group, and the trainer is told both epochs. */
START_TEST(stale_shard_map_is_said_to_the_trainer) {
    char psmap[200], amap[200], log[200], pslog[200], target[64], sock[200], addr[64];
    snprintf(psmap, sizeof psmap, "%s/ps.map", dir);
    snprintf(amap, sizeof amap, "%s/agent.map", dir);
    snprintf(pslog, sizeof pslog, "%s/ps-map.log", dir);
    snprintf(log, sizeof log, "%s/agent-map.log", dir);
    snprintf(sock, sizeof sock, "%s/run3/agent.sock", dir);
    FILE *f = fopen(psmap, "w");
    fprintf(f, "epoch 2\nps 127.0.0.1:1\n");
    fclose(f);
    char *ps_args[] = {"--http", "", "--shard-map", psmap, NULL};
    pid_t ps = proc_start_ps(pslog, target, sizeof target, "127.0.0.1:0", ps_args);
    f = fopen(amap, "w");
    fprintf(f, "epoch 1\nps %s\n", target);
    fclose(f);
    char *argv[] = {SHADOWSYNC_AGENT, "--socket", sock, "--shard-map", amap, "--http", "", NULL};
    pid_t pid = proc_spawn(argv, log);
    proc_address_after(log, "listening on", addr, sizeof addr);
    int fd = trainer_connect(sock, "alone");
    ss__shm_group g;
    char msg[512];
    ck_assert_int_eq(register_group_said(fd, "w", 16, &g, msg, sizeof msg), SS_ERR_STATE);
    ck_assert_msg(strstr(msg, "was routed by shard map epoch 1; this server serves epoch 2"),
                  "the trainer was told: %s", msg);
    close(fd);
    ss__shm_group_release(&g);
    kill(pid, SIGTERM);
    proc_wait(pid, 20);
    kill(ps, SIGTERM);
    proc_wait(ps, 20);
}
END_TEST

/* An agent whose PS is not there logs the failed join with the PS's
 * address, the trainer is told the same, /status shows it and
 * shadowsync_agent_join_failures_total counts it. */
START_TEST(join_failure_names_the_ps) {
    char sock[200], log[160], addr[64], web[80];
    snprintf(sock, sizeof sock, "%s/run2/agent.sock", dir);
    snprintf(log, sizeof log, "%s/agent-nops.log", dir);
    char *argv[] = {SHADOWSYNC_AGENT, "--socket",         sock,  "--ps", "127.0.0.1:1", "--http",
                    "127.0.0.1:0",    "--rpc-timeout-ms", "500", NULL};
    pid_t pid = proc_spawn(argv, log);
    proc_address_after(log, "listening on", addr, sizeof addr);
    proc_address_after(log, "http on", web, sizeof web);
    int fd = trainer_connect(sock, "alone");
    ss__shm_group g;
    char msg[512] = "";
    ck_assert_int_ne(register_group_said(fd, "w", 16, &g, msg, sizeof msg), SS_OK);
    ck_assert_str_eq(msg, "cannot join group w at the parameter servers: cannot reach the PS at "
                          "127.0.0.1:1 (connection refused)");
    char base[100], *status = NULL, *metrics = NULL;
    snprintf(base, sizeof base, "http://%s", web);
    ck_assert_int_eq(http_request(base, "/status", NULL, NULL, 0, &status), 200);
    ck_assert_msg(strstr(status, "\"message\": \"trainer alone: cannot join group w at the "
                                 "parameter servers: cannot reach the PS at 127.0.0.1:1 "
                                 "(connection refused)\""),
                  "/status: %s", status);
    ck_assert_int_eq(http_request(base, "/metrics", NULL, NULL, 0, &metrics), 200);
    ck_assert_double_eq(metric_sum(metrics, "shadowsync_agent_join_failures_total", NULL), 1);
    free(status);
    free(metrics);
    close(fd);
    ss__shm_group_release(&g);
    kill(pid, SIGTERM);
    proc_wait(pid, 20);
    char *out = proc_read(log);
    ck_assert_msg(strstr(out, "event=group_join_failed") && strstr(out, "127.0.0.1:1"),
                  "the agent's log: %s", out);
    free(out);
}
END_TEST

/* A trainer hands its replicas only to an agent of the expected uid
 * (SO_PEERCRED): told to expect another uid, it never registers with this
 * one; told nothing, it does. */
START_TEST(trainer_checks_the_agent_uid) {
    ss__agent_group_spec g;
    ss__shm_group shm;
    ck_assert_int_eq(ss__shm_group_create("checked", 8, &shm, NULL, 0), SS_OK);
    g = (ss__agent_group_spec){
        .name = "checked", .n = 8, .fd = shm.fd, .algo = "easgd", .alpha = 0.1f};
    setenv("SHADOWSYNC_AGENT_UID", "4242", 1);
    ss__agent_client *c;
    ck_assert_int_eq(ss__agent_client_create(sock_path, "wary", 2000, &c, NULL, 0), SS_OK);
    unsetenv("SHADOWSYNC_AGENT_UID");
    ck_assert_int_eq(ss__agent_client_add_group(c, &g), SS_OK); /* queued */
    ck_assert_int_eq(ss__agent_client_finish(c, 0, 0, 500, NULL, 0), SS_ERR_IO);
    ck_assert_uint_eq(ss__agent_client_sessions(c), 0);
    ss__agent_client_destroy(c);
    setenv("SHADOWSYNC_AGENT_UID", "not-a-uid", 1);
    ck_assert_int_eq(ss__agent_client_create(sock_path, "wary", 2000, &c, NULL, 0),
                     SS_ERR_INVALID_ARGUMENT);
    unsetenv("SHADOWSYNC_AGENT_UID");
    ck_assert_int_eq(ss__agent_client_create(sock_path, "trusting", 2000, &c, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__agent_client_add_group(c, &g), SS_OK);
    ck_assert_int_eq(ss__agent_client_finish(c, 0, 0, 5000, NULL, 0), SS_OK);
    ck_assert_uint_eq(ss__agent_client_sessions(c), 1);
    ss__agent_client_destroy(c);
    ss__shm_group_release(&shm);
}
END_TEST

typedef struct slow_reg {
    ss__shm_group g;
    ss_status st;
    _Atomic bool done;
} slow_reg;

static void *register_slowly(void *p) {
    slow_reg *r = p;
    int fd = unix_connect(sock_path);
    ss_status v;
    r->st = fd >= 0 && hello(fd, "slow", &v) == 0 && v == SS_OK
                ? register_group(fd, "slowgroup", 32, &r->g)
                : SS_ERR_IO;
    atomic_store(&r->done, true);
    return (void *)(intptr_t)fd;
}

/* A registration waits on a PS that does not answer (stopped): meanwhile
 * /status and /healthz answer and another trainer connects, before that
 * registration has finished; once the PS runs again it completes. */
START_TEST(slow_registration_does_not_stall_the_agent) {
    proc_freeze(ps_pid);
    slow_reg r = {.st = SS_ERR_INTERNAL};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, register_slowly, &r), 0);
    ss__sleep_ns(300000000ull); /* it reaches the Join (the PS cannot answer) */
    char *body = NULL;
    ck_assert_int_eq(http_request(http, "/status", NULL, NULL, 0, &body), 200);
    free(body);
    ck_assert_int_eq(http_request(http, "/healthz", NULL, NULL, 0, NULL), 200);
    int fd = unix_connect(sock_path);
    ck_assert_int_ge(fd, 0);
    ss_status v;
    ck_assert_int_eq(hello(fd, "meanwhile", &v), 0);
    ck_assert_int_eq(v, SS_OK);
    ck_assert_msg(!atomic_load(&r.done), "the registration ended while the PS was stopped");
    kill(ps_pid, SIGCONT);
    void *ret;
    pthread_join(t, &ret);
    ck_assert_int_eq(r.st, SS_OK);
    close(fd);
    close((int)(intptr_t)ret);
    ss__shm_group_release(&r.g);
}
END_TEST

static int ctl(char *out_path, char **out, char *const args[]);

/* Off loopback a PS needs a token (or mutual TLS) and says so; with one,
 * POST /checkpoint needs it too: 401 without, done with it (shadowsync-ctl
 * sends the token of SHADOWSYNC_AUTH_TOKEN_FILE). */
START_TEST(ps_token_off_loopback_and_for_posts) {
    char log[160], tok[160], ck[160], target[64], web[100], url[120];
    snprintf(log, sizeof log, "%s/ps-auth.log", dir);
    snprintf(tok, sizeof tok, "%s/token", dir);
    snprintf(ck, sizeof ck, "%s/ps-auth-ck", dir);
    char *open_argv[] = {SHADOWSYNC_PS, "--listen", "0.0.0.0:0", "--http", "", NULL};
    int st = proc_wait(proc_spawn(open_argv, log), 20);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    char *out = proc_read(log);
    ck_assert_ptr_nonnull(strstr(out, "not loopback"));
    free(out);
    FILE *f = fopen(tok, "w");
    fputs("a-long-enough-shared-token\n", f);
    fclose(f);
    char *extra[] = {"--http", "127.0.0.1:0", "--auth-token-file", tok, "--checkpoint-dir",
                     ck,       NULL};
    pid_t ps = proc_start_ps(log, target, sizeof target, "127.0.0.1:0", extra);
    proc_address_after(log, "http on", web, sizeof web);
    snprintf(url, sizeof url, "http://%s", web);
    ck_assert_int_eq(http_request(url, "/checkpoint", "POST", "", 0, NULL), 401);
    ck_assert_int_eq(http_request(url, "/healthz", NULL, NULL, 0, NULL), 200); /* reads: open */
    char ctl_log[160];
    snprintf(ctl_log, sizeof ctl_log, "%s/ctl-auth.log", dir);
    ck_assert_int_eq(ctl(ctl_log, &out, (char *[]){"checkpoint", "--url", url, NULL}), 1);
    free(out);
    setenv("SHADOWSYNC_AUTH_TOKEN_FILE", tok, 1);
    ck_assert_int_eq(ctl(ctl_log, &out, (char *[]){"checkpoint", "--url", url, NULL}), 0);
    unsetenv("SHADOWSYNC_AUTH_TOKEN_FILE");
    ck_assert_ptr_nonnull(strstr(out, "dense groups written"));
    free(out);
    kill(ps, SIGTERM);
    st = proc_wait(ps, 20);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
END_TEST

/* An agent without a token serves POST /checkpoint to nobody unless told
 * --insecure-loopback (any local user, another uid's too, could otherwise
 * make it write). */
START_TEST(agent_posts_need_a_token_by_default) {
    char log[160], sock[160], ck[160], http[128], *body = NULL;
    snprintf(log, sizeof log, "%s/agent-notoken.log", dir);
    snprintf(sock, sizeof sock, "%s/notoken.sock", dir);
    snprintf(ck, sizeof ck, "%s/notoken-ck", dir);
    unsetenv("SHADOWSYNC_INSECURE_LOOPBACK");
    pid_t a = agent_start(log, sock, "127.0.0.1:1", http, sizeof http,
                          (char *[]){"--checkpoint-dir", ck, NULL});
    ck_assert_int_eq(http_request(http, "/checkpoint", "POST", "", 0, &body), 401);
    ck_assert_msg(body && strstr(body, "--auth-token-file") && strstr(body, "--insecure-loopback"),
                  "%s", body ? body : "");
    free(body);
    kill(a, SIGTERM);
    ck_assert_int_eq(proc_wait(a, 20), 0);
    /* Told so, it serves it (409: nothing to checkpoint yet, not 401). */
    a = agent_start(log, sock, "127.0.0.1:1", http, sizeof http,
                    (char *[]){"--checkpoint-dir", ck, "--insecure-loopback", NULL});
    ck_assert_int_ne(http_request(http, "/checkpoint", "POST", "", 0, NULL), 401);
    kill(a, SIGTERM);
    ck_assert_int_eq(proc_wait(a, 20), 0);
}
END_TEST

/* Runs shadowsync-ctl with args; returns its exit code, output in *out. */
static int ctl(char *out_path, char **out, char *const args[]) {
    char *argv[16] = {SHADOWSYNC_CTL};
    int n = 1;
    for (int i = 0; args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    int st = proc_wait(proc_spawn(argv, out_path), 30);
    *out = proc_read(out_path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(ctl_commands) {
    char log[160], *out;
    snprintf(log, sizeof log, "%s/ctl.log", dir);
    /* A group with known values, synced by a second agent that may
     * checkpoint. */
    char sock2[160], log2[160], ckdir[160], http2[128], file[200];
    /* A socket directory with a quote and a backslash: /status must stay
     * one JSON document (ctl status parses it and fails when it is not). */
    snprintf(sock2, sizeof sock2, "%s/run\"2\\/agent.sock", dir);
    snprintf(log2, sizeof log2, "%s/agent2.log", dir);
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", dir);
    snprintf(file, sizeof file, "%s/watched.f32", ckdir);
    char *extra[] = {"--checkpoint-dir", ckdir, NULL};
    pid_t a2 = agent_start(log2, sock2, ps_target, http2, sizeof http2, extra);
    int fd = unix_connect(sock2);
    ss_status v;
    ck_assert_int_eq(hello(fd, "viewer", &v), 0);
    ss__shm_group g;
    ck_assert_int_eq(register_group(fd, "watched", 16, &g), SS_OK);
    for (int i = 0; i < 16; i++) /* the agent runs no round before 4 steps */
        g.data[i] = (float)i;

    ck_assert_int_eq(ctl(log, &out, (char *[]){"status", "--url", http2, NULL}), 0);
    ck_assert_ptr_nonnull(strstr(out, "\"role\": \"agent\""));
    ck_assert_ptr_nonnull(strstr(out, "\"trainer\": \"viewer\""));
    ck_assert_ptr_nonnull(strstr(out, "run\\\"2\\\\/agent.sock"));
    free(out);
    ck_assert_int_eq(ctl(log, &out, (char *[]){"metrics", "--url", http2, NULL}), 0);
    ck_assert_ptr_nonnull(strstr(out, "shadowsync_agent_sessions 1"));
    free(out);
    ck_assert_int_eq(
        ctl(log, &out,
            (char *[]){"watch", "--url", http2, "--count", "2", "--interval-ms", "200", NULL}),
        0);
    ck_assert_ptr_nonnull(strstr(out, "rounds/s"));
    ck_assert_ptr_nonnull(strstr(out, "watched"));
    free(out);
    /* A link planted at the old temporary name is not written through. */
    char planted[220], target[200];
    snprintf(planted, sizeof planted, "%s.tmp", file);
    snprintf(target, sizeof target, "%s/precious", dir);
    plant_link(planted, target);
    ck_assert_int_eq(ctl(log, &out, (char *[]){"checkpoint", "--url", http2, NULL}), 0);
    ck_assert_ptr_nonnull(strstr(out, "1 group replicas written"));
    free(out);
    assert_not_written_through(target);
    FILE *f = fopen(file, "rb");
    ck_assert_ptr_nonnull(f);
    float back[16];
    ck_assert_uint_eq(fread(back, sizeof(float), 16, f), 16);
    fclose(f);
    /* The replica as the trainer wrote it: it never stepped, so no round
     * (they wait for --min-round-gap steps) moved it. */
    for (int i = 0; i < 16; i++)
        ck_assert_float_eq_tol(back[i], (float)i, 1e-4);
    /* Errors: no checkpoint dir, nobody listening, an unknown command. */
    ck_assert_int_eq(ctl(log, &out, (char *[]){"checkpoint", "--url", http, NULL}), 1);
    ck_assert_ptr_nonnull(strstr(out, "without --checkpoint-dir"));
    free(out);
    ck_assert_int_eq(ctl(log, &out, (char *[]){"status", "--url", "http://127.0.0.1:1", NULL}), 1);
    ck_assert_ptr_nonnull(strstr(out, "127.0.0.1:1"));
    free(out);
    ck_assert_int_eq(ctl(log, &out, (char *[]){"bogus", NULL}), 2);
    ck_assert_ptr_nonnull(strstr(out, "unknown command bogus"));
    free(out);
    close(fd);
    ss__shm_group_release(&g);
    kill(a2, SIGTERM);
    int st = proc_wait(a2, 20);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
END_TEST

/* A trainer whose agent was SIGKILLed registers again with the next agent
 * under the same member key: the PS replaces the member the dead agent
 * left instead of keeping it until --member-timeout-ms (a minute here),
 * which MA rounds would wait for at each deadline. With another key it
 * is a second member. */
static double ps_members_after(pid_t agent, const char *ps_http, int fd_to_close) {
    close(fd_to_close);
    kill(agent, SIGKILL);
    waitpid(agent, NULL, 0);
    return agent_metric(ps_http, "shadowsync_ps_members", NULL);
}

START_TEST(restarted_agent_replaces_its_trainers_members) {
    char log[160], target[64], ps_http[128], sock2[160], http2[128];
    snprintf(log, sizeof log, "%s/ps-keys.log", dir);
    char *ps_extra[] = {"--http", "127.0.0.1:0", "--member-timeout-ms", "60000", NULL};
    pid_t ps = proc_start_ps(log, target, sizeof target, "127.0.0.1:0", ps_extra);
    char addr[100];
    proc_address_after(log, "http on", addr, sizeof addr);
    snprintf(ps_http, sizeof ps_http, "http://%s", addr);
    snprintf(sock2, sizeof sock2, "%s/run2/agent.sock", dir);
    const uint64_t keys[] = {0x5eed5eed5eedull, 0x5eed5eed5eedull, 0xbadbadull};
    const double members_after[] = {1, 1, 2}; /* before each registration */
    for (int i = 0; i < 3; i++) {
        snprintf(log, sizeof log, "%s/agent-keys%d.log", dir, i);
        pid_t a = agent_start(log, sock2, target, http2, sizeof http2, NULL);
        int fd = trainer_connect(sock2, "keyed");
        ss__pb_agent_request rq;
        ss__pb_register_group r;
        register_request(&rq, &r, "kept", 16);
        r.member_key = keys[i];
        ss__shm_group g;
        ck_assert_int_eq(ss__shm_group_create("kept", 16, &g, NULL, 0), SS_OK);
        ck_assert_int_eq(ss__agent_send_request(fd, &rq, g.fd), SS_OK);
        ck_assert_int_eq(reply_of(fd, NULL, 0), SS_OK);
        const double members = ps_members_after(a, ps_http, fd);
        ss__shm_group_release(&g);
        ck_assert_msg(members == members_after[i], "registration %d: %g members at the PS, not %g",
                      i, members, members_after[i]);
    }
    kill(ps, SIGTERM);
    proc_wait(ps, 20);
}
END_TEST

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return ss__check_tests(
        "agent", 120, setup, teardown, socket_garbage, socket_wrong_message,
        join_failure_names_the_ps, stale_shard_map_is_said_to_the_trainer,
        socket_truncated_fd_message, socket_huge_and_cut_frames, other_uid_refused,
        dead_trainer_dropped_at_once, socket_group_member_allowed, http_bad_requests,
        metrics_pass_promtool, ctl_commands, agent_posts_need_a_token_by_default,
        foreign_socket_dir_refused, trainer_checks_the_agent_uid,
        slow_registration_does_not_stall_the_agent, ps_token_off_loopback_and_for_posts,
        trainer_groups_and_bytes_are_bounded, agent_cuts_chunks_as_told,
        trainer_denied_at_the_socket_is_told_why, restarted_agent_replaces_its_trainers_members);
}
