/* Shared group memory and socket frames between hooks and agent. */
#include "rpc/agent/agent_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/strbuf.h"

/* Once a frame has started, the rest must follow within this long: a peer
 * that stops mid-frame is treated as having cut it short. */
#define FRAME_REST_MS 5000

static size_t map_bytes_for(size_t n) {
    return SS_SHM_HEADER_BYTES + ((n * sizeof(float) + 4095) & ~(size_t)4095);
}

static ss_status map_fd(int fd, size_t n, ss__shm_group *out) {
    size_t bytes = map_bytes_for(n);
    void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        return errno == ENOMEM ? SS_ERR_NO_MEMORY : SS_ERR_IO;
    out->base = base;
    out->map_bytes = bytes;
    out->hdr = base;
    out->data = (float *)((char *)base + SS_SHM_HEADER_BYTES);
    out->n = n;
    return SS_OK;
}

ss_status ss__shm_group_create(const char *name, size_t n, ss__shm_group *out, char *why,
                               size_t whylen) {
    if (!name || !out || n == 0 || n > (SIZE_MAX - 2 * SS_SHM_HEADER_BYTES) / sizeof(float))
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                        "a shared group needs a name and 1 to %zu floats, not %zu",
                        (SIZE_MAX - 2 * SS_SHM_HEADER_BYTES) / sizeof(float), n);
    memset(out, 0, sizeof *out);
    out->fd = -1;
    char label[96];
    snprintf(label, sizeof label, "shadowsync:%.64s", name);
    int fd = memfd_create(label, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return ss__fail(why, whylen, SS_ERR_IO, "memfd_create: %s", strerror(errno));
    ss_status st = SS_ERR_IO;
    if (ftruncate(fd, (off_t)map_bytes_for(n)) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
        (st = map_fd(fd, n, out)) != SS_OK) {
        ss__why(why, whylen, "cannot size or map %zu floats of shared memory: %s", n,
                strerror(errno));
        close(fd);
        return st == SS_OK ? SS_ERR_IO : st;
    }
    out->fd = fd;
    out->hdr->magic = SS_SHM_MAGIC;
    out->hdr->n = n;
    return SS_OK;
}

ss_status ss__shm_group_map(int fd, size_t n, ss__shm_group *out, char *why, size_t whylen) {
    if (!out || fd < 0) {
        ss__why(why, whylen, "no descriptor");
        return SS_ERR_INVALID_ARGUMENT;
    }
    memset(out, 0, sizeof *out);
    out->fd = -1;
    ss_status st = SS_ERR_INVALID_ARGUMENT;
    struct stat sb;
    int seals = fcntl(fd, F_GET_SEALS);
    if (n == 0 || n > (SIZE_MAX - 2 * SS_SHM_HEADER_BYTES) / sizeof(float))
        ss__why(why, whylen, "group size out of range");
    else if (seals < 0)
        ss__why(why, whylen, "descriptor is not a memfd");
    else if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
        ss__why(why, whylen, "memfd not sealed against shrink and grow");
    else if (fstat(fd, &sb) != 0 || (size_t)sb.st_size != map_bytes_for(n))
        ss__why(why, whylen, "memfd size does not match the group size");
    else if ((st = map_fd(fd, n, out)) != SS_OK)
        ss__why(why, whylen, "mmap failed");
    else if (out->hdr->magic != SS_SHM_MAGIC || out->hdr->n != n) {
        ss__why(why, whylen, "memfd header does not describe this group");
        munmap(out->base, out->map_bytes);
        memset(out, 0, sizeof *out);
        st = SS_ERR_INVALID_ARGUMENT;
    }
    close(fd);
    out->fd = -1;
    return st;
}

void ss__shm_group_release(ss__shm_group *g) {
    if (!g)
        return;
    if (g->base)
        munmap(g->base, g->map_bytes);
    if (g->fd >= 0)
        close(g->fd);
    memset(g, 0, sizeof *g);
    g->fd = -1;
}

double ss__shm_load_double(_Atomic uint64_t *bits) {
    uint64_t b = atomic_load_explicit(bits, memory_order_relaxed);
    double v;
    memcpy(&v, &b, sizeof v);
    return v;
}

void ss__shm_store_double(_Atomic uint64_t *bits, double v) {
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    atomic_store_explicit(bits, b, memory_order_relaxed);
}

ss_status ss__agent_send_frame(int sock, const void *buf, size_t len, int pass_fd) {
    if (sock < 0 || len > SS_AGENT_MAX_FRAME || (len && !buf))
        return SS_ERR_INVALID_ARGUMENT;
    uint8_t frame[4 + SS_AGENT_MAX_FRAME];
    frame[0] = (uint8_t)len;
    frame[1] = (uint8_t)(len >> 8);
    frame[2] = (uint8_t)(len >> 16);
    frame[3] = (uint8_t)(len >> 24);
    if (len)
        memcpy(frame + 4, buf, len);
    size_t total = 4 + len, sent = 0;
    while (sent < total) {
        struct iovec iov = {.iov_base = frame + sent, .iov_len = total - sent};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } control;
        if (pass_fd >= 0 && sent == 0) { /* the descriptor rides on the first byte */
            memset(&control, 0, sizeof control);
            msg.msg_control = control.buf;
            msg.msg_controllen = sizeof control.buf;
            struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
        }
        ssize_t k = sendmsg(sock, &msg, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return SS_ERR_IO;
        }
        sent += (size_t)k;
    }
    return SS_OK;
}

static int wait_readable(int sock, int timeout_ms) {
    struct pollfd p = {.fd = sock, .events = POLLIN};
    for (;;) {
        int r = poll(&p, 1, timeout_ms);
        if (r < 0 && errno == EINTR)
            continue;
        return r;
    }
}

/* Takes the descriptors of a control message: keeps one SCM_RIGHTS fd,
 * closes any others. */
static void take_fds(struct msghdr *msg, ss__agent_frame *f) {
    if (msg->msg_flags & MSG_CTRUNC)
        f->fd_truncated = true;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (f->fd < 0 && !f->fd_truncated)
                f->fd = fd;
            else
                close(fd);
        }
    }
    if (f->fd_truncated && f->fd >= 0) {
        close(f->fd);
        f->fd = -1;
    }
}

/* Reads exactly len bytes (descriptors taken as they come). */
static ss_status read_full(int sock, uint8_t *buf, size_t len, ss__agent_frame *f, bool first,
                           int timeout_ms) {
    size_t got = 0;
    while (got < len) {
        int r = wait_readable(sock, first && got == 0 ? timeout_ms : FRAME_REST_MS);
        if (r < 0)
            return SS_ERR_IO;
        if (r == 0) {
            f->why = "frame cut short (peer stopped sending)";
            return first && got == 0 ? SS_ERR_TIMEOUT : SS_ERR_PARSE;
        }
        struct iovec iov = {.iov_base = buf + got, .iov_len = len - got};
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } control;
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = control.buf,
                             .msg_controllen = sizeof control.buf};
        ssize_t k = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            f->why = "socket error";
            return SS_ERR_IO;
        }
        take_fds(&msg, f);
        if (k == 0) {
            f->why = "peer closed inside a frame";
            return first && got == 0 ? SS_ERR_END : SS_ERR_PARSE;
        }
        got += (size_t)k;
    }
    return SS_OK;
}

ss_status ss__agent_recv_frame(int sock, uint32_t max_len, int timeout_ms, ss__agent_frame *f) {
    if (!f)
        return SS_ERR_INVALID_ARGUMENT;
    memset(f, 0, sizeof *f);
    f->fd = -1;
    uint8_t hdr[4];
    ss_status st = read_full(sock, hdr, sizeof hdr, f, true, timeout_ms);
    if (st == SS_ERR_END)
        f->why = "peer closed";
    if (st != SS_OK)
        return st;
    uint32_t len =
        (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;
    if (len > max_len) {
        f->why = "frame length over the limit";
        return SS_ERR_TOO_LARGE;
    }
    f->len = len;
    if (len == 0)
        return SS_OK;
    if (!(f->buf = malloc(len)))
        return SS_ERR_NO_MEMORY;
    st = read_full(sock, f->buf, len, f, false, timeout_ms);
    if (st != SS_OK) {
        /* A frame cut short: nothing of it is handed out (found by
         * fuzz_agent_wire: the payload leaked, a passed fd stayed open). */
        const char *why = f->why;
        ss__agent_frame_release(f);
        f->why = why;
    }
    return st;
}

void ss__agent_frame_release(ss__agent_frame *f) {
    if (!f)
        return;
    free(f->buf);
    if (f->fd >= 0)
        close(f->fd);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

ss_status ss__agent_send_request(int sock, const ss__pb_agent_request *rq, int pass_fd) {
    size_t len = shadowsync__agent__v1__agent_request__get_packed_size(rq);
    if (len > SS_AGENT_MAX_FRAME)
        return SS_ERR_TOO_LARGE;
    uint8_t buf[SS_AGENT_MAX_FRAME];
    shadowsync__agent__v1__agent_request__pack(rq, buf);
    return ss__agent_send_frame(sock, buf, len, pass_fd);
}

ss_status ss__agent_send_reply(int sock, ss_status status, const char *message) {
    Shadowsync__Agent__V1__AgentReply rp = SHADOWSYNC__AGENT__V1__AGENT_REPLY__INIT;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", message ? message : "");
    rp.status = (uint32_t)status;
    rp.message = msg;
    uint8_t buf[SS_AGENT_MAX_FRAME];
    size_t len = shadowsync__agent__v1__agent_reply__pack(&rp, buf);
    return ss__agent_send_frame(sock, buf, len, -1);
}

ss_status ss__agent_recv_reply(int sock, int timeout_ms, ss_status *status, char *message,
                               size_t message_len) {
    ss__agent_frame f;
    ss_status st = ss__agent_recv_frame(sock, SS_AGENT_MAX_FRAME, timeout_ms, &f);
    if (st != SS_OK) {
        ss__agent_frame_release(&f);
        return st;
    }
    Shadowsync__Agent__V1__AgentReply *rp =
        shadowsync__agent__v1__agent_reply__unpack(NULL, f.len, f.buf);
    ss__agent_frame_release(&f);
    if (!rp)
        return SS_ERR_PARSE;
    *status = rp->status < SS_STATUS_COUNT_ ? (ss_status)rp->status : SS_ERR_INTERNAL;
    if (message && message_len)
        snprintf(message, message_len, "%s", rp->message ? rp->message : "");
    shadowsync__agent__v1__agent_reply__free_unpacked(rp, NULL);
    return SS_OK;
}
