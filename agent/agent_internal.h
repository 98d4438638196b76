/* Shared by agent.c (socket, sessions) and agent_status.c (/status JSON,
 * checkpoints). */
#ifndef SS_AGENT_INTERNAL_H
#define SS_AGENT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#include "agent/agent.h"
#include "common/names.h"
#include "rpc/agent/agent_wire.h"
#include "shadow/engine.h"

#define AGENT_MAX_GROUPS SS_AGENT_MAX_TRAINER_GROUPS
#define AGENT_NAME_MAX   SS_NAME_MAX

typedef struct agent_group {
    char name[AGENT_NAME_MAX];
    ss__algo algo;
    ss__shm_group shm;
    ss__replica *replica;
    ss__engine_group *eg;
    /* What earlier agents published into the header (they accumulate). */
    uint64_t base_rounds, base_failed, base_rejoins;
    uint64_t registered_ns;
} agent_group;

typedef struct agent_session {
    struct agent_session *next;
    ss__agent *agent;
    uint64_t id;
    int sock;
    pid_t peer_pid;
    uid_t peer_uid;
    pthread_t thread;
    _Atomic bool done;    /* thread returned: the accept loop joins and frees */
    pthread_mutex_t lock; /* guards everything below against status readers */
    char trainer[AGENT_NAME_MAX];
    bool hello, finished;
    ss__engine *engine;
    agent_group groups[AGENT_MAX_GROUPS];
    size_t ngroups;
    uint64_t group_bytes; /* floats * 4 of the groups registered */
} agent_session;

struct ss__agent {
    ss__agent_config cfg;
    char *socket_path;
    int listen_fd;
    uid_t self_uid;
    gid_t group_gid; /* (gid_t)-1: none */
    pthread_t accept_thread;
    _Atomic bool stopping;
    pthread_mutex_t lock; /* guards sessions */
    agent_session *sessions;
    uint64_t next_session;
    uint64_t start_ns;
    _Atomic uint64_t rounds_done; /* of engines already destroyed */
    ss__gauge *m_sessions, *m_groups;
    ss__counter *m_accepted;
    ss__counter *m_join_failed; /* groups the PS shards could not take */
    /* The last of them, under lock: /status shows it (what the operator
     * looks at when trainers say they cannot sync). */
    char join_failure[600];
    uint64_t join_failure_ns; /* 0: none yet */
};

/* Counts a refused request or connection in
 * shadowsync_agent_rejected_total{reason}. */
void ss__agent_count_reject(ss__agent *a, const char *reason);

#endif
