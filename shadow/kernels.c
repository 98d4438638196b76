#include "shadow/kernels.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

void ss__kernel_live_snapshot(float *restrict dst, const float *live, size_t n) {
    /* A racy copy: memcpy is the fastest vectorized copy and a torn float
     * read across a concurrent write is acceptable for Hogwild. */
    memcpy(dst, live, n * sizeof *dst);
}

void ss__kernel_live_add_scaled(float *live, const float *restrict d, float scale, size_t n) {
    /* Read-modify-write per element: a worker's update landing between our
     * load and store can be lost for that element only, as in Hogwild. */
    for (size_t i = 0; i < n; i++)
        live[i] += scale * d[i];
}

void ss__kernel_live_adam(float *live, float *m, float *v, const float *restrict g, float gscale,
                          float lr_t, float b1, float b2, float eps, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        live[i] -= lr_t * mi / (sqrtf(vi) + eps);
    }
}

void ss__kernel_live_adagrad(float *live, float *acc, const float *restrict g, float gscale,
                             float lr, float eps, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        float a = acc[i] + gi * gi;
        acc[i] = a;
        live[i] -= lr * gi / (sqrtf(a) + eps);
    }
}

void ss__kernel_live_adagrad_row(float *live, float *acc, const float *restrict g, float lr,
                                 float eps, size_t n) {
    float sq = 0.0f;
    for (size_t i = 0; i < n; i++)
        sq += g[i] * g[i];
    float a = *acc + sq / (float)n;
    *acc = a;
    float step = lr / (sqrtf(a) + eps);
    for (size_t i = 0; i < n; i++)
        live[i] -= step * g[i];
}

void ss__kernel_live_matvec(const float *W, const float *b, const float *restrict x,
                            float *restrict y, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++) {
        const float *w = W + r * cols;
        /* Eight partial sums: float addition is not associative, so GCC
         * only vectorizes a reduction that is written lane by lane. */
        float lane[8] = {0};
        size_t c = 0;
        for (; c + 8 <= cols; c += 8)
            for (size_t k = 0; k < 8; k++)
                lane[k] += w[c + k] * x[c + k];
        float acc = ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
                    ((lane[4] + lane[5]) + (lane[6] + lane[7]));
        for (; c < cols; c++)
            acc += w[c] * x[c];
        y[r] = acc + (b ? b[r] : 0.0f);
    }
}

void ss__kernel_live_matvec_t(const float *W, const float *restrict dy, float *restrict dx,
                              size_t rows, size_t cols) {
    for (size_t c = 0; c < cols; c++)
        dx[c] = 0.0f;
    for (size_t r = 0; r < rows; r++) {
        const float *w = W + r * cols;
        float g = dy[r];
        for (size_t c = 0; c < cols; c++)
            dx[c] += g * w[c];
    }
}

void ss__kernel_elastic_exchange(const float *restrict s, float *restrict c, float *restrict d,
                                 float alpha, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float di = alpha * (s[i] - c[i]);
        d[i] = di;
        c[i] += di;
    }
}

void ss__kernel_axpy(float *restrict y, const float *restrict x, float a, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

void ss__kernel_accumulate(float *restrict acc, const float *restrict x, size_t n) {
    for (size_t i = 0; i < n; i++)
        acc[i] += x[i];
}

void ss__kernel_scale(float *restrict x, float scale, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] *= scale;
}

void ss__kernel_sub(float *restrict out, const float *restrict a, const float *restrict b,
                    size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] - b[i];
}

/* The sums below run in LANES independent double accumulators: one serial
 * double sum waits on each add (about 4 cycles an element) and GCC may not
 * reorder it into vectors without -ffast-math; 8 lanes are 8 chains it
 * vectorizes: a serial norm of a large group takes a large share of an
 * agent's CPU. */
#define LANES 8

static double lanes_total(const double lane[LANES]) {
    double t = 0.0;
    for (int k = 0; k < LANES; k++)
        t += lane[k];
    return t;
}

void ss__kernel_dist2_norm2(const float *restrict a, const float *restrict b, size_t n,
                            double *dist2, double *b2) {
    double d[LANES] = {0}, c[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++) {
            const double t = (double)a[i + k] - (double)b[i + k];
            d[k] += t * t;
            c[k] += (double)b[i + k] * (double)b[i + k];
        }
    for (; i < n; i++) {
        const double t = (double)a[i] - (double)b[i];
        d[0] += t * t;
        c[0] += (double)b[i] * (double)b[i];
    }
    *dist2 = lanes_total(d);
    *b2 = lanes_total(c);
}

void ss__kernel_easgd_divergence(const float *restrict s, const float *restrict d, float alpha,
                                 size_t n, double *dist2, double *centre2) {
    const double inv = 1.0 / (double)alpha;
    double x[LANES] = {0}, c[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++) {
            const double gap = (double)d[i + k] * inv, old = (double)s[i + k] - gap;
            x[k] += gap * gap;
            c[k] += old * old;
        }
    for (; i < n; i++) {
        const double gap = (double)d[i] * inv, old = (double)s[i] - gap;
        x[0] += gap * gap;
        c[0] += old * old;
    }
    *dist2 = lanes_total(x);
    *centre2 = lanes_total(c);
}
