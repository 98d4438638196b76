/* The ShadowSync cluster model (model.h) on the event engine (engine.h). */
#include "cluster_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/names.h"
#include "common/strbuf.h"
#include "events.h"
#include "rpc/dense/grpc_transport.h"
#include "trainer-hooks/defaults.h"

typedef struct model model;
typedef struct trainer trainer;

/* One trainer's part of a round for one chunk group: the transport cuts
 * each shard's range into chunks, each a group of its own on its server,
 * all sent at once (rpc/dense/grpc_transport.c). */
typedef struct chunk_op {
    trainer *t;
    uint32_t group; /* index into model.groups */
    int stage;
    int forks; /* transfers of this stage still running */
    /* The CPU step being run: its gate, pool and work. */
    ss__sim_gate *gate;
    ss__sim_pool *pool;
    double work;
} chunk_op;

/* An S-MA/S-BMUF round being gathered for one chunk group. */
typedef struct ma_round {
    chunk_op **ops;
    uint32_t arrived, cap;
    uint64_t id;
} ma_round;

typedef struct ps_shard {
    ss__sim_pool *cpu, *in, *out;
    ss__sim_gate *threads; /* the PS's request threads */
} ps_shard;

/* A chunk group: a range of floats on one shard. */
typedef struct chunk_group {
    model *m;
    ps_shard *ps;
    double floats;
    ma_round round;
} chunk_group;

struct trainer {
    model *m;
    uint32_t host;
    uint64_t steps, last_iter;
    double deadline, round_start;
    int in_round;
    uint32_t pending; /* chunks of the current round not done */
    uint32_t *next_k; /* per shard: the next chunk of the round to start */
    uint32_t *gaps;
    size_t ngaps, cap;
    chunk_op *ops;
    ss__sim_gate *thread; /* its shadow thread (or itself, foreground) */
};

struct model {
    const ss__sim_config *cfg;
    ss_sim *sim;
    trainer *trainers;
    ps_shard *shards;
    chunk_group *groups;
    uint32_t ngroups;
    uint32_t chunks; /* per shard: group s * chunks + k is shard s's chunk k */
    ss__sim_pool **host_cpu, **host_up, **host_down;
    double rounds, round_time_sum;
    int failed; /* out of memory inside an event */
};

static void check(model *m, int rc) {
    if (rc != 0)
        m->failed = 1;
}

/* ---- the round's stages ---- */

enum {
    STAGE_SEND_CPU,  /* client: half its CPU, on its thread, before sending */
    STAGE_UPLOAD,    /* host link up + PS link in */
    STAGE_PS_IN,     /* a PS thread: all its CPU (EASGD) or the accumulate half (MA) */
    STAGE_MA_WAIT,   /* MA: until the round closes */
    STAGE_PS_OUT,    /* MA: a PS thread, the reply half */
    STAGE_DOWNLOAD,  /* PS link out + host link down */
    STAGE_APPLY_CPU, /* client: the other half */
    STAGE_DONE,
};

static void op_step(ss_sim *sim, void *arg);
static void launch(trainer *t, uint32_t g);
static void round_done(trainer *t);
static void ma_arrived(chunk_group *g, chunk_op *op);

static void fork_done(ss_sim *sim, void *arg) {
    chunk_op *op = arg;
    if (--op->forks > 0)
        return;
    const ss__sim_config *c = op->t->m->cfg;
    /* The transfer is in after the wire's latency; the reply's end also
     * pays the second half of the RPC's software cost. */
    const double fixed = op->stage == STAGE_APPLY_CPU ? c->costs.rpc_fixed_s / 2 : 0;
    check(op->t->m, ss__sim_at(sim, c->latency_s + fixed, op_step, op));
}

static void transfer(model *m, chunk_op *op, ss__sim_pool *a, ss__sim_pool *b) {
    const double work = op->t->m->groups[op->group].floats * sizeof(float) * m->cfg->wire_ratio /
                        m->cfg->link_bytes_per_s;
    op->forks = 2;
    check(m, ss__sim_pool_submit(a, work, fork_done, op));
    check(m, ss__sim_pool_submit(b, work, fork_done, op));
}

static int is_ma(const ss__sim_config *c) {
    return c->mode == SS_SIM_MA || c->mode == SS_SIM_BMUF;
}

/* CPU work on a thread: take the gate (a PS request thread, the trainer's
 * shadow thread), run the work on the machine's cores, give the gate
 * back, go on with the next stage. */
static void cpu_done(ss_sim *sim, void *arg) {
    chunk_op *op = arg;
    check(op->t->m, ss__sim_gate_release(op->gate));
    op_step(sim, op);
}

static void cpu_granted(ss_sim *sim, void *arg) {
    (void)sim;
    chunk_op *op = arg;
    check(op->t->m, ss__sim_pool_submit(op->pool, op->work, cpu_done, op));
}

static void on_thread(chunk_op *op, ss__sim_gate *gate, ss__sim_pool *pool, double work) {
    op->gate = gate;
    op->pool = pool;
    op->work = work;
    check(op->t->m, ss__sim_gate_acquire(gate, cpu_granted, op));
}

/* Runs the op's current stage; its completion calls op_step again. */
static void op_step(ss_sim *sim, void *arg) {
    (void)sim;
    chunk_op *op = arg;
    trainer *t = op->t;
    model *m = t->m;
    const ss__sim_config *c = m->cfg;
    chunk_group *g = &m->groups[op->group];
    ps_shard *ps = g->ps;
    const double client = c->costs.client_cpu_s_per_float * g->floats / 2;
    const double server = c->costs.ps_cpu_s_per_float * g->floats;
    switch (op->stage++) {
    case STAGE_SEND_CPU:
        on_thread(op, t->thread, m->host_cpu[t->host], client);
        break;
    case STAGE_UPLOAD:
        transfer(m, op, m->host_up[t->host], ps->in);
        break;
    case STAGE_PS_IN:
        if (!is_ma(c))
            op->stage = STAGE_DOWNLOAD; /* EASGD: the exchange is one step */
        on_thread(op, ps->threads, ps->cpu, is_ma(c) ? server / 2 : server);
        break;
    case STAGE_MA_WAIT:
        ma_arrived(g, op); /* op_step again when the round closes */
        break;
    case STAGE_PS_OUT:
        on_thread(op, ps->threads, ps->cpu, server / 2);
        break;
    case STAGE_DOWNLOAD:
        transfer(m, op, ps->out, m->host_down[t->host]);
        break;
    case STAGE_APPLY_CPU:
        on_thread(op, t->thread, m->host_cpu[t->host], client);
        break;
    default: {
        const uint32_t s = op->group / m->chunks; /* its shard's next chunk */
        if (t->next_k[s] < m->chunks)
            launch(t, s * m->chunks + t->next_k[s]++);
        if (--t->pending == 0)
            round_done(t);
        break;
    }
    }
}

/* ---- S-MA / S-BMUF rounds of a chunk group ---- */

static void ma_close(chunk_group *g) {
    ma_round *r = &g->round;
    chunk_op **ops = r->ops;
    const uint32_t n = r->arrived;
    /* A new round starts empty; the closed one's members get their reply. */
    r->ops = NULL;
    r->arrived = r->cap = 0;
    r->id++;
    for (uint32_t i = 0; i < n; i++)
        op_step(g->m->sim, ops[i]);
    free(ops);
}

/* The event's tag: the round it was set for. */
static void ma_deadline(ss_sim *sim, void *arg) {
    chunk_group *g = arg;
    if (ss__sim_tag(sim) == g->round.id && g->round.arrived > 0)
        ma_close(g);
}

/* op's snapshot arrived and was accumulated: the round closes when every
 * member's has (or at its deadline). */
static void ma_arrived(chunk_group *g, chunk_op *op) {
    ma_round *r = &g->round;
    model *m = g->m;
    if (r->arrived == r->cap) {
        uint32_t cap = r->cap ? r->cap * 2 : 16;
        chunk_op **p = realloc(r->ops, sizeof *p * cap);
        if (!p) {
            m->failed = 1;
            return;
        }
        r->ops = p;
        r->cap = cap;
    }
    r->ops[r->arrived++] = op;
    if (r->arrived == 1)
        check(m, ss__sim_at_tagged(m->sim, m->cfg->ma_deadline_s, ma_deadline, g, r->id));
    if (r->arrived == m->cfg->trainers)
        ma_close(g);
}

/* ---- trainers ---- */

static void step_due(ss_sim *sim, void *arg);

static void launch(trainer *t, uint32_t g) {
    t->ops[g] = (chunk_op){.t = t, .group = g, .stage = STAGE_SEND_CPU};
    /* The RPC's software cost before the wire, then the stages. */
    check(t->m, ss__sim_at(t->m->sim, t->m->cfg->costs.rpc_fixed_s / 2, op_step, &t->ops[g]));
}

static void start_round(trainer *t) {
    model *m = t->m;
    t->in_round = 1;
    t->round_start = ss__sim_now(m->sim);
    t->pending = m->ngroups;
    uint32_t w = m->cfg->window;
    if (w && is_ma(m->cfg) && w < m->cfg->round_window)
        w = m->cfg->round_window;
    if (!w || w > m->chunks)
        w = m->chunks;
    for (uint32_t s = 0; s < m->cfg->ps; s++) {
        t->next_k[s] = w;
        for (uint32_t k = 0; k < w; k++)
            launch(t, s * m->chunks + k);
    }
}

static void next_step(trainer *t) {
    const ss__sim_config *c = t->m->cfg;
    const double now = ss__sim_now(t->m->sim);
    /* Paced: the next deadline, or from now if this step ran past it. */
    double next = t->deadline + c->step_s;
    if (next <= now)
        next = now + c->step_s;
    t->deadline = next;
    if (next <= c->seconds)
        check(t->m, ss__sim_at(t->m->sim, next - now, step_due, t));
}

static void round_done(trainer *t) {
    model *m = t->m;
    const double now = ss__sim_now(m->sim);
    if (now <= m->cfg->seconds) {
        if (t->ngaps == t->cap) {
            size_t cap = t->cap ? t->cap * 2 : 64;
            uint32_t *g = realloc(t->gaps, sizeof *g * cap);
            if (!g) {
                m->failed = 1;
                return;
            }
            t->gaps = g;
            t->cap = cap;
        }
        t->gaps[t->ngaps++] = (uint32_t)(t->steps - t->last_iter);
        m->rounds++;
        m->round_time_sum += now - t->round_start;
    }
    t->last_iter = t->steps;
    t->in_round = 0;
    if (m->cfg->mode == SS_SIM_FOREGROUND) {
        /* The trainer waited for it: its next step's compute starts now. */
        t->deadline = now;
        next_step(t);
    } else if (m->cfg->min_round_gap == 0)
        start_round(t);
}

static void step_done(ss_sim *sim, void *arg) {
    trainer *t = arg;
    const ss__sim_config *c = t->m->cfg;
    if (ss__sim_now(sim) > c->seconds)
        return;
    t->steps++;
    if (c->mode == SS_SIM_FOREGROUND) {
        if (t->steps % c->sync_every == 0) {
            start_round(t);
            return; /* the next step after the round */
        }
    } else if (c->mode != SS_SIM_NONE && !t->in_round &&
               t->steps - t->last_iter >= c->min_round_gap) {
        start_round(t);
    }
    next_step(t);
}

static void step_due(ss_sim *sim, void *arg) {
    trainer *t = arg;
    (void)sim;
    if (t->m->cfg->costs.step_cpu_s > 0)
        check(t->m, ss__sim_pool_submit(t->m->host_cpu[t->host], t->m->cfg->costs.step_cpu_s,
                                        step_done, t));
    else
        step_done(t->m->sim, t);
}

/* ---- setup and results ---- */

void ss__sim_config_init(ss__sim_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->trainers = 1;
    cfg->per_host = 8;
    cfg->ps = 1;
    cfg->dense_floats = 1048576;
    cfg->step_s = 0.010;
    cfg->batch = 1024;
    cfg->mode = SS_SIM_EASGD;
    cfg->sync_every = SS_DEFAULT_SYNC_EVERY; /* the library's, as a real trainer's */
    cfg->min_round_gap = SS_DEFAULT_MIN_ROUND_GAP;
    cfg->ma_deadline_s = 1.0;
    /* Measured on the emulated cluster (bench/sim-calibrate.sh, S-EASGD
     * through an agent, 1M floats): see BENCHMARKS.md. */
    cfg->costs.step_cpu_s = 60e-6;
    cfg->costs.client_cpu_s_per_float = 8e-9;
    cfg->costs.ps_cpu_s_per_float = 6e-9;
    cfg->costs.rpc_fixed_s = 200e-6;
    cfg->link_bytes_per_s = 10e9 / 8;
    cfg->wire_ratio = 1.0;
    cfg->latency_s = 50e-6;
    cfg->host_cores = 16;
    cfg->ps_cores = 16;
    cfg->ps_threads = 2;
    /* the transport's own defaults on a short path */
    cfg->chunk_floats = SS_GRPC_CHUNK_FLOATS;
    cfg->window = SS_GRPC_WINDOW;
    cfg->round_window = SS_GRPC_ROUND_WINDOW;
    cfg->start_spread_s = 0.1;
    cfg->seconds = 10;
}

int ss__sim_mode_parse(const char *s) {
    static const char *const names[] = {"none", "easgd", "ma", "bmuf", "fg"};
    return ss__name_index(s, names, 5);
}

static const char *validate(const ss__sim_config *c) {
    if (c->trainers < 1 || c->trainers > 1000000)
        return "trainers must be 1..1000000";
    if (c->per_host < 1)
        return "trainers per host must be >= 1";
    if (c->ps < 1 || c->ps > 100000)
        return "ps must be 1..100000";
    if (!(c->dense_floats >= 1))
        return "dense floats must be >= 1";
    if (!(c->step_s > 0))
        return "the step time must be > 0";
    if (c->batch < 1)
        return "batch must be >= 1";
    if (c->mode < SS_SIM_NONE || c->mode > SS_SIM_FOREGROUND)
        return "unknown mode";
    if (c->mode == SS_SIM_FOREGROUND && c->sync_every < 1)
        return "foreground sync_every must be >= 1";
    if (!(c->seconds > 0) || c->seconds > 1e6)
        return "seconds must be in (0, 1e6]";
    if (!(c->link_bytes_per_s > 0) || !(c->ps_link_bytes_per_s >= 0))
        return "the link rates must be > 0";
    if (!(c->wire_ratio > 0) || c->wire_ratio > 1)
        return "the wire ratio must be in (0, 1]";
    if (!(c->start_spread_s >= 0))
        return "start spread must be >= 0";
    if (c->ps_threads < 1)
        return "ps threads must be >= 1";
    if (!(c->chunk_floats >= 1) || c->dense_floats / c->ps / c->chunk_floats > 1e6)
        return "chunk floats must be >= 1 and at most 1M chunks per shard";
    if (!(c->latency_s >= 0) || !(c->ma_deadline_s > 0))
        return "latency must be >= 0 and the MA deadline > 0";
    const ss__sim_costs *k = &c->costs;
    if (!(k->step_cpu_s >= 0) || !(k->client_cpu_s_per_float >= 0) ||
        !(k->ps_cpu_s_per_float >= 0) || !(k->rpc_fixed_s >= 0))
        return "costs must be >= 0";
    if (c->min_round_gap == 0 && k->rpc_fixed_s + c->latency_s <= 0)
        return "min_round_gap 0 needs rounds that take time (rpc_fixed_s or latency > 0)";
    if (c->shared_cores > 0)
        return NULL;
    if (!(c->host_cores > 0) || !(c->ps_cores > 0))
        return "host and PS cores must be > 0 (or shared cores set)";
    return NULL;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest rank: the smallest value with at least q of them at or below. */
static uint32_t quantile(const uint32_t *v, size_t n, double q) {
    size_t r = (size_t)ceil(q * (double)n);
    return v[r > 0 ? r - 1 : 0];
}

static void results(model *m, ss__sim_result *out) {
    const ss__sim_config *c = m->cfg;
    const uint32_t n = c->trainers;
    double steps = 0, *p50 = malloc(sizeof *p50 * n);
    uint32_t with_gaps = 0;
    memset(out, 0, sizeof *out);
    for (uint32_t i = 0; i < n; i++) {
        trainer *t = &m->trainers[i];
        steps += (double)t->steps;
        if (t->ngaps == 0 || !p50)
            continue;
        qsort(t->gaps, t->ngaps, sizeof *t->gaps, cmp_u32);
        p50[with_gaps++] = quantile(t->gaps, t->ngaps, 0.5);
        out->gap_p99 = fmax(out->gap_p99, quantile(t->gaps, t->ngaps, 0.99));
        out->gap_max = fmax(out->gap_max, t->gaps[t->ngaps - 1]);
    }
    if (with_gaps > 0) {
        qsort(p50, with_gaps, sizeof *p50, cmp_double);
        out->gap_p50 =
            with_gaps % 2 ? p50[with_gaps / 2] : (p50[with_gaps / 2 - 1] + p50[with_gaps / 2]) / 2;
    }
    free(p50);
    out->examples_per_s = steps * c->batch / c->seconds;
    out->efficiency = out->examples_per_s / ((double)n * c->batch / c->step_s);
    out->rounds = m->rounds;
    out->round_s_mean = m->rounds > 0 ? m->round_time_sum / m->rounds : 0;
    const double ps_servers = c->shared_cores > 0 ? c->shared_cores : c->ps_cores;
    for (uint32_t s = 0; s < c->ps; s++) {
        ps_shard *ps = &m->shards[s];
        out->ps_cpu_util =
            fmax(out->ps_cpu_util, ss__sim_pool_busy(ps->cpu) / ps_servers / c->seconds);
        out->ps_link_util =
            fmax(out->ps_link_util,
                 fmax(ss__sim_pool_busy(ps->in), ss__sim_pool_busy(ps->out)) / c->seconds);
    }
    const uint32_t hosts = (n + c->per_host - 1) / c->per_host;
    const double host_servers = c->shared_cores > 0 ? c->shared_cores : c->host_cores;
    for (uint32_t h = 0; h < hosts; h++)
        out->host_cpu_util =
            fmax(out->host_cpu_util, ss__sim_pool_busy(m->host_cpu[h]) / host_servers / c->seconds);
}

static void free_model(model *m) {
    if (m->trainers)
        for (uint32_t i = 0; i < m->cfg->trainers; i++) {
            free(m->trainers[i].gaps);
            free(m->trainers[i].ops);
            free(m->trainers[i].next_k);
        }
    if (m->groups)
        for (uint32_t g = 0; g < m->ngroups; g++)
            free(m->groups[g].round.ops);
    free(m->trainers);
    free(m->shards);
    free(m->groups);
    free(m->host_cpu);
    free(m->host_up);
    free(m->host_down);
    ss__sim_destroy(m->sim);
}

ss_status ss__sim_cluster(const ss__sim_config *cfg, ss__sim_result *out, char *why,
                          size_t whylen) {
    const char *bad = cfg && out ? validate(cfg) : "no config or result";
    if (bad)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "%s", bad);
    model m = {.cfg = cfg};
    const uint32_t hosts = (cfg->trainers + cfg->per_host - 1) / cfg->per_host;
    /* Each shard's range cut into chunks of at most chunk_floats. */
    const double per_shard = cfg->dense_floats / cfg->ps;
    const uint32_t chunks = (uint32_t)ceil(per_shard / cfg->chunk_floats);
    m.ngroups = cfg->ps * chunks;
    m.chunks = chunks;
    m.groups = calloc(m.ngroups, sizeof *m.groups);
    m.sim = ss__sim_create();
    m.trainers = calloc(cfg->trainers, sizeof *m.trainers);
    m.shards = calloc(cfg->ps, sizeof *m.shards);
    m.host_cpu = calloc(hosts, sizeof *m.host_cpu);
    m.host_up = calloc(hosts, sizeof *m.host_up);
    m.host_down = calloc(hosts, sizeof *m.host_down);
    int ok = m.sim && m.trainers && m.shards && m.groups && m.host_cpu && m.host_up && m.host_down;
    ss__sim_pool *shared =
        ok && cfg->shared_cores > 0 ? ss__sim_pool_create(m.sim, cfg->shared_cores) : NULL;
    ok = ok && (cfg->shared_cores > 0) == (shared != NULL);
    for (uint32_t h = 0; ok && h < hosts; h++) {
        m.host_cpu[h] = shared ? shared : ss__sim_pool_create(m.sim, cfg->host_cores);
        m.host_up[h] = ss__sim_pool_create(m.sim, 1);
        m.host_down[h] = ss__sim_pool_create(m.sim, 1);
        ok = m.host_cpu[h] && m.host_up[h] && m.host_down[h];
    }
    for (uint32_t s = 0; ok && s < cfg->ps; s++) {
        ps_shard *ps = &m.shards[s];
        for (uint32_t k = 0; k < chunks; k++)
            m.groups[s * chunks + k] = (chunk_group){
                .m = &m,
                .ps = ps,
                .floats = k + 1 < chunks ? cfg->chunk_floats : per_shard - k * cfg->chunk_floats};
        ps->cpu = shared ? shared : ss__sim_pool_create(m.sim, cfg->ps_cores);
        /* A PS link at another rate: a pool of that many link-rates (each
         * transfer also crosses its host's link, so above 1 only sharing
         * gains). */
        const double ps_rate =
            cfg->ps_link_bytes_per_s > 0 ? cfg->ps_link_bytes_per_s / cfg->link_bytes_per_s : 1;
        ps->in = ss__sim_pool_create(m.sim, ps_rate);
        ps->out = ss__sim_pool_create(m.sim, ps_rate);
        ps->threads = ss__sim_gate_create(m.sim, cfg->ps_threads);
        ok = ps->cpu && ps->in && ps->out && ps->threads;
    }
    for (uint32_t i = 0; ok && i < cfg->trainers; i++) {
        trainer *t = &m.trainers[i];
        t->m = &m;
        t->host = i / cfg->per_host;
        t->ops = calloc(m.ngroups, sizeof *t->ops);
        t->next_k = calloc(cfg->ps, sizeof *t->next_k);
        t->thread = ss__sim_gate_create(m.sim, 1);
        /* Trainers start spread over start_spread_s (a golden-ratio
         * sequence: even, deterministic), not all in one instant. */
        const double phase = fmod((double)i * 0.6180339887498949, 1.0);
        t->deadline = cfg->step_s + cfg->start_spread_s * phase;
        ok = t->ops && t->next_k && t->thread && ss__sim_at(m.sim, t->deadline, step_due, t) == 0;
    }
    if (ok) {
        uint64_t events = ss__sim_run(m.sim, cfg->seconds);
        ok = !m.failed;
        if (ok) {
            results(&m, out);
            out->events = events;
        }
    }
    free_model(&m);
    if (!ok)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "out of memory");
    return SS_OK;
}
