/* The simulator's event queue and processor-sharing pools (engine.h). */
#include "events.h"

#include <math.h>
#include <stdlib.h>

typedef struct event {
    double t;
    uint64_t seq; /* ties run in the order scheduled */
    ss__sim_fn fn;
    void *arg;
    uint64_t tag; /* a pool's version when it scheduled its next finish */
} event;

typedef struct job {
    double finish; /* in the pool's virtual time */
    uint64_t seq;
    ss__sim_fn fn;
    void *arg;
} job;

struct ss__sim_pool {
    ss_sim *sim;
    double servers;
    double vtime; /* work each job in the pool has received */
    double last;  /* when vtime was brought up to date */
    double busy;  /* server-seconds done */
    job *jobs;    /* min-heap on (finish, seq) */
    size_t njobs, cap;
    uint64_t version, seq;
    ss__sim_pool *next; /* the simulator's list, for destroy */
};

typedef struct waiter {
    ss__sim_fn fn;
    void *arg;
} waiter;

struct ss__sim_gate {
    ss_sim *sim;
    uint32_t free_slots;
    waiter *q; /* a ring */
    size_t head, n, cap;
    ss__sim_gate *next;
};

struct ss_sim {
    double now;
    event *ev; /* min-heap on (t, seq) */
    size_t nev, cap;
    uint64_t seq, tag;
    ss__sim_pool *pools;
    ss__sim_gate *gates;
};

/* ---- heaps ---- */

static int event_before(const event *a, const event *b) {
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static int job_before(const job *a, const job *b) {
    return a->finish < b->finish || (a->finish == b->finish && a->seq < b->seq);
}

#define HEAP_FUNCS(name, type, before)                                                             \
    static void name##_up(type *h, size_t i) {                                                     \
        while (i > 0) {                                                                            \
            size_t p = (i - 1) / 2;                                                                \
            if (!before(&h[i], &h[p]))                                                             \
                break;                                                                             \
            type tmp = h[i];                                                                       \
            h[i] = h[p];                                                                           \
            h[p] = tmp;                                                                            \
            i = p;                                                                                 \
        }                                                                                          \
    }                                                                                              \
    static void name##_down(type *h, size_t n, size_t i) {                                         \
        for (;;) {                                                                                 \
            size_t l = 2 * i + 1, r = l + 1, m = i;                                                \
            if (l < n && before(&h[l], &h[m]))                                                     \
                m = l;                                                                             \
            if (r < n && before(&h[r], &h[m]))                                                     \
                m = r;                                                                             \
            if (m == i)                                                                            \
                return;                                                                            \
            type tmp = h[i];                                                                       \
            h[i] = h[m];                                                                           \
            h[m] = tmp;                                                                            \
            i = m;                                                                                 \
        }                                                                                          \
    }

HEAP_FUNCS(event_heap, event, event_before)
HEAP_FUNCS(job_heap, job, job_before)

static int grow(void **arr, size_t *cap, size_t n, size_t size) {
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 64;
    void *p = realloc(*arr, c * size);
    if (!p)
        return -1;
    *arr = p;
    *cap = c;
    return 0;
}

/* ---- the clock and the queue ---- */

ss_sim *ss__sim_create(void) {
    return calloc(1, sizeof(ss_sim));
}

void ss__sim_destroy(ss_sim *sim) {
    if (!sim)
        return;
    for (ss__sim_pool *p = sim->pools, *n; p; p = n) {
        n = p->next;
        free(p->jobs);
        free(p);
    }
    for (ss__sim_gate *g = sim->gates, *n; g; g = n) {
        n = g->next;
        free(g->q);
        free(g);
    }
    free(sim->ev);
    free(sim);
}

double ss__sim_now(const ss_sim *sim) {
    return sim->now;
}

static int schedule(ss_sim *sim, double delay, ss__sim_fn fn, void *arg, uint64_t tag) {
    if (grow((void **)&sim->ev, &sim->cap, sim->nev, sizeof(event)) != 0)
        return -1;
    sim->ev[sim->nev] = (event){sim->now + (delay > 0 ? delay : 0), sim->seq++, fn, arg, tag};
    event_heap_up(sim->ev, sim->nev++);
    return 0;
}

int ss__sim_at(ss_sim *sim, double delay, ss__sim_fn fn, void *arg) {
    return schedule(sim, delay, fn, arg, 0);
}

int ss__sim_at_tagged(ss_sim *sim, double delay, ss__sim_fn fn, void *arg, uint64_t tag) {
    return schedule(sim, delay, fn, arg, tag);
}

uint64_t ss__sim_tag(const ss_sim *sim) {
    return sim->tag;
}

uint64_t ss__sim_run(ss_sim *sim, double until) {
    uint64_t ran = 0;
    while (sim->nev > 0 && sim->ev[0].t <= until) {
        event e = sim->ev[0];
        sim->ev[0] = sim->ev[--sim->nev];
        event_heap_down(sim->ev, sim->nev, 0);
        sim->now = e.t;
        sim->tag = e.tag;
        e.fn(sim, e.arg);
        ran++;
    }
    return ran;
}

/* ---- processor-sharing pools ---- */

static double share(const ss__sim_pool *p) {
    return p->njobs == 0 ? 0 : fmin(1.0, p->servers / (double)p->njobs);
}

/* Brings the virtual time and the busy time up to the clock. */
static void advance(ss__sim_pool *p) {
    const double dt = p->sim->now - p->last;
    if (dt > 0 && p->njobs > 0) {
        p->vtime += share(p) * dt;
        p->busy += fmin((double)p->njobs, p->servers) * dt;
    }
    p->last = p->sim->now;
}

static void pool_finish(ss_sim *sim, void *arg);

/* Schedules the first job's finish; older schedules go stale. */
static int reschedule(ss__sim_pool *p) {
    p->version++;
    if (p->njobs == 0)
        return 0;
    const double left = p->jobs[0].finish - p->vtime;
    return schedule(p->sim, left > 0 ? left / share(p) : 0, pool_finish, p, p->version);
}

static void pool_finish(ss_sim *sim, void *arg) {
    ss__sim_pool *p = arg;
    if (sim->tag != p->version)
        return; /* stale: the pool changed after this was scheduled */
    advance(p);
    /* Every job at its tag (rounding: a relative epsilon) is done. */
    const double eps = 1e-12 * fmax(1.0, fabs(p->vtime));
    job done[16];
    size_t nd = 0;
    while (p->njobs > 0 && p->jobs[0].finish <= p->vtime + eps && nd < 16) {
        done[nd++] = p->jobs[0];
        p->jobs[0] = p->jobs[--p->njobs];
        job_heap_down(p->jobs, p->njobs, 0);
    }
    reschedule(p);
    for (size_t i = 0; i < nd; i++)
        done[i].fn(sim, done[i].arg);
}

ss__sim_pool *ss__sim_pool_create(ss_sim *sim, double servers) {
    if (!(servers > 0))
        return NULL;
    ss__sim_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->sim = sim;
    p->servers = servers;
    p->last = sim->now;
    p->next = sim->pools;
    sim->pools = p;
    return p;
}

int ss__sim_pool_submit(ss__sim_pool *p, double work, ss__sim_fn fn, void *arg) {
    advance(p);
    if (grow((void **)&p->jobs, &p->cap, p->njobs, sizeof(job)) != 0)
        return -1;
    p->jobs[p->njobs] = (job){p->vtime + (work > 0 ? work : 0), p->seq++, fn, arg};
    job_heap_up(p->jobs, p->njobs++);
    return reschedule(p);
}

double ss__sim_pool_busy(const ss__sim_pool *p) {
    const double dt = p->sim->now - p->last;
    return p->busy + (p->njobs > 0 && dt > 0 ? fmin((double)p->njobs, p->servers) * dt : 0);
}

size_t ss__sim_pool_jobs(const ss__sim_pool *p) {
    return p->njobs;
}

/* ---- gates ---- */

ss__sim_gate *ss__sim_gate_create(ss_sim *sim, uint32_t slots) {
    if (slots == 0)
        return NULL;
    ss__sim_gate *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->sim = sim;
    g->free_slots = slots;
    g->next = sim->gates;
    sim->gates = g;
    return g;
}

int ss__sim_gate_acquire(ss__sim_gate *g, ss__sim_fn fn, void *arg) {
    if (g->free_slots > 0) {
        g->free_slots--;
        return ss__sim_at(g->sim, 0, fn, arg);
    }
    if (g->n == g->cap) { /* grow the ring, unrolled from head */
        size_t cap = g->cap ? g->cap * 2 : 64;
        waiter *q = malloc(sizeof *q * cap);
        if (!q)
            return -1;
        for (size_t i = 0; i < g->n; i++)
            q[i] = g->q[(g->head + i) % g->cap];
        free(g->q);
        g->q = q;
        g->cap = cap;
        g->head = 0;
    }
    g->q[(g->head + g->n++) % g->cap] = (waiter){fn, arg};
    return 0;
}

int ss__sim_gate_release(ss__sim_gate *g) {
    if (g->n == 0) {
        g->free_slots++;
        return 0;
    }
    waiter w = g->q[g->head];
    g->head = (g->head + 1) % g->cap;
    g->n--;
    return ss__sim_at(g->sim, 0, w.fn, w.arg);
}
