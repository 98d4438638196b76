/* shadowsync-emu-delay: a latency line for the emulated cluster, where the
 * kernel has no sch_netem (bench/emu-lib.sh).
 *
 * It binds one NFQUEUE queue of its network namespace and gives every
 * packet queued there back to the kernel (NF_ACCEPT) --delay-us after it
 * arrived. The script queues a host's incoming packets (the raw table's
 * PREROUTING chain on eth0), so each packet reaches its host that much
 * later, as a netem delay on the link would make it.
 *
 * Why it is cheap enough for Gbit/s links:
 * - NFQNL_COPY_META: the kernel keeps the packet and sends us only its id
 *   (no payload is copied to user space);
 * - NFQA_CFG_F_GSO: segmentation-offload packets (up to 64 KiB) are queued
 *   whole, not cut into MTU-sized ones;
 * - the delay is the same for every packet, so packets fall due in the
 *   order they came and one batch verdict (every id up to N) releases all
 *   that are due at once.
 * Ingress, not egress: the veth link orphans a packet from its sending
 * socket, so a held packet does not count against TCP's small-queue limit
 * on the sender, which would cap a long link's throughput.
 * A lost notification (the netlink socket's buffer full) loses no packet:
 * the next batch verdict covers its id too. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "common/clock.h"
#include "common/flags.h"

static const ss__program program = {
    "shadowsync-emu-delay",
    "Delays every packet of one NFQUEUE queue of this network namespace by a\n"
    "fixed time, then accepts it: the emulated cluster's link latency where the\n"
    "kernel has no sch_netem. Run it as root inside the host's namespace, then\n"
    "queue its incoming packets, for example:\n"
    "  iptables -t raw -A PREROUTING -i eth0 -j NFQUEUE --queue-num 0\n"
    "It prints \"ready\" once bound, and at SIGTERM/SIGINT accepts what it\n"
    "holds and prints how many packets it delayed and how late their release\n"
    "was against the delay asked for (p50, p99, max).",
};

typedef struct held {
    uint32_t id;
    uint64_t arrived_ns;
} held;

typedef struct delay_line {
    held *ring;
    size_t cap, head, count;
    uint64_t packets, batches, overflows;
    uint64_t late_hist[64]; /* by log2 of microseconds late */
    uint64_t late_max_ns;
} delay_line;

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa,
                     void *arg) {
    (void)msg;
    delay_line *dl = arg;
    struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
    if (!ph)
        return 0;
    uint32_t id = ntohl(ph->packet_id);
    if (dl->count == dl->cap) {
        /* More held than the kernel's queue allows: give the oldest back now
         * rather than lose track of it (counted: the delay was cut short). */
        nfq_set_verdict_batch(qh, dl->ring[dl->head].id, NF_ACCEPT);
        dl->head = (dl->head + 1) % dl->cap;
        dl->count--;
        dl->overflows++;
    }
    dl->ring[(dl->head + dl->count) % dl->cap] = (held){id, ss__now_ns()};
    dl->count++;
    dl->packets++;
    return 0;
}

/* Accepts every held packet due by now (all of them when flush); returns
 * the nanoseconds until the next one falls due, or -1 when none is held. */
static int64_t release_due(struct nfq_q_handle *qh, delay_line *dl, uint64_t delay_ns, int flush) {
    uint64_t now = ss__now_ns();
    int have = 0;
    uint32_t last = 0;
    while (dl->count) {
        held *h = &dl->ring[dl->head];
        uint64_t due = h->arrived_ns + delay_ns;
        if (due > now && !flush)
            break;
        if (!have && due <= now) {
            uint64_t late = now - due;
            unsigned b = 0;
            while (b < 63 && (late / 1000) >> b)
                b++;
            dl->late_hist[b]++;
            if (late > dl->late_max_ns)
                dl->late_max_ns = late;
        }
        have = 1;
        last = h->id;
        dl->head = (dl->head + 1) % dl->cap;
        dl->count--;
    }
    if (have) {
        nfq_set_verdict_batch(qh, last, NF_ACCEPT);
        dl->batches++;
    }
    if (!dl->count)
        return -1;
    uint64_t due = dl->ring[dl->head].arrived_ns + delay_ns;
    return due > now ? (int64_t)(due - now) : 0;
}

/* The upper bound, in microseconds, of the histogram bucket holding the
 * q-quantile of the batches' lateness. */
static uint64_t late_quantile_us(const delay_line *dl, double q) {
    uint64_t total = 0, seen = 0;
    for (int b = 0; b < 64; b++)
        total += dl->late_hist[b];
    if (!total)
        return 0;
    for (int b = 0; b < 64; b++) {
        seen += dl->late_hist[b];
        if ((double)seen >= q * (double)total)
            return b ? (uint64_t)1 << b : 1;
    }
    return UINT64_MAX;
}

int main(int argc, char **argv) {
    int64_t delay_us = 1000, queue = 0, max_held = 65536;
    bool realtime = true;
    ss__flag flags[] = {
        {"delay-us", SS_FLAG_INT, &delay_us, "hold every packet this long, microseconds", NULL, 0,
         10000000},
        {"queue", SS_FLAG_INT, &queue, "the NFQUEUE queue number to bind", NULL, 0, 65535},
        {"max-held", SS_FLAG_INT, &max_held,
         "packets held at once at most (the kernel's queue length too)", NULL, 16, 1 << 22},
        {"realtime", SS_FLAG_BOOL, &realtime,
         "run at SCHED_FIFO priority 10, so busy CPUs do not make releases late", NULL, 0, 0},
    };
    int code = ss__flags_cli(&program, flags, sizeof flags / sizeof *flags, argc, argv);
    if (code >= 0)
        return code;

    delay_line dl = {.cap = (size_t)max_held};
    dl.ring = calloc(dl.cap, sizeof *dl.ring);
    if (!dl.ring) {
        fprintf(stderr, "%s: no memory for %zu held packets (--max-held)\n", program.name, dl.cap);
        return 1;
    }
    struct nfq_handle *h = nfq_open();
    if (!h) {
        fprintf(stderr, "%s: nfq_open: %s (needs root and a kernel with NFQUEUE)\n", program.name,
                strerror(errno));
        return 1;
    }
    if (nfq_bind_pf(h, AF_INET) < 0) {
        fprintf(stderr, "%s: nfq_bind_pf(AF_INET): %s\n", program.name, strerror(errno));
        nfq_close(h);
        return 1;
    }
    struct nfq_q_handle *qh = nfq_create_queue(h, (uint16_t)queue, on_packet, &dl);
    if (!qh) {
        fprintf(stderr, "%s: binding queue %lld: %s (is another process bound to it?)\n",
                program.name, (long long)queue, strerror(errno));
        nfq_close(h);
        return 1;
    }
    if (nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0 ||
        nfq_set_queue_maxlen(qh, (uint32_t)max_held) < 0 ||
        nfq_set_queue_flags(qh, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO) < 0) {
        fprintf(stderr, "%s: configuring queue %lld (copy mode, length %lld, GSO): %s\n",
                program.name, (long long)queue, (long long)max_held, strerror(errno));
        nfq_destroy_queue(qh);
        nfq_close(h);
        return 1;
    }
    nfnl_rcvbufsiz(nfq_nfnlh(h), 16u << 20);
    int fd = nfq_fd(h);
    int one = 1;
    /* A full socket buffer loses notifications, not packets (see the top):
     * no ENOBUFS error for it. */
    setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof one);
    if (realtime) {
        struct sched_param sp = {.sched_priority = 10};
        if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0)
            fprintf(stderr, "%s: SCHED_FIFO refused (%s): releases may be late on busy CPUs\n",
                    program.name, strerror(errno));
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    fprintf(stderr, "%s: queue %lld, delay %lld us, ready\n", program.name, (long long)queue,
            (long long)delay_us);

    const uint64_t delay_ns = (uint64_t)delay_us * 1000u;
    char buf[65536] __attribute__((aligned));
    while (!stop_requested) {
        int64_t wait_ns = release_due(qh, &dl, delay_ns, 0);
        struct timespec ts = {0, 100000000}; /* idle: look at stop_requested 10 times a second */
        if (wait_ns >= 0)
            ts = (struct timespec){(time_t)(wait_ns / 1000000000), (long)(wait_ns % 1000000000)};
        struct pollfd pfd = {fd, POLLIN, 0};
        int n = ppoll(&pfd, 1, &ts, NULL);
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "%s: ppoll: %s\n", program.name, strerror(errno));
            break;
        }
        if (n <= 0)
            continue;
        for (;;) {
            ssize_t len = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (len < 0) {
                if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ENOBUFS)
                    fprintf(stderr, "%s: recv: %s\n", program.name, strerror(errno));
                break;
            }
            nfq_handle_packet(h, buf, (int)len);
        }
    }
    release_due(qh, &dl, delay_ns, 1);
    fprintf(stderr,
            "%s: packets=%llu batches=%llu overflows=%llu late_us_p50<=%llu late_us_p99<=%llu "
            "late_us_max=%.1f\n",
            program.name, (unsigned long long)dl.packets, (unsigned long long)dl.batches,
            (unsigned long long)dl.overflows, (unsigned long long)late_quantile_us(&dl, 0.5),
            (unsigned long long)late_quantile_us(&dl, 0.99), (double)dl.late_max_ns / 1000.0);
    nfq_destroy_queue(qh);
    nfq_close(h);
    free(dl.ring);
    return 0;
}
