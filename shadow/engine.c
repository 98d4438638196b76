#include "shadow/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/finite.h"
#include "common/grow.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "shadow/kernels.h"

#define GAP_RING             65536u /* sync-gap samples kept per group for quantiles */
#define DIVERGENCE_PERIOD_NS 100000000ull
#define SS__ENGINE_STILL_NS  2000000ull /* a replica this long unmoved is idle */

struct ss__engine_group {
    ss__engine *engine;
    char *name;
    ss__replica *replica;
    ss__sync_params params;
    uint64_t member;

    pthread_mutex_t round_lock; /* one round of a group at a time */
    float *buffers;             /* one allocation: snap, reply, delta */
    float *snap, *reply, *delta;
    ss__device_pin pin; /* buffers page-locked for a device replica */

    pthread_mutex_t stats_lock;
    uint64_t rounds, failed_rounds, last_iter, gap_count, last_round_ns, divergence_ns;
    uint64_t last_done_ns; /* ss__now_ns when the last round completed */
    uint64_t rejoins;
    uint64_t seen_iter, seen_ns;      /* the replica's count when it last moved, and when */
    _Atomic uint64_t last_contact_ns; /* last round or heartbeat that reached the others */
    double gap_sum, divergence;
    uint64_t *gaps; /* ring of the last GAP_RING gaps */

    ss__counter *m_rounds, *m_failed, *m_sent, *m_received, *m_iterations;
    ss__histogram *m_round_seconds, *m_gap;
    ss__gauge *m_divergence, *m_diverged;
    ss__histogram *m_copy_seconds; /* device groups: a round's copies and delta kernel */
    /* The replica holds NaN/Inf (seen in its snapshot, or refused by the
     * other side): no more rounds, said once in the log and in
     * shadowsync_sync_diverged; rounds return SS_ERR_NON_FINITE. */
    _Atomic bool diverged;
};

struct ss__engine {
    ss__transport *transport;
    ss__metrics *metrics;
    bool own_metrics;
    bool drop_metrics; /* holds its trainer's series in a shared registry */
    char *trainer;
    uint32_t nthreads;
    uint64_t round_interval_ns;
    uint64_t min_round_gap;
    uint64_t heartbeat_ns;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    ss__engine_group **groups;
    size_t ngroups, capgroups;
    pthread_t *threads;
    bool running, stopping, paused;
    uint32_t inflight;
    size_t next_group;
    _Atomic uint64_t rounds_total;
};

ss_status ss__engine_create(const ss__engine_config *cfg, ss__engine **out, char *why,
                            size_t whylen) {
    if (!cfg || !out || !cfg->transport || cfg->threads == 0 || cfg->threads > 256)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                        "an engine needs a transport and 1 to 256 threads");
    ss__engine *e = calloc(1, sizeof *e);
    if (!e)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for an engine");
    e->transport = cfg->transport;
    e->nthreads = cfg->threads;
    e->round_interval_ns = cfg->round_interval_us * 1000ull;
    e->min_round_gap = cfg->min_round_gap;
    e->heartbeat_ns = cfg->heartbeat_interval_ms * 1000000ull;
    e->trainer = strdup(cfg->trainer ? cfg->trainer : "local");
    if (!e->trainer) {
        free(e);
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for an engine");
    }
    if (cfg->metrics) {
        e->metrics = cfg->metrics;
        if (cfg->drop_metrics_at_destroy &&
            ss__metrics_hold(e->metrics, "trainer", e->trainer) == SS_OK)
            e->drop_metrics = true;
    } else {
        ss_status st = ss__metrics_create(&e->metrics, why, whylen);
        if (st != SS_OK) {
            free(e->trainer);
            free(e);
            return st;
        }
        e->own_metrics = true;
    }
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->cond, NULL);
    *out = e;
    return SS_OK;
}

static void group_free(ss__engine_group *g) {
    if (!g)
        return;
    pthread_mutex_destroy(&g->round_lock);
    pthread_mutex_destroy(&g->stats_lock);
    free(g->name);
    ss__device_unpin(&g->pin);
    free(g->buffers);
    free(g->gaps);
    free(g);
}

static ss_status register_metrics(ss__engine *e, ss__engine_group *g) {
    const char *labels[] = {
        "trainer", e->trainer, "group", g->name, "algo", ss__algo_name(g->params.algo), NULL};
    static const double round_bounds[] = {1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2,
                                          3e-2, 0.1,  0.3,  1,    3,    10};
    static const double gap_bounds[] = {0,   1,   2,    5,    10,   20,    50,  100,
                                        200, 500, 1000, 2000, 5000, 10000, 1e5, 1e6};
    ss_status st;
    if ((st = ss__metrics_counter(e->metrics, "shadowsync_sync_rounds_total",
                                  "Completed sync rounds.", labels, &g->m_rounds)) ||
        (st = ss__metrics_counter(e->metrics, "shadowsync_sync_round_failures_total",
                                  "Sync rounds abandoned whole after a transport error.", labels,
                                  &g->m_failed)) ||
        (st = ss__metrics_counter(e->metrics, "shadowsync_sync_sent_bytes_total",
                                  "Payload bytes sent by sync rounds.", labels, &g->m_sent)) ||
        (st = ss__metrics_counter(e->metrics, "shadowsync_sync_received_bytes_total",
                                  "Payload bytes received by sync rounds.", labels,
                                  &g->m_received)) ||
        (st = ss__metrics_counter(e->metrics, "shadowsync_trainer_iterations_total",
                                  "Trainer iterations seen by the shadow pool.", labels,
                                  &g->m_iterations)) ||
        (st = ss__metrics_histogram(e->metrics, "shadowsync_sync_round_seconds",
                                    "Duration of a completed sync round.", labels, round_bounds,
                                    sizeof round_bounds / sizeof *round_bounds,
                                    &g->m_round_seconds)) ||
        (st = ss__metrics_gauge(e->metrics, "shadowsync_sync_diverged",
                                "1 when the replica holds NaN or Inf: its rounds stopped.", labels,
                                &g->m_diverged)) ||
        (st = ss__metrics_histogram(e->metrics, "shadowsync_sync_gap_iterations",
                                    "Trainer iterations between two completed rounds of a replica.",
                                    labels, gap_bounds, sizeof gap_bounds / sizeof *gap_bounds,
                                    &g->m_gap)) ||
        (st = ss__metrics_gauge(e->metrics, "shadowsync_replica_divergence_ratio",
                                "|x - c| / |c| of the replica against the consensus at the last "
                                "round.",
                                labels, &g->m_divergence)))
        return st;
    if (ss__replica_device(g->replica) &&
        (st = ss__metrics_histogram(
             e->metrics, "shadowsync_device_copy_seconds",
             "Device groups: time a round spent in copies between host and GPU and in the delta "
             "kernel, on the shadow pool's stream.",
             labels, round_bounds, sizeof round_bounds / sizeof *round_bounds, &g->m_copy_seconds)))
        return st;
    return SS_OK;
}

ss_status ss__sync_params_check(const ss__sync_params *p, char *why, size_t whylen) {
    if (!p || (unsigned)p->algo > SS_ALGO_BMUF) {
        ss__why(why, whylen, "algo must be easgd, ma or bmuf");
        return SS_ERR_INVALID_ARGUMENT;
    }
    if (p->algo == SS_ALGO_EASGD && !ss__alpha_valid(p->alpha)) {
        ss__why(why, whylen, "alpha must be in " SS_ALPHA_RANGE " (S-EASGD elastic rate), not %g",
                (double)p->alpha);
        return SS_ERR_INVALID_ARGUMENT;
    }
    if (p->algo == SS_ALGO_BMUF && !ss__bmuf_params_valid(&p->bmuf)) {
        ss__why(why, whylen,
                "bmuf needs eta in [0, 1) and zeta in (0, 1 / (1 - eta)], not eta %g zeta %g",
                (double)p->bmuf.eta, (double)p->bmuf.zeta);
        return SS_ERR_INVALID_ARGUMENT;
    }
    return SS_OK;
}

/* Caller holds e->lock. */
static bool has_group(const ss__engine *e, const char *name) {
    for (size_t i = 0; i < e->ngroups; i++)
        if (!strcmp(e->groups[i]->name, name))
            return true;
    return false;
}

ss_status ss__engine_add_group(ss__engine *e, const char *name, ss__replica *replica,
                               const ss__sync_params *params, ss__engine_group **out) {
    if (!e || !name || !*name || !replica || !params || !out)
        return SS_ERR_INVALID_ARGUMENT;
    ss_status st = ss__sync_params_check(params, NULL, 0);
    if (st != SS_OK)
        return st;
    size_t n = ss__replica_size(replica);
    ss__engine_group *g = calloc(1, sizeof *g);
    if (!g)
        return SS_ERR_NO_MEMORY;
    pthread_mutex_init(&g->round_lock, NULL);
    pthread_mutex_init(&g->stats_lock, NULL);
    g->engine = e;
    g->name = strdup(name);
    g->replica = replica;
    g->params = *params;
    g->seen_iter = ss__replica_iterations(replica); /* not known to stand still yet */
    g->seen_ns = ss__now_ns();
    const size_t nbuffers = 3;
    g->buffers =
        n <= SIZE_MAX / sizeof(float) / nbuffers ? calloc(nbuffers * n, sizeof(float)) : NULL;
    g->gaps = malloc(GAP_RING * sizeof *g->gaps);
    if (!g->name || !g->buffers || !g->gaps) {
        group_free(g);
        return SS_ERR_NO_MEMORY;
    }
    g->snap = g->buffers;
    g->reply = g->buffers + n;
    g->delta = g->buffers + 2 * n;
    /* A device replica's copies go straight to and from these buffers
     * once they are page-locked; where that fails (a memlock limit) they
     * go through the group's staging buffers, as correct and slower. */
    ss__device_group *dev = ss__replica_device(replica);
    if (dev && ss__device_group_pin(dev, g->buffers, nbuffers * n, &g->pin) != SS_OK)
        SS_LOG_WARNF("engine", "event=device_pin_failed group=%s why=\"%s\"", name,
                     ss__device_last_error());
    st = register_metrics(e, g);
    if (st != SS_OK) {
        group_free(g);
        return st;
    }
    g->last_iter = ss__replica_iterations(replica);
    atomic_init(&g->last_contact_ns, ss__now_ns());
    /* The Join is an RPC (it may wait up to the RPC deadline on a slow
     * PS): it runs outside the engine lock, so that the shadow threads,
     * stats and other registrations never wait behind it. */
    pthread_mutex_lock(&e->lock);
    bool taken = has_group(e, name);
    pthread_mutex_unlock(&e->lock);
    if (taken) {
        group_free(g);
        return SS_ERR_EXISTS;
    }
    st = ss__transport_join_keyed(e->transport, name, n, g->params.member_key, &g->member);
    if (st != SS_OK) {
        group_free(g);
        return st;
    }
    pthread_mutex_lock(&e->lock);
    taken = has_group(e, name); /* a registration of the same name that finished first */
    if (!taken && !SS_GROW(e->groups, e->capgroups, e->ngroups, 8))
        st = SS_ERR_NO_MEMORY;
    if (taken || st != SS_OK) {
        pthread_mutex_unlock(&e->lock);
        ss__transport_leave(e->transport, name, g->member);
        group_free(g);
        return taken ? SS_ERR_EXISTS : st;
    }
    e->groups[e->ngroups++] = g;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
    *out = g;
    return SS_OK;
}

/* |s - c| / |c| of the round just completed, from the snapshot and the
 * transport's reply (in g->snap and g->reply), in one read of each. */
static double round_divergence(ss__engine_group *g, size_t n) {
    double dist2, center2;
    if (g->params.algo == SS_ALGO_EASGD) /* reply = alpha (s - c_old) */
        ss__kernel_easgd_divergence(g->snap, g->reply, g->params.alpha, n, &dist2, &center2);
    else /* reply = the round's mean */
        ss__kernel_dist2_norm2(g->snap, g->reply, n, &dist2, &center2);
    return center2 > 0.0 ? sqrt(dist2 / center2) : 0.0;
}

/* The other side no longer knows this member (it expired it, or a PS
 * restarted from a checkpoint): join again so the next round counts. The
 * caller holds g->round_lock. */
/* The other side forgot this member (NOT_FOUND: a PS restarted, or expired
 * it). Leave first: with several shards only the restarted one forgot it,
 * and an old member left on the others is a zombie that their MA/BMUF
 * rounds wait for until it expires (forever with no member timeout). */
static void rejoin(ss__engine_group *g) {
    ss__engine *e = g->engine;
    ss__transport_leave(e->transport, g->name, g->member); /* NOT_FOUND where forgotten */
    uint64_t member;
    ss_status st = ss__transport_join_keyed(e->transport, g->name, ss__replica_size(g->replica),
                                            g->params.member_key, &member);
    if (st == SS_OK) {
        g->member = member;
        pthread_mutex_lock(&g->stats_lock);
        g->rejoins++;
        pthread_mutex_unlock(&g->stats_lock);
    }
    SS_LOG_INFOF("engine", "event=rejoin trainer=%s group=%s status=%s", e->trainer, g->name,
                 ss_status_name(st));
}

/* A device replica's copy or kernel failed (host replicas cannot): the
 * round fails, and the log says which call on which device. */
static void device_failed(ss__engine_group *g, const char *what) {
    SS_LOG_ERRORF("engine", "event=device_error trainer=%s group=%s during=\"%s\" why=\"%s\"",
                  g->engine->trainer, g->name, what, ss__device_last_error());
}

/* One round; the caller holds g->round_lock. A transport error abandons the
 * round whole: nothing is applied to the replica. */
static ss_status run_round_locked(ss__engine_group *g) {
    ss__engine *e = g->engine;
    const size_t n = ss__replica_size(g->replica);
    if (atomic_load(&g->diverged))
        return SS_ERR_NON_FINITE; /* said once already; nothing to retry */
    const uint64_t t0 = ss__now_ns();
    ss__device_group *dev = ss__replica_device(g->replica);
    const uint64_t copy0 = dev ? ss__device_group_copy_ns(dev) : 0;
    ss_status st = ss__replica_snapshot(g->replica, g->snap);
    if (st != SS_OK) {
        device_failed(g, "snapshot"); /* nothing sent, nothing to apply */
    } else if (!ss__all_finite(g->snap, n)) {
        st = SS_ERR_NON_FINITE; /* the other side would refuse it */
    } else if (g->params.algo == SS_ALGO_EASGD) {
        /* Applied even when the exchange failed: reply then holds what the
         * other side did apply (zeros elsewhere), and x + c stays conserved. */
        st = ss__transport_easgd_exchange(e->transport, g->name, g->member, g->snap,
                                          g->params.alpha, g->reply, n);
        ss_status applied = ss__replica_add_scaled(g->replica, g->reply, -1.0f);
        if (applied != SS_OK) {
            device_failed(g, "applying the elastic reply"); /* the PS moved c alone */
            st = applied;
        }
    } else {
        /* S-MA: reply = the round's mean. S-BMUF: the aggregator holds the
         * block state and replies with the block start b. Either way the
         * replica moves by (reply - s). */
        ss__round_result rr;
        const ss__bmuf_params *bmuf = g->params.algo == SS_ALGO_BMUF ? &g->params.bmuf : NULL;
        st = ss__transport_round(e->transport, g->name, g->member, g->snap, bmuf, g->reply, n, &rr);
        if (st == SS_OK)
            st = ss__ma_delta(g->reply, g->snap, g->delta, n);
        if (st == SS_OK && (st = ss__replica_add_scaled(g->replica, g->delta, 1.0f)) != SS_OK)
            device_failed(g, "applying the round's delta");
    }
    const uint64_t t1 = ss__now_ns();
    const size_t bytes = ss__transport_wire_bytes(e->transport, n); /* compressed: less */
    /* Divergence is for dashboards: measured at most every
     * DIVERGENCE_PERIOD_NS, it costs the shadow thread an extra read of
     * the snapshot and the reply, which at thousands of rounds/s is memory
     * bandwidth the workers feel. */
    bool measure = st == SS_OK && (g->rounds == 0 || t1 - g->divergence_ns >= DIVERGENCE_PERIOD_NS);
    double divergence = measure ? round_divergence(g, n) : 0.0;
    pthread_mutex_lock(&g->stats_lock);
    if (st != SS_OK) {
        g->failed_rounds++;
        pthread_mutex_unlock(&g->stats_lock);
        ss__counter_add(g->m_failed, 1);
        SS_LOG_DEBUGF("engine", "event=round_failed trainer=%s group=%s status=%s", e->trainer,
                      g->name, ss_status_name(st));
        if (st == SS_ERR_NOT_FOUND)
            rejoin(g);
        if (st == SS_ERR_NON_FINITE && !atomic_exchange(&g->diverged, true)) {
            ss__gauge_set(g->m_diverged, 1);
            /* Leave, so that the others' MA/BMUF rounds stop waiting for it. */
            ss__transport_leave(e->transport, g->name, g->member);
            SS_LOG_ERRORF("engine",
                          "event=replica_diverged trainer=%s group=%s why=\"the replica holds NaN "
                          "or Inf; its rounds stop (lower the learning rate or BMUF zeta)\"",
                          e->trainer, g->name);
        }
        return st;
    }
    atomic_store_explicit(&g->last_contact_ns, t1, memory_order_relaxed);
    uint64_t it = ss__replica_iterations(g->replica);
    uint64_t gap = it - g->last_iter;
    g->last_iter = it;
    g->gaps[g->gap_count % GAP_RING] = gap;
    g->gap_count++;
    g->gap_sum += (double)gap;
    g->rounds++;
    g->last_round_ns = t1 - t0;
    g->last_done_ns = t1;
    if (measure) {
        g->divergence = divergence;
        g->divergence_ns = t1;
    }
    pthread_mutex_unlock(&g->stats_lock);

    atomic_fetch_add_explicit(&e->rounds_total, 1, memory_order_relaxed);
    ss__counter_add(g->m_rounds, 1);
    ss__counter_add(g->m_sent, bytes);
    ss__counter_add(g->m_received, bytes);
    ss__counter_add(g->m_iterations, gap);
    ss__histogram_observe(g->m_round_seconds, (double)(t1 - t0) * 1e-9);
    ss__histogram_observe(g->m_gap, (double)gap);
    if (dev)
        ss__histogram_observe(g->m_copy_seconds,
                              (double)(ss__device_group_copy_ns(dev) - copy0) * 1e-9);
    if (measure)
        ss__gauge_set(g->m_divergence, divergence);
    return SS_OK;
}

ss_status ss__engine_run_round(ss__engine *e, ss__engine_group *g) {
    if (!e || !g || g->engine != e)
        return SS_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&g->round_lock);
    ss_status st = run_round_locked(g);
    pthread_mutex_unlock(&g->round_lock);
    return st;
}

/* True when the group's replica has not advanced enough for a new round.
 * Also notes when the replica last moved (see idle_contact). */
static bool group_idle(const ss__engine *e, ss__engine_group *g) {
    if (atomic_load(&g->diverged))
        return true; /* no more rounds: a shadow thread must not spin on it */
    if (e->min_round_gap == 0)
        return false;
    pthread_mutex_lock(&g->stats_lock);
    const uint64_t it = ss__replica_iterations(g->replica);
    const uint64_t since = it - g->last_iter;
    if (it != g->seen_iter) { /* the clock is read only when it moved */
        g->seen_iter = it;
        g->seen_ns = ss__now_ns();
    }
    pthread_mutex_unlock(&g->stats_lock);
    return since < e->min_round_gap;
}

/* Whether the replica has stood still for SS__ENGINE_STILL_NS. */
static bool standing_still(ss__engine_group *g) {
    pthread_mutex_lock(&g->stats_lock);
    const uint64_t seen_ns = g->seen_ns;
    pthread_mutex_unlock(&g->stats_lock);
    return ss__now_ns() - seen_ns >= SS__ENGINE_STILL_NS;
}

/* An idle group (called without e->lock; takes the group's round lock if
 * free): tells the others it is alive, so they do not expire it, and
 * returns whether a round they opened (MA/BMUF, or a host's local half)
 * waits for it.
 *
 * A replica that stands still (a trainer done with its share of an epoch,
 * or out of data) takes part in such a round without moving: one done
 * early held 3 others' rounds open for ~20 of their steps (ctr-train, 4
 * in-process trainers). A moving one waits for its gap: joining at once
 * made rounds 5x as frequent and cost 12% of examples/s; 2 ms still cost
 * ~3% (rounds 2.5x as frequent) and was the best held-out NE of 2, 5 and
 * 10 ms. The transport is asked outside e->lock: through a PS it is a
 * call on the wire. */
static bool idle_contact(ss__engine *e, ss__engine_group *g) {
    if (atomic_load(&g->diverged) || pthread_mutex_trylock(&g->round_lock) != 0)
        return false; /* a diverged member has left; a busy group is not idle */
    /* (Only reached with min_round_gap > 0: with 0 no group is idle.) */
    const bool waits =
        standing_still(g) && ss__transport_round_waiting(e->transport, g->name, g->member);
    uint64_t now = ss__now_ns();
    if (!waits && e->heartbeat_ns &&
        now - atomic_load_explicit(&g->last_contact_ns, memory_order_relaxed) >= e->heartbeat_ns) {
        ss_status st = ss__transport_heartbeat(e->transport, g->name, g->member);
        if (st == SS_OK)
            atomic_store_explicit(&g->last_contact_ns, now, memory_order_relaxed);
        else if (st == SS_ERR_NOT_FOUND)
            rejoin(g);
    }
    pthread_mutex_unlock(&g->round_lock);
    return waits;
}

/* Sleep after the n-th failed round in a row: 1 ms doubling to 256 ms, so
 * a dead server is retried quickly at first and not hammered after. */
static uint64_t failure_backoff_ns(uint32_t fails) {
    return 1000000ull << (fails < 8 ? fails : 8);
}

static void *shadow_thread(void *arg) {
    ss__engine *e = arg;
    size_t busy_in_a_row = 0;
    uint32_t fails = 0;
    pthread_mutex_lock(&e->lock);
    while (!e->stopping) {
        if (e->paused || e->ngroups == 0) {
            pthread_cond_wait(&e->cond, &e->lock);
            continue;
        }
        ss__engine_group *g = e->groups[e->next_group++ % e->ngroups];
        bool waited_for = false; /* an open round waits for this still replica */
        if (group_idle(e, g)) {
            pthread_mutex_unlock(&e->lock);
            waited_for = idle_contact(e, g);
            pthread_mutex_lock(&e->lock);
        }
        if ((!waited_for && group_idle(e, g)) || pthread_mutex_trylock(&g->round_lock) != 0) {
            /* Nothing new to sync, or another thread (or a foreground
             * round) has this group. */
            bool all_busy = ++busy_in_a_row >= e->ngroups;
            pthread_mutex_unlock(&e->lock);
            if (all_busy) {
                ss__sleep_ns(100000);
                busy_in_a_row = 0;
            }
            pthread_mutex_lock(&e->lock);
            continue;
        }
        busy_in_a_row = 0;
        e->inflight++;
        pthread_mutex_unlock(&e->lock);

        ss_status st = run_round_locked(g);
        pthread_mutex_unlock(&g->round_lock);
        if (st != SS_OK) {
            ss__sleep_ns(failure_backoff_ns(fails++)); /* the transport is failing */
        } else {
            fails = 0;
            if (e->round_interval_ns)
                ss__sleep_ns(e->round_interval_ns);
        }

        pthread_mutex_lock(&e->lock);
        if (--e->inflight == 0)
            pthread_cond_broadcast(&e->cond);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

ss_status ss__engine_start(ss__engine *e, char *why, size_t whylen) {
    if (!e)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "no engine");
    pthread_mutex_lock(&e->lock);
    if (e->running) {
        pthread_mutex_unlock(&e->lock);
        return ss__fail(why, whylen, SS_ERR_STATE, "the engine runs already");
    }
    e->threads = calloc(e->nthreads, sizeof *e->threads);
    if (!e->threads) {
        pthread_mutex_unlock(&e->lock);
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for %u shadow threads",
                        e->nthreads);
    }
    e->stopping = false;
    e->paused = false;
    e->running = true;
    pthread_mutex_unlock(&e->lock);
    for (uint32_t i = 0; i < e->nthreads; i++) {
        if (pthread_create(&e->threads[i], NULL, shadow_thread, e) != 0) {
            pthread_mutex_lock(&e->lock);
            e->stopping = true;
            pthread_cond_broadcast(&e->cond);
            pthread_mutex_unlock(&e->lock);
            for (uint32_t j = 0; j < i; j++)
                pthread_join(e->threads[j], NULL);
            free(e->threads);
            e->threads = NULL;
            e->running = false;
            return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no thread for shadow thread %u of %u",
                            i + 1, e->nthreads);
        }
    }
    SS_LOG_DEBUGF("engine", "event=started trainer=%s threads=%u", e->trainer, e->nthreads);
    return SS_OK;
}

ss_status ss__engine_pause(ss__engine *e) {
    if (!e)
        return SS_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&e->lock);
    if (!e->running) {
        pthread_mutex_unlock(&e->lock);
        return SS_ERR_STATE;
    }
    e->paused = true;
    while (e->inflight > 0)
        pthread_cond_wait(&e->cond, &e->lock);
    pthread_mutex_unlock(&e->lock);
    return SS_OK;
}

ss_status ss__engine_resume(ss__engine *e) {
    if (!e)
        return SS_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&e->lock);
    ss_status st = e->running ? SS_OK : SS_ERR_STATE;
    e->paused = false;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
    return st;
}

ss_status ss__engine_stop(ss__engine *e) {
    if (!e)
        return SS_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&e->lock);
    if (!e->running) {
        pthread_mutex_unlock(&e->lock);
        return SS_OK;
    }
    e->stopping = true;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
    for (uint32_t i = 0; i < e->nthreads; i++)
        pthread_join(e->threads[i], NULL);
    free(e->threads);
    e->threads = NULL;
    pthread_mutex_lock(&e->lock);
    e->running = false;
    e->paused = false;
    pthread_mutex_unlock(&e->lock);
    SS_LOG_DEBUGF("engine", "event=stopped trainer=%s rounds=%llu", e->trainer,
                  (unsigned long long)ss__engine_rounds(e));
    return SS_OK;
}

void ss__engine_destroy(ss__engine *e) {
    if (!e)
        return;
    ss__engine_stop(e);
    for (size_t i = 0; i < e->ngroups; i++) {
        ss__transport_leave(e->transport, e->groups[i]->name, e->groups[i]->member);
        group_free(e->groups[i]);
    }
    free(e->groups);
    if (e->own_metrics)
        ss__metrics_destroy(e->metrics);
    else if (e->drop_metrics) /* after the groups: nobody uses their series now */
        ss__metrics_drop(e->metrics, "trainer", e->trainer);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->cond);
    free(e->trainer);
    free(e);
}

ss_status ss__engine_final_rounds(ss__engine *e, uint32_t rounds, uint32_t min_ms) {
    if (!e)
        return SS_ERR_INVALID_ARGUMENT;
    uint64_t until = ss__now_ns() + (uint64_t)min_ms * 1000000ull;
    uint32_t failed_in_a_row = 0;
    ss_status st = SS_OK;
    for (uint32_t r = 0; r < rounds || ss__now_ns() < until; r++) {
        st = SS_OK;
        for (size_t i = 0;; i++) {
            pthread_mutex_lock(&e->lock); /* groups may be added (and moved) meanwhile */
            ss__engine_group *g = i < e->ngroups ? e->groups[i] : NULL;
            pthread_mutex_unlock(&e->lock);
            if (!g)
                break;
            ss_status s = ss__engine_run_round(e, g);
            if (st == SS_OK)
                st = s;
        }
        if (st == SS_OK) {
            failed_in_a_row = 0;
            continue;
        }
        SS_LOG_WARNF("engine", "event=final_round_failed trainer=%s status=%s", e->trainer,
                     ss_status_name(st));
        if (++failed_in_a_row == 3)
            break;
        ss__sleep_ns(10000000ull);
    }
    return st;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

ss_status ss__engine_group_stats(ss__engine_group *g, ss__group_stats *out) {
    if (!g || !out)
        return SS_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&g->stats_lock);
    out->rounds = g->rounds;
    out->failed_rounds = g->failed_rounds;
    out->rejoins = g->rejoins;
    out->divergence = g->divergence;
    out->last_round_ns = g->last_round_ns;
    out->last_done_ns = g->last_done_ns;
    size_t k = g->gap_count < GAP_RING ? g->gap_count : GAP_RING;
    out->gap_mean = g->gap_count ? g->gap_sum / (double)g->gap_count : 0.0;
    uint64_t *sorted = k ? malloc(k * sizeof *sorted) : NULL;
    if (sorted)
        memcpy(sorted, g->gaps, k * sizeof *sorted);
    pthread_mutex_unlock(&g->stats_lock);
    if (k && !sorted)
        return SS_ERR_NO_MEMORY;
    if (k) {
        qsort(sorted, k, sizeof *sorted, cmp_u64);
        /* Nearest-rank quantiles over the retained samples. */
        out->gap_p50 = sorted[(k * 50 + 99) / 100 - 1];
        out->gap_p99 = sorted[(k * 99 + 99) / 100 - 1];
        out->gap_max = sorted[k - 1];
    }
    free(sorted);
    return SS_OK;
}

const char *ss__engine_group_name(const ss__engine_group *g) {
    return g ? g->name : NULL;
}

uint64_t ss__engine_rounds(const ss__engine *e) {
    return atomic_load_explicit(&((ss__engine *)e)->rounds_total, memory_order_relaxed);
}
