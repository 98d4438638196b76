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

/* S-EASGD, server side (the PS's exchange, shadow/inproc_transport.c):
 * d = alpha (s - c); c += d. The agent then applies
 * x -= d (ss__kernel_live_add_scaled with scale -1). */
ss_status ss__easgd_server(const float *s, float *c, float *d, float alpha, size_t n);

/* S-MA: delta = avg - s; the agent applies x += delta. */
ss_status ss__ma_delta(const float *avg, const float *s, float *delta, size_t n);

/* Block momentum state, identical on every member. */
typedef struct ss__bmuf_params {
    float eta;     /* block momentum */
    float zeta;    /* block learning rate */
    bool nesterov; /* target = w + eta m instead of w */
} ss__bmuf_params;

/* S-BMUF: G = avg - w; m = eta m + zeta G; w += m;
 * target = w + eta m (Nesterov) or w; delta = target - s. */
ss_status ss__bmuf_delta(const ss__bmuf_params *p, float *w, float *m, const float *avg,
                         const float *s, float *delta, size_t n);

/* An MA/BMUF round's mean, as the PS (shadow/inproc_transport.c) builds
 * it while snapshots arrive: sum += s for each of the k contributions,
 * then avg = sum / k. */
void ss__mean_add(float *sum, const float *s, size_t n);
ss_status ss__mean_close(const float *sum, size_t k, float *avg, size_t n);

#endif
