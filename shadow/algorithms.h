/* The sync algorithms as pure functions over float arrays
 * (docs/ARCHITECTURE.md, "The algorithms").
 *
 * s = snapshot of the live replica taken at round start, c = central
 * variable, avg = mean of the round's snapshots. Each function produces the
 * delta to apply to the live replica, so worker updates made during the
 * round survive; the engine applies it with ss__kernel_live_add_scaled(). Foreground (FR-X)
 * variants run the very same functions inside the trainer's step. */
#ifndef SS_SHADOW_ALGORITHMS_H
#define SS_SHADOW_ALGORITHMS_H

#include <stdbool.h>
#include <stddef.h>

#include "shadowsync/status.h"

typedef enum ss__algo { SS_ALGO_EASGD = 0, SS_ALGO_MA = 1, SS_ALGO_BMUF = 2 } ss__algo;

const char *ss__algo_name(ss__algo algo);
ss_status ss__algo_parse(const char *text, ss__algo *out);

/* S-EASGD, server side (the PS's exchange, shadow/central_rounds.c):
 * d = alpha (s - c); c += d. The agent then applies
 * x -= d (ss__kernel_live_add_scaled with scale -1).
 *
 * Every function that changes state here refuses a result that is not
 * finite (SS_ERR_NON_FINITE), before anything is stored: finite inputs
 * can still overflow (s = 3e38 against c = -3e38), and a centre that went
 * Inf once would poison every member after it, through restarts too. On
 * a refusal the state keeps its last (finite) value; d, avg and b are
 * then unspecified. */
ss_status ss__easgd_server(const float *s, float *c, float *d, float alpha, size_t n);

/* S-MA: delta = avg - s; the agent applies x += delta. */
ss_status ss__ma_delta(const float *avg, const float *s, float *delta, size_t n);

/* Block momentum state, identical on every member. */
typedef struct ss__bmuf_params {
    float eta;     /* block momentum */
    float zeta;    /* block learning rate */
    bool nesterov; /* target = w + eta m instead of w */
} ss__bmuf_params;

/* Block momentum parameters are valid: eta in [0, 1) and zeta in
 * (0, 1 / (1 - eta)]: past that bound the block step amplifies every
 * block's update instead of smoothing it (Chen & Huo suggest zeta = 1,
 * or up to 1 / (1 - eta) with momentum). */
bool ss__bmuf_params_valid(const ss__bmuf_params *p);

/* S-BMUF (Chen & Huo 2016), the aggregator's step once a round's mean avg
 * is known, over the group's global state: w (the global model), m (the
 * block momentum) and b (the block start: where the previous round moved
 * every member). On a group's first round (first = true) the state starts
 * at the mean: w = b = avg, m = 0. After that:
 *   G = avg - b       (the block's update, measured from where it started)
 *   m = eta m + zeta G
 *   w = w + m
 *   b = w + eta m     (Nesterov, NBM) or w (classic, CBM).
 * Every member then applies x += b - s (ss__ma_delta with b as the mean).
 * The state is the aggregator's (the PS's, per group), so every member,
 * a late joiner too, gets the same b. */
ss_status ss__bmuf_step(const ss__bmuf_params *p, float *w, float *m, float *b, const float *avg,
                        size_t n, bool first);

/* An MA/BMUF round's mean, as the PS (shadow/central_rounds.c) builds
 * it while snapshots arrive: sum += s for each of the k contributions,
 * then avg = sum / k; SS_ERR_NON_FINITE when the sum overflowed. */
void ss__mean_add(float *sum, const float *s, size_t n);
ss_status ss__mean_close(const float *sum, size_t k, float *avg, size_t n);

/* ss__kernel_elastic_exchange, refusing a d or a c that overflows: d is
 * written first, c changes only when every d[i] and c[i] + d[i] is
 * finite. Returns false, with c untouched, otherwise. */
bool ss__elastic_exchange_finite(const float *s, float *c, float *d, float alpha, size_t n);

#endif
