/* The wire between a trainer's hooks and the host's shadowsync-agent:
 *  - a dense group lives in a sealed memfd (header page + floats) that the
 *    trainer creates and passes to the agent with SCM_RIGHTS; both map it;
 *  - messages (rpc/agent/agent.proto) travel on a unix stream socket as
 *    frames: a 4-byte little-endian length, then the protobuf bytes.
 * Used by the client (rpc/agent/agent_client.c, for trainer-hooks) and the server
 * (agent/). */
#ifndef SHADOWSYNC_AGENT_WIRE_H
#define SHADOWSYNC_AGENT_WIRE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rpc/agent/agent.pb-c.h"
#include "shadowsync/status.h"

typedef Shadowsync__Agent__V1__AgentRequest ss__pb_agent_request;
typedef Shadowsync__Agent__V1__Hello ss__pb_hello;
typedef Shadowsync__Agent__V1__RegisterGroup ss__pb_register_group;
typedef Shadowsync__Agent__V1__Finish ss__pb_finish;

#define SS_AGENT_PROTOCOL 1u
/* Largest frame either side accepts: messages are small (names, params);
 * the floats never travel on the socket. */
#define SS_AGENT_MAX_FRAME  4096u
#define SS_SHM_MAGIC        0x31505247444e5353ull /* "SSNDGRP1" */
#define SS_SHM_HEADER_BYTES 4096u

/* The header page of a group's memfd. The trainer writes magic and n and
 * ticks `iterations`; the agent publishes the group's sync statistics
 * (accumulated over agent restarts) for the trainer to read. */
typedef struct ss__shm_header {
    uint64_t magic;
    uint64_t n;
    _Alignas(64) _Atomic uint64_t iterations;
    _Alignas(64) _Atomic uint64_t rounds;
    _Atomic uint64_t failed_rounds;
    _Atomic uint64_t rejoins;
    _Atomic uint64_t gap_p50, gap_p99, gap_max;
    _Atomic uint64_t gap_mean_bits;   /* a double */
    _Atomic uint64_t divergence_bits; /* a double */
    _Atomic uint64_t agent_sessions;  /* agents that ran this group */
} ss__shm_header;

typedef struct ss__shm_group {
    int fd; /* trainer side: the memfd (kept to register again); agent: -1 */
    void *base;
    size_t map_bytes;
    ss__shm_header *hdr;
    float *data; /* n floats, 64-byte aligned */
    size_t n;
} ss__shm_group;

/* Trainer side: a sealed memfd of n zeroed floats (it can never shrink or
 * grow, so the agent's mapping cannot fault), mapped shared. */
ss_status ss__shm_group_create(const char *name, size_t n, ss__shm_group *out, char *why,
                               size_t whylen);
/* Agent side: maps a received fd after checking it: a memfd sealed
 * against shrinking and growing, the size of n floats plus the header,
 * the header's magic and n. The fd is closed either way. */
ss_status ss__shm_group_map(int fd, size_t n, ss__shm_group *out, char *why, size_t whylen);
void ss__shm_group_release(ss__shm_group *g);

double ss__shm_load_double(_Atomic uint64_t *bits);
void ss__shm_store_double(_Atomic uint64_t *bits, double v);

/* Sends one frame; pass_fd >= 0 travels with it (SCM_RIGHTS). */
ss_status ss__agent_send_frame(int sock, const void *buf, size_t len, int pass_fd);

typedef struct ss__agent_frame {
    uint8_t *buf; /* malloc'd payload (NULL when empty) */
    size_t len;
    int fd;            /* a passed descriptor, or -1 */
    bool fd_truncated; /* descriptors arrived cut short (MSG_CTRUNC); none kept */
    const char *why;   /* on error: what was wrong, for the reply and the log */
} ss__agent_frame;

/* Receives one frame within timeout_ms (< 0: no limit). SS_ERR_END: the
 * peer closed between frames; SS_ERR_PARSE: it closed inside a frame;
 * SS_ERR_TOO_LARGE: the length is over max_len (nothing was allocated; the
 * stream can no longer be trusted); SS_ERR_TIMEOUT; SS_ERR_IO. On any
 * failure f holds nothing (no buffer, no descriptor), only f->why. */
ss_status ss__agent_recv_frame(int sock, uint32_t max_len, int timeout_ms, ss__agent_frame *f);
void ss__agent_frame_release(ss__agent_frame *f);

/* A request as one frame (pass_fd >= 0 rides along). */
ss_status ss__agent_send_request(int sock, const ss__pb_agent_request *rq, int pass_fd);
/* The agent's answer to every request: a status and why. */
ss_status ss__agent_send_reply(int sock, ss_status status, const char *message);
/* Waits for a reply; *status is the agent's verdict, message (may be NULL)
 * its explanation. The return value is the transport's (SS_ERR_END: the
 * agent closed the socket). */
ss_status ss__agent_recv_reply(int sock, int timeout_ms, ss_status *status, char *message,
                               size_t message_len);

#endif
