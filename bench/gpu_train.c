/* shadowsync-gpu-train: a GPU trainer. A two-layer MLP (input D, hidden H
 * with ReLU, one logit) trained by SGD on synthetic click data, its dense
 * parameters one device group (ss_trainer_add_dense_device) synced by the
 * ShadowSync hooks, configured from SHADOWSYNC_* like any trainer
 * (SHADOWSYNC_PS, SHADOWSYNC_SYNC=none|shadow|foreground,
 * SHADOWSYNC_SYNC_EVERY, SHADOWSYNC_ALGO). Each step runs on the
 * trainer's own stream: two cuBLAS GEMMs and three GEMVs, the element-wise
 * kernels of gpu_train_kernels.cu, and the SGD update (the shadow pool's
 * add-scaled kernel with -lr), then waits for the stream and calls
 * ss_trainer_step(). bench/gpu-train.sh runs it with no sync, the shadow
 * pool and foreground K=1 and K=10.
 *
 * At the end it prints one line:
 *   gpu-train: device="NAME" floats=N batch=B steps=S seconds=T
 *   examples/s=R rounds=K failed=F copy_ms_per_round=C loss=L close=STATUS
 * (loss: the mean log loss of the last 100 steps' examples; copy_ms_per_round:
 * shadowsync_device_copy_seconds' mean, the round's copies and kernel). */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/gpu_train_kernels.h"
#include "common/clock.h"
#include "common/flags.h"
#include "shadow/kernels_cuda.h"
#include "shadowsync/shadowsync.h"

static const ss__program program = {
    "shadowsync-gpu-train",
    "A GPU trainer: a two-layer MLP (cuBLAS) trained on synthetic clicks, its parameters one "
    "device group synced by the ShadowSync hooks from SHADOWSYNC_* (PS, SYNC, SYNC_EVERY, "
    "ALGO). Prints examples/s, rounds and the time a round spends in copies."};

static int cuda_failed(cudaError_t err, const char *what) {
    if (err == cudaSuccess)
        return 0;
    fprintf(stderr, "shadowsync-gpu-train: %s: %s\n", what, cudaGetErrorString(err));
    return 1;
}

static int blas_failed(cublasStatus_t st, const char *what) {
    if (st == CUBLAS_STATUS_SUCCESS)
        return 0;
    fprintf(stderr, "shadowsync-gpu-train: %s: cuBLAS status %d\n", what, (int)st);
    return 1;
}

/* A reproducible uniform in [-1, 1). */
static float uniform(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
}

/* The mean of a histogram from the trainer's metrics text: sum / count. */
static double metric_mean(const char *text, const char *name) {
    char key[128];
    snprintf(key, sizeof key, "%s_sum{", name);
    const char *s = strstr(text, key);
    snprintf(key, sizeof key, "%s_count{", name);
    const char *c = strstr(text, key);
    if (!s || !c)
        return 0.0;
    double sum = strtod(strchr(strchr(s, '}'), ' '), NULL);
    double count = strtod(strchr(strchr(c, '}'), ' '), NULL);
    return count > 0 ? sum / count : 0.0;
}

typedef struct model {
    int D, H, B;
    size_t n;                               /* parameters */
    float *W1, *b1, *w2, *b2;               /* views of the device group */
    float *grads, *gW1, *gb1, *gw2, *gb2;   /* the same layout */
    float *Z1, *A1, *dA, *logit, *g, *ones; /* activations */
    float *loss;                            /* device: summed log loss */
} model;

static void views(float *base, const model *m, float **W1, float **b1, float **w2, float **b2) {
    *W1 = base;
    *b1 = base + (size_t)m->H * m->D;
    *w2 = *b1 + m->H;
    *b2 = *w2 + m->H;
}

/* One SGD step on batch X (D x B, column-major) with labels y. */
static int step(cublasHandle_t h, cudaStream_t s, model *m, float *params, const float *X,
                const float *y, float lr) {
    const float one = 1.0f, zero = 0.0f;
    const int D = m->D, H = m->H, B = m->B;
    if (blas_failed(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, H, B, D, &one, m->W1, H, X, D, &zero,
                                m->Z1, H),
                    "forward GEMM") ||
        gt_bias_relu(s, m->Z1, m->b1, m->A1, H, B) ||
        blas_failed(cublasSgemv(h, CUBLAS_OP_T, H, B, &one, m->A1, H, m->w2, 1, &zero, m->logit, 1),
                    "logit GEMV") ||
        gt_logistic_grad(s, m->logit, m->b2, y, m->g, m->loss, B) ||
        blas_failed(cublasSgemv(h, CUBLAS_OP_N, H, B, &one, m->A1, H, m->g, 1, &zero, m->gw2, 1),
                    "w2 gradient GEMV") ||
        cuda_failed(cudaMemsetAsync(m->gb2, 0, sizeof(float), s), "b2 gradient") ||
        gt_sum(s, m->g, m->gb2, B) || gt_relu_backward(s, m->A1, m->w2, m->g, m->dA, H, B) ||
        blas_failed(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, H, D, B, &one, m->dA, H, X, D, &zero,
                                m->gW1, H),
                    "W1 gradient GEMM") ||
        blas_failed(cublasSgemv(h, CUBLAS_OP_N, H, B, &one, m->dA, H, m->ones, 1, &zero, m->gb1, 1),
                    "b1 gradient GEMV") ||
        ss__cuda_live_add_scaled(s, params, m->grads, -lr, m->n))
        return 1;
    return cuda_failed(cudaStreamSynchronize(s), "the training stream");
}

/* Initial values: uniform, scaled by fan-in; biases zero. NULL: out of
 * memory. */
static float *initial_values(const model *m, uint64_t *rng) {
    float *init = calloc(m->n, sizeof(float));
    if (!init)
        return NULL;
    float *iW1, *ib1, *iw2, *ib2;
    views(init, m, &iW1, &ib1, &iw2, &ib2);
    for (size_t i = 0; i < (size_t)m->H * m->D; i++)
        iW1[i] = uniform(rng) / sqrtf((float)m->D);
    for (int i = 0; i < m->H; i++)
        iw2[i] = uniform(rng) / sqrtf((float)m->H);
    return init;
}

/* Synthetic clicks on the device: x uniform in [-1, 1), clicked when a
 * fixed teacher's score plus noise is positive; batches of them in X, Y.
 * 1 on failure (said on stderr). */
static int synthetic_batches(const model *m, size_t batches, uint64_t *rng, float **X, float **Y) {
    const size_t xs = (size_t)m->D * m->B * batches, ys = (size_t)m->B * batches;
    float *hx = malloc(xs * sizeof(float)), *hy = malloc(ys * sizeof(float)),
          *teacher = malloc((size_t)m->D * sizeof(float));
    int rc = !hx || !hy || !teacher;
    for (int i = 0; !rc && i < m->D; i++)
        teacher[i] = uniform(rng);
    for (size_t e = 0; !rc && e < ys; e++) {
        float score = 0.5f * uniform(rng);
        for (int i = 0; i < m->D; i++) {
            hx[e * m->D + i] = uniform(rng);
            score += teacher[i] * hx[e * m->D + i] / sqrtf((float)m->D);
        }
        hy[e] = score > 0.0f ? 1.0f : 0.0f;
    }
    if (!rc)
        rc =
            cuda_failed(cudaMalloc((void **)X, xs * sizeof(float)), "cudaMalloc X") ||
            cuda_failed(cudaMalloc((void **)Y, ys * sizeof(float)), "cudaMalloc y") ||
            cuda_failed(cudaMemcpy(*X, hx, xs * sizeof(float), cudaMemcpyHostToDevice),
                        "upload X") ||
            cuda_failed(cudaMemcpy(*Y, hy, ys * sizeof(float), cudaMemcpyHostToDevice), "upload y");
    free(hx);
    free(hy);
    free(teacher);
    return rc;
}

/* The stream, cuBLAS and the model's work buffers. 1 on failure. */
static int device_setup(model *m, int device, cudaStream_t *s, cublasHandle_t *h) {
    const size_t HB = (size_t)m->H * m->B;
    if (cuda_failed(cudaSetDevice(device), "cudaSetDevice") ||
        cuda_failed(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "the training stream") ||
        blas_failed(cublasCreate(h), "cublasCreate") ||
        blas_failed(cublasSetStream(*h, *s), "cublasSetStream") ||
        cuda_failed(cudaMalloc((void **)&m->grads, m->n * sizeof(float)), "cudaMalloc grads") ||
        cuda_failed(cudaMalloc((void **)&m->Z1, 3 * HB * sizeof(float)), "cudaMalloc Z1") ||
        cuda_failed(cudaMalloc((void **)&m->logit, (3 * (size_t)m->B + 1) * sizeof(float)),
                    "cudaMalloc logit"))
        return 1;
    views(m->grads, m, &m->gW1, &m->gb1, &m->gw2, &m->gb2);
    m->A1 = m->Z1 + HB;
    m->dA = m->A1 + HB;
    m->g = m->logit + m->B;
    m->ones = m->g + m->B;
    m->loss = m->ones + m->B;
    return gt_fill(*s, m->ones, 1.0f, (size_t)m->B) ||
           cuda_failed(cudaMemsetAsync(m->loss, 0, sizeof(float), *s), "loss");
}

/* Trains until `seconds` pass, a step of batch k % batches at a time;
 * the mean loss of the last 100 steps (or of all, under 100) into *loss.
 * 1 on failure. */
static int train_for(cublasHandle_t h, cudaStream_t s, model *m, ss_trainer *t, float *params,
                     const float *X, const float *Y, size_t batches, double seconds, float lr,
                     uint64_t *steps, double *elapsed, float *loss) {
    uint64_t start = ss__now_ns(), until = start + (uint64_t)(seconds * 1e9), window = 0;
    float sum = 0.0f;
    *steps = 0;
    for (uint64_t now = start; now < until; now = ss__now_ns()) {
        const size_t k = *steps % batches;
        if (step(h, s, m, params, X + k * (size_t)m->D * m->B, Y + k * m->B, lr))
            return 1;
        ss_trainer_step(t);
        if (++*steps % 100 == 0) { /* the last 100 steps' mean loss */
            if (cuda_failed(cudaMemcpy(&sum, m->loss, sizeof(float), cudaMemcpyDeviceToHost),
                            "reading the loss") ||
                cuda_failed(cudaMemsetAsync(m->loss, 0, sizeof(float), s), "loss"))
                return 1;
            window = 100;
        }
    }
    *elapsed = (double)(ss__now_ns() - start) / 1e9;
    if (window == 0 && *steps > 0) { /* under 100 steps: the mean of them all */
        if (cuda_failed(cudaMemcpy(&sum, m->loss, sizeof(float), cudaMemcpyDeviceToHost),
                        "reading the loss"))
            return 1;
        window = *steps;
    }
    *loss = window ? sum / (float)(window * (uint64_t)m->B) : NAN;
    return 0;
}

int main(int argc, char **argv) {
    int64_t device = 0, input = 1024, hidden = 1024, batch = 1024, batches = 16, seed = 1;
    double seconds = 10, lr = 0.05;
    ss__flag flags[] = {
        {"device", SS_FLAG_INT, &device, "CUDA device ordinal", NULL, 0, 1024},
        {"input", SS_FLAG_INT, &input, "D: input features", NULL, 1, 1 << 16},
        {"hidden", SS_FLAG_INT, &hidden, "H: hidden units (parameters: H*D + 2H + 1 floats)", NULL,
         1, 1 << 16},
        {"batch", SS_FLAG_INT, &batch, "B: examples per step", NULL, 1, 1 << 16},
        {"batches", SS_FLAG_INT, &batches, "distinct synthetic batches kept on the device", NULL, 1,
         4096},
        {"seconds", SS_FLAG_DOUBLE, &seconds, "how long to train", NULL, 0.01, 86400},
        {"lr", SS_FLAG_DOUBLE, &lr, "SGD learning rate", NULL, 0, 100},
        {"seed", SS_FLAG_INT, &seed, "synthetic data and initial values", NULL, 0, 0},
    };
    int code = ss__flags_cli(&program, flags, sizeof flags / sizeof *flags, argc, argv);
    if (code >= 0)
        return code;
    if (ss_device_count() <= (int)device) {
        fprintf(stderr, "shadowsync-gpu-train: device %d: %s\n", (int)device,
                ss_device_count() == 0 ? ss_last_error() : "no such device");
        return 2;
    }
    model m = {.D = (int)input, .H = (int)hidden, .B = (int)batch};
    m.n = (size_t)m.H * m.D + 2 * (size_t)m.H + 1;
    uint64_t rng = (uint64_t)seed * 2654435761u + 1;
    float *init = initial_values(&m, &rng);
    if (!init)
        return 1;
    ss_trainer_config cfg;
    ss_trainer_config_init(&cfg);
    ss_trainer *t = NULL;
    ss_dense *w = NULL;
    ss_status st = ss_trainer_config_from_env(&cfg);
    if (st == SS_OK)
        st = ss_trainer_open(&cfg, &t);
    if (st == SS_OK)
        st = ss_trainer_add_dense_device(t, "mlp", m.n, (int)device, init, &w);
    free(init);
    if (st != SS_OK) {
        fprintf(stderr, "shadowsync-gpu-train: %s\n", ss_last_error());
        if (t)
            ss_trainer_close(t);
        return 1;
    }
    float *params = ss_dense_device_data(w);
    views(params, &m, &m.W1, &m.b1, &m.w2, &m.b2);
    float *X, *Y, loss;
    cudaStream_t s;
    cublasHandle_t h;
    uint64_t steps;
    double elapsed;
    if (device_setup(&m, (int)device, &s, &h) ||
        synthetic_batches(&m, (size_t)batches, &rng, &X, &Y))
        return 1;
    printf("gpu-train: training %zu floats on device %d for %.0f s\n", m.n, (int)device, seconds);
    fflush(stdout);
    if (train_for(h, s, &m, t, params, X, Y, (size_t)batches, seconds, (float)lr, &steps, &elapsed,
                  &loss))
        return 1;
    ss_dense_stats ds;
    ss_dense_get_stats(w, &ds);
    static char text[1 << 16];
    double copy_s = ss_trainer_metrics(t, text, sizeof text, NULL) == SS_OK
                        ? metric_mean(text, "shadowsync_device_copy_seconds")
                        : 0.0;
    ss_status closed = ss_trainer_finish(t);
    ss_status freed = ss_trainer_close(t);
    if (closed == SS_OK)
        closed = freed;
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, (int)device);
    printf("gpu-train: device=\"%s\" floats=%zu batch=%d steps=%llu seconds=%.2f examples/s=%.0f "
           "rounds=%llu failed=%llu copy_ms_per_round=%.3f loss=%.4f close=%s\n",
           prop.name, m.n, m.B, (unsigned long long)steps, elapsed, (double)steps * m.B / elapsed,
           (unsigned long long)ds.rounds, (unsigned long long)ds.failed_rounds, copy_s * 1e3, loss,
           ss_status_name(closed));
    cublasDestroy(h);
    cudaStreamDestroy(s);
    return closed == SS_OK ? 0 : 1;
}
