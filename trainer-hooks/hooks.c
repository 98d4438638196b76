/* libshadowsync: the trainer hooks over the engine and the gRPC transport.
 * In-process mode: the shadow pool runs inside the trainer process. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/names.h"
#include "common/shard_map.h"
#include "rpc/agent/agent_client.h"
#include "rpc/agent/agent_wire.h"
#include "rpc/dense/grpc_transport.h"
#include "rpc/dense/recut_transport.h"
#include "rpc/peer/gossip_transport.h"
#include "rpc/rpc.h"
#include "rpc/tree/tree_transport.h"
#include "shadow/device.h"
#include "shadow/engine.h"
#include "shadow/replica.h"
#include "shadowsync/shadowsync.h"
#include "trainer-hooks/errors_internal.h"
#include "trainer-hooks/hooks_internal.h"
#include "trainer-hooks/settings_internal.h"
#include "trainer-hooks/trainer_internal.h"

/* ---- open / close ---- */

/* Says which setting is wrong and why. */
static ss_status check_config(const ss_trainer_config *c, ss__sync_params *p) {
#define BAD(...) ss__err_set(SS_ERR_INVALID_ARGUMENT, __VA_ARGS__)
    if (c->name && !ss__name_valid(c->name))
        return BAD("trainer_name=\"%s\": 1-63 characters of [A-Za-z0-9_.-], not starting "
                   "with \".\"",
                   c->name);
    if ((unsigned)c->mode > SS_SYNC_FOREGROUND)
        return BAD("sync: unknown mode %d (none|shadow|foreground)", (int)c->mode);
    if (c->mode == SS_SYNC_NONE)
        return SS_OK;
    bool agent = c->agent && *c->agent;
    if (agent && c->mode != SS_SYNC_BACKGROUND)
        return BAD("agent=%s: an agent syncs in the background only, and sync is foreground "
                   "(foreground rounds run in the trainer: unset agent or set sync=shadow)",
                   c->agent);
    bool peers = c->peers && *c->peers;
    if (peers && ((c->ps && *c->ps) || agent))
        return BAD("peers and %s: pick one (decentralized averaging between peers, or sync "
                   "through %s)",
                   agent ? "agent" : "ps", agent ? "the host's agent" : "parameter servers");
    if (peers && c->peer_schedule && strcmp(c->peer_schedule, "ring") != 0 &&
        strcmp(c->peer_schedule, "random") != 0 && strcmp(c->peer_schedule, "tree") != 0)
        return BAD("peer_schedule=\"%s\": unknown schedule (ring|random|tree)", c->peer_schedule);
    const bool trees = c->peer_schedule && !strcmp(c->peer_schedule, "tree");
    if (peers && !trees && (!c->algo || strcmp(c->algo, "ma") != 0))
        return BAD("peers: decentralized averaging runs S-MA rounds with one peer at a time, "
                   "and algo is \"%s\" (set algo=ma, or peer_schedule=tree for bmuf: S-EASGD "
                   "needs a PS)",
                   c->algo ? c->algo : "");
    if (peers && trees && (!c->algo || !strcmp(c->algo, "easgd")))
        return BAD("peers with peer_schedule=tree: algo is \"%s\" (ma or bmuf: S-EASGD needs a "
                   "PS's central variable)",
                   c->algo ? c->algo : "");
    if (!agent && !peers && (!c->ps || !*c->ps))
        return BAD("ps: no parameter servers given (set SHADOWSYNC_PS=host:port,... or "
                   "sync=none to train alone)");
    if (!c->algo || ss__algo_parse(c->algo, &p->algo) != SS_OK)
        return BAD("algo=\"%s\": unknown algorithm (easgd|ma|bmuf)", c->algo ? c->algo : "");
    ss__encoding enc = SS_ENC_F32;
    if (c->encoding && !ss__encoding_parse(c->encoding, &enc))
        return BAD("encoding=\"%s\": unknown encoding (f32|fp16|bf16|int8)", c->encoding);
    if (agent && c->encoding && enc != SS_ENC_F32)
        return BAD("encoding=%s: with an agent, the agent talks to the PS and its --encoding "
                   "decides (unset encoding here, or start the agent with --encoding %s)",
                   c->encoding, c->encoding);
    if (c->chunk_floats > SS_GRPC_MAX_CHUNK_FLOATS)
        return BAD("chunk_floats=%u: at most %u (256 MiB per call); 0 for the default",
                   c->chunk_floats, SS_GRPC_MAX_CHUNK_FLOATS);
    if (c->chunk_floats && (agent || peers))
        return BAD("chunk_floats=%u: only a trainer that calls the PS itself cuts chunks, and "
                   "%s (unset chunk_floats%s)",
                   c->chunk_floats,
                   agent ? "this one syncs through an agent, whose --chunk-floats decides"
                         : "this one averages with peers",
                   agent ? "; start the agent with --chunk-floats" : "");
    if (c->timeout_ms == 0)
        return BAD("rpc_timeout_ms=0: every RPC needs a deadline (> 0)");
    if (c->mode == SS_SYNC_BACKGROUND && c->shadow_threads == 0)
        return BAD("shadow_threads=0: background sync needs at least 1 shadow thread");
    if (c->mode == SS_SYNC_FOREGROUND && c->sync_every == 0)
        return BAD("sync_every=0: foreground sync runs a round every K >= 1 steps");
    p->alpha = c->alpha;
    p->bmuf = (ss__bmuf_params){
        .eta = c->bmuf_eta, .zeta = c->bmuf_zeta, .nesterov = c->bmuf_nesterov != 0};
    char why[200];
    if (ss__sync_params_check(p, why, sizeof why) != SS_OK)
        return BAD("%s", why);
    if (!c->tls_cert != !c->tls_key)
        return BAD("tls_cert and tls_key: give both (a client certificate and its key) or "
                   "neither");
    return SS_OK;
#undef BAD
}

static char *dup_or_null(const char *s, int *failed) {
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        *failed = 1;
    return d;
}

static void dense_free(ss_dense *g) {
    free(g->central_final);
    ss__replica_destroy(g->replica);
    ss__shm_group_release(&g->shm);
    free(g->name);
    free(g);
}

/* Frees the trainer and its groups; the engine and transport are gone. */
static void trainer_free(ss_trainer *t) {
    ss__trainer_http_stop(t); /* nobody reads the trainer from now on */
    for (size_t i = 0; i < t->nattached; i++)
        t->attached[i].destroy(t->attached[i].obj);
    if (t->shared)
        t->shared_destroy(t->shared);
    size_t k = atomic_load(&t->ngroups);
    for (size_t i = 0; i < k; i++)
        dense_free(t->groups[i]);
    pthread_mutex_destroy(&t->lock);
    pthread_mutex_destroy(&t->render_lock);
    ss__metrics_destroy(t->metrics);
    free(t->ps);
    free(t->name);
    free(t->tls_ca);
    free(t->tls_cert);
    free(t->tls_key);
    free(t->shard_map);
    free(t->agent);
    free(t);
}

/* shard_map: its ps list becomes c->ps (pointing into map), its epoch
 * the trainer's. */
static ss_status read_shard_map(ss_trainer_config *c, ss__shard_map *map) {
    if (!c->shard_map || !*c->shard_map || c->mode == SS_SYNC_NONE)
        return SS_OK;
    if (c->ps && *c->ps)
        return ss__err_set(SS_ERR_INVALID_ARGUMENT,
                           "ps=\"%s\" and shard_map=%s: pick one (the map lists the shards)", c->ps,
                           c->shard_map);
    char why[300];
    ss_status st = ss__shard_map_read(c->shard_map, map, why, sizeof why);
    if (st != SS_OK)
        return ss__err_set(st, "shard_map: %s", why);
    c->ps = map->ps;
    return SS_OK;
}

/* The transport of a trainer that syncs without an agent: a tree or a
 * gossip among cfg->peers, else the PS shards of its shard map or its ps
 * list (then t->to_ps); a failure says which setting. */
static ss_status open_transport(ss_trainer *t, const ss_trainer_config *cfg) {
    ss__rpc_tls tls = {.ca_file = t->tls_ca, .cert_file = t->tls_cert, .key_file = t->tls_key};
    if (cfg->peers && *cfg->peers && cfg->peer_schedule && !strcmp(cfg->peer_schedule, "tree")) {
        ss__tree_config tc = {.peers = cfg->peers,
                              .rank = cfg->peer_rank,
                              .topology = cfg->topology,
                              .timeout_ms = cfg->timeout_ms,
                              .tls = &tls,
                              .insecure_loopback = cfg->insecure_loopback != 0};
        char why[400] = "";
        ss_status st = ss__tree_transport_create(&tc, &t->transport, why, sizeof why);
        if (st != SS_OK)
            return ss__err_set(st, "peers=\"%s\", peer_rank=%u, peer_schedule=tree: %s", cfg->peers,
                               cfg->peer_rank, why[0] ? why : ss_strerror(st));
        return SS_OK;
    }
    if (cfg->peers && *cfg->peers) {
        ss__gossip_config gcfg = {.peers = cfg->peers,
                                  .rank = cfg->peer_rank,
                                  .timeout_ms = cfg->timeout_ms,
                                  .random =
                                      cfg->peer_schedule && !strcmp(cfg->peer_schedule, "random"),
                                  .tls = &tls,
                                  .insecure_loopback = cfg->insecure_loopback != 0};
        char why[400] = "";
        ss_status st = ss__gossip_transport_create(&gcfg, &t->transport, why, sizeof why);
        if (st != SS_OK)
            return ss__err_set(st,
                               "peers=\"%s\", peer_rank=%u: %s (at least 2 host:port, "
                               "peer_rank one of them, this one's address free; "
                               "SHADOWSYNC_AUTH_TOKEN_FILE, or on loopback insecure_loopback)",
                               cfg->peers, cfg->peer_rank, why[0] ? why : ss_strerror(st));
        return SS_OK;
    }
    ss__grpc_transport_config tcfg = {.targets = t->ps,
                                      .epoch = t->epoch,
                                      .timeout_ms = cfg->timeout_ms,
                                      .round_wait_ms = cfg->round_wait_ms,
                                      .chunk_floats = cfg->chunk_floats,
                                      .retries = 3,
                                      .tls = &tls,
                                      .bulk = cfg->bulk};
    if (cfg->encoding)
        ss__encoding_parse(cfg->encoding, &tcfg.encoding); /* checked by check_config */
    char why[300] = "";
    ss_status st = t->shard_map ? ss__recut_transport_create(t->shard_map, &tcfg, &t->transport,
                                                             why, sizeof why)
                                : ss__grpc_transport_create(&tcfg, &t->transport, why, sizeof why);
    if (st != SS_OK)
        return ss__err_set(st, "ps=\"%s\": %s (%s; each " SS_ADDRESS_RULE ", comma-separated)",
                           t->ps, ss_strerror(st), why);
    t->to_ps = true;
    return SS_OK;
}

static ss_status trainer_open(const ss_trainer_config *in, ss_trainer **out) {
    if (!out)
        return ss__err_set(SS_ERR_INVALID_ARGUMENT, "out: NULL");
    ss_trainer_config c;
    ss_status st = ss__trainer_config_read(in, &c);
    ss__sync_params params = {0};
    ss__shard_map map = {0};
    if (st == SS_OK)
        st = read_shard_map(&c, &map);
    if (st != SS_OK || (st = check_config(&c, &params)) != SS_OK)
        return st;
    const ss_trainer_config *cfg = &c;
    ss_trainer *t = calloc(1, sizeof *t);
    if (!t)
        return SS_ERR_NO_MEMORY;
    int failed = 0;
    t->cfg = *cfg;
    t->ps = dup_or_null(cfg->ps, &failed);
    t->epoch = map.epoch;
    t->shard_map = map.epoch ? dup_or_null(cfg->shard_map, &failed) : NULL;
    t->name = dup_or_null(cfg->name ? cfg->name : "trainer", &failed);
    t->tls_ca = dup_or_null(cfg->tls_ca, &failed);
    t->tls_cert = dup_or_null(cfg->tls_cert, &failed);
    t->tls_key = dup_or_null(cfg->tls_key, &failed);
    t->agent = cfg->agent && *cfg->agent && cfg->mode != SS_SYNC_NONE
                   ? dup_or_null(cfg->agent, &failed)
                   : NULL;
    t->params = params;
    pthread_mutex_init(&t->lock, NULL);
    pthread_mutex_init(&t->render_lock, NULL);
    char why[300] = ""; /* a constructor's reason, for ss_last_error */
    if (failed) {
        st = SS_ERR_NO_MEMORY;
        goto fail;
    }
    if ((st = ss__trainer_metrics_create(t, why, sizeof why)) != SS_OK)
        goto fail;
    if (t->agent) {
        if ((st = ss__agent_client_create(t->agent, t->name, cfg->timeout_ms, &t->agent_client, why,
                                          sizeof why)) != SS_OK)
            goto fail;
    } else if (cfg->mode != SS_SYNC_NONE) {
        if ((st = open_transport(t, cfg)) != SS_OK)
            goto fail;
        ss__engine_config ecfg = {.transport = t->transport,
                                  .metrics = t->metrics,
                                  .trainer = t->name,
                                  .threads = cfg->shadow_threads ? cfg->shadow_threads : 1,
                                  .round_interval_us = cfg->round_interval_us,
                                  .min_round_gap = cfg->min_round_gap,
                                  .heartbeat_interval_ms = cfg->heartbeat_ms};
        if ((st = ss__engine_create(&ecfg, &t->engine, why, sizeof why)) != SS_OK)
            goto fail;
        if (cfg->mode == SS_SYNC_BACKGROUND &&
            (st = ss__engine_start(t->engine, why, sizeof why)) != SS_OK)
            goto fail;
    }
    if ((st = ss__trainer_http_start(t, NULL, 0)) != SS_OK)
        goto fail;
    *out = t;
    return SS_OK;
fail:
    if (why[0]) /* else the step that failed said why itself, or nothing did */
        ss__err_set(st, "%s", why);
    ss__engine_destroy(t->engine);
    ss__transport_destroy(t->transport);
    trainer_free(t);
    return st;
}

ss_status ss_trainer_open(const ss_trainer_config *cfg, ss_trainer **out) {
    ss__err_begin();
    return ss__err_end(trainer_open(cfg, out));
}

/* A failure of a call to the PS (a join, a foreground round, the final
 * rounds), with what the PS said when it refused one. */
static ss_status ps_call_failed(ss_status st, const char *what) {
    const char *said = ss__rpc_last_failure();
    if (st != SS_OK && !said[0] && ss_last_error()[0])
        return st; /* no call to a PS failed: what the path said stays (the agent's socket) */
    if (st != SS_OK && !strncmp(said, "cannot reach ", 13))
        ss__err_set(st, "%s: %s", what, said); /* the address and the reason say it all */
    else if (st != SS_OK)
        ss__err_set(st, "%s: %s%s%s", what, ss_strerror(st), said[0] ? "; the call to " : "", said);
    return st;
}

/* device: a CUDA device's ordinal for a device group, -1 for host memory. */
static ss_status add_dense(ss_trainer *t, const char *name, size_t n, int device, const float *init,
                           ss_dense **out) {
    if (!t || !out)
        return ss__err_set(SS_ERR_INVALID_ARGUMENT, "trainer or out: NULL");
    if (!ss__name_valid(name))
        return ss__err_set(SS_ERR_INVALID_ARGUMENT,
                           "group name \"%s\": 1-63 characters of [A-Za-z0-9_.-], not starting "
                           "with \".\"",
                           name ? name : "(null)");
    if (n == 0)
        return ss__err_set(SS_ERR_INVALID_ARGUMENT, "group %s: n = 0 floats", name);
    ss_dense *g = calloc(1, sizeof *g);
    if (!g)
        return SS_ERR_NO_MEMORY;
    g->trainer = t;
    g->shm.fd = -1;
    g->name = strdup(name);
    ss_status st = g->name ? SS_OK : SS_ERR_NO_MEMORY;
    char why[300] = "";
    /* Agent mode: the header (and a host group's floats) in a memfd the
     * agent maps; a device group's floats stay in this process's GPU
     * memory, exported to the agent by CUDA IPC (its memfd pages for the
     * floats are never touched, so they take no memory). */
    if (st == SS_OK && t->agent_client &&
        (st = ss__shm_group_create(name, n, &g->shm, why, sizeof why)) != SS_OK)
        ss__err_set(st, "group %s: %s", name, why);
    _Atomic uint64_t *shared_iterations =
        t->agent_client && g->shm.hdr ? &g->shm.hdr->iterations : NULL;
    if (st == SS_OK && device >= 0) {
        if ((st = ss__replica_create_device(device, n, shared_iterations, &g->replica, why,
                                            sizeof why)) != SS_OK)
            ss__err_set(st, "group %s on device %d: %s", name, device, why);
    } else if (st == SS_OK && t->agent_client) {
        st = ss__replica_wrap_shared(g->shm.data, n, shared_iterations, &g->replica);
    } else if (st == SS_OK && (st = ss__replica_create(n, &g->replica, why, sizeof why)) != SS_OK) {
        ss__err_set(st, "group %s: %s", name, why);
    }
    if (st == SS_OK && init && (st = ss__replica_load(g->replica, init)) != SS_OK)
        ss__err_set(st, "group %s: %s", name, ss__device_last_error());
    if (st != SS_OK) {
        ss__replica_destroy(g->replica);
        ss__shm_group_release(&g->shm);
        free(g->name);
        free(g);
        return st;
    }
    pthread_mutex_lock(&t->lock);
    size_t k = atomic_load(&t->ngroups);
    for (size_t i = 0; i < k; i++)
        if (!strcmp(t->groups[i]->name, name))
            st = ss__err_set(SS_ERR_EXISTS, "group %s: this trainer has one by that name", name);
    if (st == SS_OK && k == MAX_GROUPS)
        st = ss__err_set(SS_ERR_TOO_LARGE, "group %s: a trainer holds at most %d groups", name,
                         MAX_GROUPS);
    if (st == SS_OK && t->engine) {
        ss__rpc_clear_failure();
        if ((st = ss__engine_add_group(t->engine, name, g->replica, &t->params, &g->group)) !=
            SS_OK) {
            char what[96];
            snprintf(what, sizeof what, "group %s: joining the PS", name);
            ps_call_failed(st, what);
        }
    }
    if (st == SS_OK && t->agent_client) {
        ss__agent_group_spec spec = {.name = name,
                                     .fd = g->shm.fd,
                                     .n = n,
                                     .algo = ss__algo_name(t->params.algo),
                                     .alpha = t->params.alpha,
                                     .bmuf_eta = t->params.bmuf.eta,
                                     .bmuf_zeta = t->params.bmuf.zeta,
                                     .bmuf_nesterov = t->params.bmuf.nesterov,
                                     .on_device = device >= 0,
                                     .device = device};
        ss__device_group *dev = ss__replica_device(g->replica);
        if (dev && (st = ss__device_group_ipc_handle(dev, spec.cuda_ipc_handle)) != SS_OK)
            ss__err_set(st, "group %s: %s", name, ss__device_last_error());
        if (st == SS_OK)
            st = ss__agent_client_add_group(t->agent_client, &spec);
    }
    if (st == SS_OK) {
        t->groups[k] = g;
        atomic_store(&t->ngroups, k + 1); /* published after the slot is set */
    }
    pthread_mutex_unlock(&t->lock);
    if (st != SS_OK) {
        dense_free(g);
        return st;
    }
    *out = g;
    return SS_OK;
}

ss_status ss_trainer_add_dense(ss_trainer *t, const char *name, size_t n, const float *init,
                               ss_dense **out) {
    ss__err_begin();
    return ss__err_end(add_dense(t, name, n, -1, init, out));
}

ss_status ss_trainer_add_dense_device(ss_trainer *t, const char *name, size_t n, int device,
                                      const float *init, ss_dense **out) {
    ss__err_begin();
    if (device < 0)
        return ss__err_end(ss__err_set(SS_ERR_INVALID_ARGUMENT,
                                       "group %s: device %d: a CUDA device ordinal is >= 0",
                                       name ? name : "(null)", device));
    return ss__err_end(add_dense(t, name, n, device, init, out));
}

int ss_device_count(void) {
    ss__err_begin();
    const char *why = "";
    int n = ss__device_count(&why);
    if (n == 0)
        ss__err_set(SS_ERR_UNSUPPORTED, "no CUDA device: %s", why);
    ss__err_end(n == 0 ? SS_ERR_UNSUPPORTED : SS_OK);
    return n;
}

float *ss_dense_data(ss_dense *g) {
    return g ? ss__replica_data(g->replica) : NULL;
}

void *ss_dense_device_data(ss_dense *g) {
    ss__device_group *d = g ? ss__replica_device(g->replica) : NULL;
    return d ? ss__device_group_data(d) : NULL;
}

int ss_dense_device(const ss_dense *g) {
    ss__device_group *d = g ? ss__replica_device(g->replica) : NULL;
    return d ? ss__device_group_ordinal(d) : -1;
}

ss_status ss_dense_read(ss_dense *g, float *dst) {
    ss__err_begin();
    if (!g || !dst)
        return ss__err_end(ss__err_set(SS_ERR_INVALID_ARGUMENT, "group or dst: NULL"));
    ss_status st = ss__replica_snapshot(g->replica, dst);
    if (st != SS_OK)
        ss__err_set(st, "group %s: %s", g->name, ss__device_last_error());
    return ss__err_end(st);
}

/* The central model of g from its PS (the transport still up). */
static ss_status read_central_now(ss_dense *g, float *dst) {
    ss__rpc_clear_failure();
    ss_status st =
        ss__transport_read_central(g->trainer->transport, g->name, dst, ss_dense_size(g));
    if (st != SS_OK) {
        char what[96];
        snprintf(what, sizeof what, "group %s: reading the central model", g->name);
        ps_call_failed(st, what);
    }
    return st;
}

ss_status ss_dense_read_central(ss_dense *g, float *dst) {
    ss__err_begin();
    if (!g || !dst)
        return ss__err_end(ss__err_set(SS_ERR_INVALID_ARGUMENT, "group or dst: NULL"));
    ss_trainer *t = g->trainer;
    if (g->central_final) { /* finished: the centre the final rounds left */
        memcpy(dst, g->central_final, ss_dense_size(g) * sizeof(float));
        return ss__err_end(SS_OK);
    }
    if (g->central_final_st != SS_OK)
        return ss__err_end(ss__err_set(g->central_final_st, "%s", g->central_final_why));
    if (!t->transport || !t->to_ps)
        return ss__err_end(ss__err_set(SS_ERR_STATE,
                                       "group %s: this trainer talks to no PS of its own (sync "
                                       "none, an agent, or peers): there is no central model "
                                       "to read here",
                                       g->name));
    return ss__err_end(read_central_now(g, dst));
}

/* finish: each group's centre as the final rounds left it, kept for
 * ss_dense_read_central after the trainer leaves the PS (a failure is
 * kept too, and said then). */
static void keep_final_centres(ss_trainer *t, ss_status rounds) {
    if (!t->transport || !t->to_ps)
        return;
    size_t k = atomic_load(&t->ngroups);
    for (size_t i = 0; i < k; i++) {
        ss_dense *g = t->groups[i];
        if (rounds != SS_OK) { /* not read: the rounds' own failure is what finish says */
            g->central_final_st = SS_ERR_STATE;
            snprintf(g->central_final_why, sizeof g->central_final_why,
                     "group %s: the final rounds failed (%s), so finish kept no central model",
                     g->name, ss_status_name(rounds));
            continue;
        }
        float *c = malloc(ss_dense_size(g) * sizeof *c + 4);
        ss_status st = c ? read_central_now(g, c) : SS_ERR_NO_MEMORY;
        if (st == SS_OK) {
            g->central_final = c;
            continue;
        }
        free(c);
        g->central_final_st = st;
        snprintf(g->central_final_why, sizeof g->central_final_why, "%s (read at finish)",
                 st == SS_ERR_NO_MEMORY ? ss_strerror(st) : ss_last_error());
    }
}

size_t ss_dense_size(const ss_dense *g) {
    return g ? ss__replica_size(g->replica) : 0;
}

static ss_status dense_stats(ss_dense *g, ss_dense_stats *out) {
    if (!g || !out)
        return SS_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    if (g->trainer->agent_client) { /* agent mode until finish: what the agent published */
        ss__shm_header *h = g->shm.hdr;
        out->iterations = ss__replica_iterations(g->replica);
        out->rounds = atomic_load(&h->rounds);
        out->failed_rounds = atomic_load(&h->failed_rounds);
        out->rejoins = atomic_load(&h->rejoins);
        out->gap_mean = ss__shm_load_double(&h->gap_mean_bits);
        out->gap_p50 = atomic_load(&h->gap_p50);
        out->gap_p99 = atomic_load(&h->gap_p99);
        out->gap_max = atomic_load(&h->gap_max);
        out->divergence = ss__shm_load_double(&h->divergence_bits);
        return SS_OK;
    }
    if (!g->group) {
        *out = g->final;
        out->iterations = ss__replica_iterations(g->replica);
        return SS_OK;
    }
    out->iterations = ss__replica_iterations(g->replica);
    ss__group_stats s;
    ss_status st = ss__engine_group_stats(g->group, &s);
    if (st != SS_OK)
        return st;
    out->rounds = s.rounds;
    out->failed_rounds = s.failed_rounds;
    out->rejoins = s.rejoins;
    out->gap_mean = s.gap_mean;
    out->gap_p50 = s.gap_p50;
    out->gap_p99 = s.gap_p99;
    out->gap_max = s.gap_max;
    out->divergence = s.divergence;
    return SS_OK;
}

ss_status ss_dense_get_stats(ss_dense *g, ss_dense_stats *out) {
    ss__err_begin();
    return ss__err_end(dense_stats(g, out));
}

/* One round of every group in the calling thread; the first error. */
static ss_status round_all(ss_trainer *t) {
    ss_status first = SS_OK;
    size_t k = atomic_load(&t->ngroups);
    for (size_t i = 0; i < k; i++) {
        ss_status st = ss__engine_run_round(t->engine, t->groups[i]->group);
        if (first == SS_OK)
            first = st;
    }
    return first;
}

ss_status ss_trainer_step(ss_trainer *t) {
    ss__err_begin();
    if (!t)
        return ss__err_end(SS_ERR_INVALID_ARGUMENT);
    size_t k = atomic_load(&t->ngroups);
    for (size_t i = 0; i < k; i++)
        ss__replica_tick(t->groups[i]->replica, 1);
    uint64_t step = atomic_fetch_add_explicit(&t->steps, 1, memory_order_relaxed) + 1;
    if (t->cfg.mode == SS_SYNC_FOREGROUND && t->engine && step % t->cfg.sync_every == 0) {
        ss__rpc_clear_failure();
        return ss__err_end(ps_call_failed(round_all(t), "foreground round"));
    }
    return SS_OK;
}

void ss__hooks_endpoint_of(ss_trainer *t, ss__hooks_endpoint *out) {
    out->ps = t->ps;
    out->tls =
        (ss__rpc_tls){.ca_file = t->tls_ca, .cert_file = t->tls_cert, .key_file = t->tls_key};
    out->timeout_ms = t->cfg.timeout_ms;
    out->epoch = t->epoch;
    out->shard_map = t->shard_map;
    out->bulk = t->cfg.bulk;
}

ss_status ss__hooks_attach(ss_trainer *t, const ss__hooks_attachment *a) {
    pthread_mutex_lock(&t->lock);
    ss_status st = t->nattached < MAX_ATTACHED ? SS_OK : SS_ERR_TOO_LARGE;
    if (st == SS_OK)
        t->attached[t->nattached++] = *a;
    pthread_mutex_unlock(&t->lock);
    return st;
}

void *ss__hooks_shared(ss_trainer *t, void *(*make)(void), void (*destroy)(void *obj)) {
    pthread_mutex_lock(&t->lock);
    if (!t->shared && (t->shared = make()))
        t->shared_destroy = destroy;
    void *obj = t->shared;
    pthread_mutex_unlock(&t->lock);
    return obj;
}

/* Remote pushes applied, cached rows synced: before the dense rounds, so
 * a trainer's last embedding updates are on the shards when it leaves. */
static ss_status finish_tables(ss_trainer *t) {
    ss_status st = SS_OK;
    pthread_mutex_lock(&t->lock);
    size_t n = t->attached_finished ? 0 : t->nattached;
    t->attached_finished = true;
    pthread_mutex_unlock(&t->lock);
    for (size_t i = 0; i < n; i++) {
        ss_status s = t->attached[i].finish(t->attached[i].obj);
        if (st == SS_OK)
            st = s;
    }
    return st;
}

/* Agent mode: the agent runs the final rounds on our shared replicas (the
 * gap it published before them is the training's); then the groups'
 * stats are frozen and the connection closes. */
static ss_status finish_agent(ss_trainer *t, ss_status tables) {
    char why[400] = "";
    ss_status st =
        ss__agent_client_finish(t->agent_client, t->cfg.final_rounds, t->cfg.final_sync_ms,
                                t->cfg.timeout_ms, why, sizeof why);
    if (st != SS_OK && why[0])
        ss__err_set(st, "final rounds through the agent: %s", why);
    size_t k = atomic_load(&t->ngroups);
    for (size_t i = 0; i < k; i++)
        dense_stats(t->groups[i], &t->groups[i]->final);
    ss__agent_client_destroy(t->agent_client);
    t->agent_client = NULL;
    return tables != SS_OK ? tables : st;
}

static ss_status trainer_finish(ss_trainer *t) {
    if (!t)
        return SS_ERR_INVALID_ARGUMENT;
    ss_status st = finish_tables(t);
    if (t->agent_client)
        return finish_agent(t, st);
    if (!t->engine)
        return st; /* mode NONE, or finished already */
    ss__engine_stop(t->engine);
    /* The sync gap describes training: freeze it before the final rounds,
     * which run with no steps between them. */
    size_t k = atomic_load(&t->ngroups);
    for (size_t i = 0; i < k; i++)
        dense_stats(t->groups[i], &t->groups[i]->final);
    /* Final rounds in the foreground: the replicas stop moving, so they
     * converge on the consensus. */
    st = ss__engine_final_rounds(t->engine, t->cfg.final_rounds, t->cfg.final_sync_ms);
    for (size_t i = 0; i < k; i++) {
        ss_dense *g = t->groups[i];
        ss_dense_stats after = {0};
        dense_stats(g, &after);
        g->final.rounds = after.rounds;
        g->final.failed_rounds = after.failed_rounds;
        g->final.rejoins = after.rejoins;
        g->final.divergence = after.divergence;
    }
    keep_final_centres(t, st);
    /* Leaves every group; the replicas stay readable until close. */
    ss__engine_destroy(t->engine);
    t->engine = NULL;
    for (size_t i = 0; i < k; i++)
        t->groups[i]->group = NULL;
    ss__transport_destroy(t->transport);
    t->transport = NULL;
    return st;
}

ss_status ss_trainer_finish(ss_trainer *t) {
    ss__err_begin();
    ss__rpc_clear_failure();
    return ss__err_end(ps_call_failed(trainer_finish(t), "final rounds"));
}

ss_status ss_trainer_close(ss_trainer *t) {
    ss__err_begin();
    if (!t)
        return ss__err_end(SS_ERR_INVALID_ARGUMENT);
    ss__rpc_clear_failure();
    ss_status st = ps_call_failed(trainer_finish(t), "final rounds");
    trainer_free(t);
    return ss__err_end(st);
}
