/* ctr-train: the reference DLRM-style CTR trainer. Either several trainers
 * (replicas) in one process, synced by the shadow engine in memory, or
 * (--ps) one trainer of a multi-process cluster that syncs through the
 * public trainer hooks and shadowsync-ps shards. Hogwild workers each;
 * background sync, foreground every K steps, or none. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/flags.h"
#include "common/log.h"
#include "common/malloc_tune.h"
#include "rpc/dense/grpc_transport.h"
#include "shadow/codec.h"
#include "tools/ctr/run.h"

/* What --help and --version say. */
static const ss__program program = {
    "ctr-train",
    "Reference DLRM-style CTR trainer: N replicas with Hogwild workers, synced by ShadowSync\n"
    "(background), in the foreground every K steps, or not at all. Trains epochs over the\n"
    "rows in a new order each time (Adam on the dense part, row-wise Adagrad on the\n"
    "embeddings) until the loss on a validation split carved from the end of --train stops\n"
    "improving, and keeps the best epoch's model. Prints progress, then per trainer and in\n"
    "total: examples/s, sync rounds and gap, and the model's test NE (normalized by the\n"
    "training set's CTR, He et al. 2014; ne_test_ctr: by the test set's) and AUC."};

/* One trainer's line: every field is this trainer's own. */
static void print_trainer(uint32_t t, const ss__ctr_trainer_result *tr, bool syncing, bool each) {
    printf("trainer %u: examples=%llu examples/s=%.0f", t, (unsigned long long)tr->examples,
           tr->examples_per_s);
    if (syncing)
        printf(" sync_rounds=%llu sync_gap_mean=%.2f sync_gap_p50=%llu sync_gap_p99=%llu "
               "sync_gap_max=%llu failed_rounds=%llu rejoins=%llu divergence=%.3g",
               (unsigned long long)tr->sync.rounds, tr->sync.gap_mean,
               (unsigned long long)tr->sync.gap_p50, (unsigned long long)tr->sync.gap_p99,
               (unsigned long long)tr->sync.gap_max, (unsigned long long)tr->sync.failed_rounds,
               (unsigned long long)tr->sync.rejoins, tr->sync.divergence);
    if (each)
        printf(" ne=%.4f auc=%.4f", tr->quality.ne, tr->quality.auc);
    printf("\n");
}

/* What the test scores mean, in words, before the summary. */
static void print_quality(const ss__ctr_train_result *res) {
    const ss__ctr_quality *q = &res->quality;
    printf("quality: model=%s epochs=%u test_rows=%zu logloss=%.5f ne=%.5f (normalized by the "
           "training set's CTR %.4f, He et al. 2014) ne_test_ctr=%.5f (by the test set's CTR "
           "%.4f) auc=%.5f mean_prediction=%.4f\n",
           res->model_evaluated, res->epochs, q->n, q->logloss, q->ne, q->train_ctr, q->ne_own_ctr,
           q->ctr, q->auc, q->mean_pred);
    if (q->one_class >= 0)
        printf("quality: the test set holds only label %d: AUC and ne_test_ctr are undefined "
               "(nan); logloss and ne are still the model's\n",
               q->one_class);
}

static int write_metrics(ss__metrics *m, const char *path) {
    char *text;
    size_t len;
    if (ss__metrics_render(m, &text, &len) != SS_OK)
        return -1;
    FILE *f = fopen(path, "w");
    int rc = (f && fwrite(text, 1, len, f) == len) ? 0 : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    if (rc)
        fprintf(stderr, "ctr-train: cannot write metrics to %s: %s\n", path, strerror(errno));
    free(text);
    return rc;
}

/* Reads the train and test sets; carves the validation split from the end
 * of the training rows (the same rows in every process: later rows, as
 * the test set is); in process mode keeps this trainer's share of the
 * rest (rank, rank + world, ...). base_ctr: the click rate of all
 * training rows, the same in every process. 1 on failure (said on stderr,
 * nothing kept). */
static int load_data(const char *train_path, size_t max_rows, const char *test_path,
                     size_t max_test_rows, size_t rank, size_t world, uint32_t trainers,
                     double val_fraction, ss__ctr_dataset *train, ss__ctr_dataset *val,
                     ss__ctr_dataset *test, double *base_ctr) {
    ss_status st = ss__ctr_dataset_load(train_path, max_rows, train);
    if (st == SS_OK)
        st = ss__ctr_dataset_load(test_path, max_test_rows, test);
    if (st != SS_OK) {
        fprintf(stderr, "ctr-train: cannot load data: %s\n", ss_strerror(st));
        ss__ctr_dataset_free(train);
        return 1;
    }
    *base_ctr = ss__ctr_dataset_ctr(train);
    if (train->nrows > 0 && (*base_ctr <= 0.0 || *base_ctr >= 1.0)) {
        fprintf(stderr,
                "ctr-train: every training row of %s has label %d: a click model needs both "
                "clicks and non-clicks to learn from\n",
                train_path, *base_ctr >= 1.0);
        ss__ctr_dataset_free(train);
        ss__ctr_dataset_free(test);
        return 1;
    }
    size_t nval = (size_t)((double)train->nrows * val_fraction);
    *val = (ss__ctr_dataset){0};
    if (nval > 0) {
        if (!(val->rows = malloc(nval * sizeof *val->rows))) {
            fprintf(stderr, "ctr-train: out of memory\n");
            ss__ctr_dataset_free(train);
            ss__ctr_dataset_free(test);
            return 1;
        }
        memcpy(val->rows, train->rows + train->nrows - nval, nval * sizeof *val->rows);
        val->nrows = nval;
        train->nrows -= nval;
    }
    size_t k = 0;
    for (size_t i = rank; i < train->nrows; i += world)
        train->rows[k++] = train->rows[i];
    train->nrows = k;
    printf("ctr-train: train=%s rows=%zu validation_rows=%zu (the file's last %.0f%%) skipped=%zu "
           "test=%s rows=%zu skipped=%zu\n",
           train_path, train->nrows, val->nrows, 100.0 * val_fraction, train->skipped, test_path,
           test->nrows, test->skipped);
    if (train->nrows < trainers || test->nrows == 0) {
        fprintf(stderr, "ctr-train: need at least one training row per trainer and a test row\n");
        ss__ctr_dataset_free(train);
        ss__ctr_dataset_free(val);
        ss__ctr_dataset_free(test);
        return 1;
    }
    return 0;
}

/* The last lines: a summary: line of key=value pairs for scripts, and the
 * embedding table's counters. */
static void print_summary(const char *sync, const char *algo, const char *emb,
                          const ss__ctr_train_config *cfg, const ss__ctr_train_result *res) {
    /* Scope of each field: the name says it. _sum: summed over trainers;
     * _mean_trainers: the mean of the trainers' own means; _worst: the
     * largest of the trainers'; test_*: the evaluated model on the test set
     * (ne_train_ctr: normalized by the training set's CTR, He et al. 2014;
     * ne_test_ctr: by the test set's); val_logloss: the best epoch's on the
     * validation split. */
    printf("summary: sync=%s algo=%s trainers=%u workers=%u sync_every=%u epochs=%u best_epoch=%u "
           "examples=%llu seconds=%.3f examples/s=%.0f sync_rounds_sum=%llu "
           "sync_gap_mean_trainers=%.2f sync_gap_p50_worst=%llu sync_gap_p99_worst=%llu "
           "sync_gap_max_worst=%llu failed_rounds_sum=%llu rejoins_sum=%llu train_logloss=%.5f "
           "val_logloss=%.5f test_logloss=%.5f test_ne_train_ctr=%.5f test_ne_test_ctr=%.5f "
           "test_auc=%.5f test_mean_prediction=%.4f model=%s\n",
           sync, algo, cfg->trainers, cfg->workers, cfg->sync_every, res->epochs, res->best_epoch,
           (unsigned long long)res->examples, res->seconds, res->examples_per_s,
           (unsigned long long)res->rounds, res->gap_mean, (unsigned long long)res->gap_p50_worst,
           (unsigned long long)res->gap_p99_worst, (unsigned long long)res->gap_max_worst,
           (unsigned long long)res->failed_rounds, (unsigned long long)res->rejoins,
           res->train_loss, res->val_logloss, res->quality.logloss, res->quality.ne,
           res->quality.ne_own_ctr, res->quality.auc, res->quality.mean_pred, res->model_evaluated);
    if (cfg->emb != SS_CTR_EMB_ARRAY)
        printf("embeddings: mode=%s lookups=%llu pushes=%llu remote_rows=%llu cache_hits=%llu "
               "synced_rows=%llu sync_passes=%llu failed_calls=%llu push_waits=%llu "
               "resident_rows=%llu evictions=%llu\n",
               emb, (unsigned long long)res->emb.lookups, (unsigned long long)res->emb.pushes,
               (unsigned long long)res->emb.remote_rows, (unsigned long long)res->emb.cache_hits,
               (unsigned long long)res->emb.synced_rows, (unsigned long long)res->emb.sync_passes,
               (unsigned long long)res->emb.failed_calls, (unsigned long long)res->emb.push_waits,
               (unsigned long long)res->emb.resident_rows, (unsigned long long)res->emb.evictions);
}

/* What the command line asks for, once checked. */
typedef struct run_options {
    ss__ctr_train_config cfg;
    ss_trainer_config pcfg; /* process mode: this process's trainer */
    char default_name[32];
    bool process;
    size_t rank, world, max_rows, max_test_rows;
    double val_fraction; /* 0: no validation split (one epoch, or no early stopping) */
    char lr_note[96];    /* how --lr was scaled, for the header line */
    const char *train_path, *test_path, *sync, *algo, *emb, *ps, *metrics_out;
} run_options;

/* Step 1: flags, --help, --version and the checks across flags; builds the
 * training config. -1: go on; otherwise the exit code. */
static int parse_options(int argc, char **argv, run_options *o) {
    ss__ctr_train_config cfg;
    ss__ctr_train_config_default(&cfg);
    const char *train_path = NULL, *test_path = NULL, *sync = "auto", *algo = "easgd";
    const char *final_model = "auto", *lr_scaling = "linear", *encoding = "f32",
               *peer_schedule = "ring", *topology = "";
    int64_t trainers = cfg.trainers, workers = cfg.workers, shadow_threads = cfg.shadow_threads;
    int64_t sync_every = cfg.sync_every, batch = cfg.batch, seed = (int64_t)cfg.seed;
    int64_t emb_dim = cfg.model.emb_dim, table_rows = cfg.model.table_rows;
    int64_t bottom = cfg.model.bottom_hidden, top = cfg.model.top_hidden;
    double emb_init_scale = 0.05;
    int64_t deadline_ms = cfg.round_deadline_ms, interval_us = (int64_t)cfg.round_interval_us;
    const char *min_gap_flag = "auto";
    int64_t final_rounds = cfg.final_rounds, max_rows = 0, max_test_rows = 0;
    double alpha = cfg.params.alpha, eta = cfg.params.bmuf.eta, zeta = cfg.params.bmuf.zeta;
    int64_t link_latency_us = 0;
    double link_gbps = 0.0;
    double lr = cfg.lr, emb_lr = cfg.emb_lr, progress = cfg.progress_interval_s;
    bool nesterov = cfg.params.bmuf.nesterov, eval_each = false, error_feedback = true,
         insecure_loopback = false;
    const char *metrics_out = NULL, *ps = "", *agent = "", *peers = "", *dense_out = NULL,
               *name = NULL;
    const char *emb = "array", *emb_ps = "", *emb_opt = "adagrad", *optimizer = "adam",
               *emb_encoding = "f32";
    const char *predictions_out = NULL;
    int64_t epochs = cfg.epochs, patience = cfg.patience;
    double val_fraction = 0.1;
    bool shuffle = cfg.shuffle, train_val_last = cfg.train_val_last;
    int64_t emb_cache_rows = 1 << 20, emb_sync_ms = 10;
    double emb_alpha = 0.5;
    bool emb_prefetch = true;
    int64_t emb_warm_batches = cfg.emb_warm_batches;
    int64_t rank = 0, world = 1, final_sync_ms = 0, rpc_timeout_ms = 10000, chunk_floats = 0;
    ss__flag flags[] = {
        {"peers", SS_FLAG_STRING, &peers,
         "process mode, decentralized: this process is trainer --rank of these (every trainer's "
         "host:port, same order); each round pulls one peer's replica and moves to the mean, no "
         "PS (--algo ma)",
         NULL, 0, 0},
        {"peer-schedule", SS_FLAG_STRING, &peer_schedule,
         "--peers: which peer a round pulls (ring: rank+1, rank+2, ...; random), or tree: every "
         "round sums all peers up a forest of aggregation trees packed over --topology",
         "ring|random|tree", 0, 0},
        {"insecure-loopback", SS_FLAG_BOOL, &insecure_loopback,
         "--peers on loopback without a token (SHADOWSYNC_AUTH_TOKEN_FILE): any local user may "
         "pull or push the model (demos, tests)",
         NULL, 0, 0},
        {"topology", SS_FLAG_STRING, &topology,
         "--peer-schedule tree: file of link bandwidths (link HOST HOST GBIT lines; "
         "docs/configuration.md); default every link alike",
         NULL, 0, 0},
        {"ps", SS_FLAG_STRING, &ps,
         "process mode: this process is one trainer, syncing through these shadowsync-ps shards "
         "(host:port,...)",
         NULL, 0, 0},
        {"rank", SS_FLAG_INT, &rank,
         "process mode: this trainer's index (reads rows rank, "
         "rank+world, ...)",
         NULL, 0, 65535},
        {"agent", SS_FLAG_STRING, &agent,
         "process mode: sync through the host's shadowsync-agent at this unix socket (the agent "
         "holds the PS list; training goes on while it is away)",
         NULL, 0, 0},
        {"world", SS_FLAG_INT, &world, "process mode: number of trainer processes", NULL, 1, 65536},
        {"trainer-name", SS_FLAG_STRING, &name, "process mode: label in logs (default t<rank>)",
         NULL, 0, 0},
        {"final-sync-ms", SS_FLAG_INT, &final_sync_ms,
         "process mode: after training keep running final rounds at least this long", NULL, 0,
         3.6e6},
        {"rpc-timeout-ms", SS_FLAG_INT, &rpc_timeout_ms, "process mode: deadline of one RPC", NULL,
         1, 3.6e6},
        {"dense-out", SS_FLAG_STRING, &dense_out,
         "write trainer 0's final dense replica here (raw float32)", NULL, 0, 0},
        {"train", SS_FLAG_STRING, &train_path, "training data, Criteo TSV (required)", NULL, 0, 0},
        {"test", SS_FLAG_STRING, &test_path, "held-out data, Criteo TSV (required)", NULL, 0, 0},
        {"max-rows", SS_FLAG_INT, &max_rows, "read at most this many training rows (0 = all)", NULL,
         0, 1e12},
        {"max-test-rows", SS_FLAG_INT, &max_test_rows, "read at most this many test rows", NULL, 0,
         1e12},
        {"trainers", SS_FLAG_INT, &trainers, "trainers (replicas), each reads 1/N of the data",
         NULL, 1, SS_CTR_MAX_TRAINERS},
        {"workers", SS_FLAG_INT, &workers, "Hogwild worker threads per trainer", NULL, 1, 256},
        {"shadow-threads", SS_FLAG_INT, &shadow_threads, "shadow threads per trainer", NULL, 1, 64},
        {"sync", SS_FLAG_STRING, &sync,
         "how replicas are synced (auto: shadow, or none for a single in-process trainer, which "
         "has nothing to sync with)",
         "auto|none|shadow|foreground", 0, 0},
        {"algo", SS_FLAG_STRING, &algo, "sync algorithm", "easgd|ma|bmuf", 0, 0},
        {"encoding", SS_FLAG_STRING, &encoding,
         "compressed sync: how rounds' floats travel (error feedback through mirrors of the "
         "replicas)",
         "f32|fp16|bf16|int8", 0, 0},
        {"chunk-floats", SS_FLAG_INT, &chunk_floats,
         "with --ps: floats per call (and PS group) of a dense shard, the same on every member "
         "(0: the library's default)",
         NULL, 0, SS_GRPC_MAX_CHUNK_FLOATS},
        {"error-feedback", SS_FLAG_BOOL, &error_feedback,
         "with --encoding, in-process trainers: false sends each quantized snapshot as it is, "
         "dropping what the quantization lost (an ablation, to measure what error feedback "
         "buys)",
         NULL, 0, 0},
        {"sync-every", SS_FLAG_INT, &sync_every, "K: foreground round every K trainer steps", NULL,
         1, 1e9},
        {"alpha", SS_FLAG_DOUBLE, &alpha, "S-EASGD elastic rate", NULL, 1e-6, 1},
        {"bmuf-eta", SS_FLAG_DOUBLE, &eta, "S-BMUF block momentum", NULL, 0, 0.999},
        {"bmuf-zeta", SS_FLAG_DOUBLE, &zeta, "S-BMUF block learning rate", NULL, 1e-6, 100},
        {"bmuf-nesterov", SS_FLAG_BOOL, &nesterov, "S-BMUF Nesterov target", NULL, 0, 0},
        {"round-deadline-ms", SS_FLAG_INT, &deadline_ms,
         "MA/BMUF: a round closes this long after its first snapshot", NULL, 1, 3.6e6},
        {"round-interval-us", SS_FLAG_INT, &interval_us, "pause of a shadow thread between rounds",
         NULL, 0, 6e7},
        {"link-latency-us", SS_FLAG_INT, &link_latency_us,
         "emulate a network: one-way latency added to every sync exchange", NULL, 0, 1e7},
        {"link-gbps", SS_FLAG_DOUBLE, &link_gbps,
         "emulate a network: bandwidth of every sync exchange (0 = memory speed)", NULL, 0, 1e4},
        {"min-round-gap", SS_FLAG_STRING, &min_gap_flag,
         "a background round waits until the replica ran this many steps (0 = back to back; "
         "auto: 1 for in-process trainers, whose rounds cost microseconds, so that a few "
         "thousand rows still see fresh averages; the library's 4 through a PS or an agent)",
         NULL, 0, 0},
        {"final-rounds", SS_FLAG_INT, &final_rounds, "rounds per trainer after training", NULL, 0,
         1e6},
        {"final-model", SS_FLAG_STRING, &final_model,
         "model to evaluate: trainer 0's replica or the central variable (auto: central for "
         "several in-process trainers that sync, else replica)",
         "auto|replica|central", 0, 0},
        {"lr-scaling", SS_FLAG_STRING, &lr_scaling,
         "N synced trainers each take 1/N of the steps and their replicas are averaged: linear "
         "multiplies the dense lr by N (the progress per epoch of one trainer), sqrt by sqrt(N), "
         "none keeps it; with ring or random --peers, N is 2 (the replicas a round averages)",
         "linear|sqrt|none", 0, 0},
        {"eval-each", SS_FLAG_BOOL, &eval_each, "also evaluate every trainer's replica", NULL, 0,
         0},
        {"batch", SS_FLAG_INT, &batch, "minibatch size per worker step", NULL, 1, 65536},
        {"epochs", SS_FLAG_INT, &epochs,
         "at most this many passes over the training rows (early stopping ends sooner)", NULL, 1,
         100000},
        {"patience", SS_FLAG_INT, &patience,
         "stop after this many epochs without a lower validation loss and evaluate the best "
         "epoch's model (0: run every epoch, evaluate the last)",
         NULL, 0, 100000},
        {"val-fraction", SS_FLAG_DOUBLE, &val_fraction,
         "validation split for early stopping: this fraction of --train's last rows, never "
         "trained on (used when --epochs > 1 and --patience > 0)",
         NULL, 0, 0.9},
        {"shuffle", SS_FLAG_BOOL, &shuffle, "every epoch, each trainer's rows in a new order", NULL,
         0, 0},
        {"train-val-last", SS_FLAG_BOOL, &train_val_last,
         "once early stopping has chosen the epoch, train one pass over the validation rows (the "
         "newest) in file order",
         NULL, 0, 0},
        {"optimizer", SS_FLAG_STRING, &optimizer,
         "the dense part's optimizer (each trainer keeps its own state)", "adam|adagrad|sgd", 0, 0},
        {"lr", SS_FLAG_DOUBLE, &lr, "dense learning rate", NULL, 1e-9, 100},
        {"emb-lr", SS_FLAG_DOUBLE, &emb_lr, "embedding learning rate", NULL, 0, 100},
        {"emb-dim", SS_FLAG_INT, &emb_dim, "embedding dimension", NULL, 1, 256},
        {"table-rows", SS_FLAG_INT, &table_rows, "rows per embedding table", NULL, 2, 1 << 26},
        {"emb-init-scale", SS_FLAG_DOUBLE, &emb_init_scale,
         "embedding rows start uniform in [-s, s] (a row never trained keeps this noise)", NULL,
         1e-6, 1},
        {"bottom-hidden", SS_FLAG_INT, &bottom, "bottom MLP hidden width", NULL, 1, 4096},
        {"top-hidden", SS_FLAG_INT, &top, "top MLP hidden width", NULL, 1, 4096},
        {"seed", SS_FLAG_INT, &seed, "initialization seed", NULL, 0, 0},
        {"metrics-out", SS_FLAG_STRING, &metrics_out,
         "write the sync metrics in Prometheus text format to this file at the end", NULL, 0, 0},
        {"progress", SS_FLAG_DOUBLE, &progress, "seconds between progress lines (0 = none)", NULL,
         0, 3600},
        {"emb", SS_FLAG_STRING, &emb,
         "embeddings: shared in-process array, or one table of the public API in local, remote "
         "(rows on the PS) or cached (local cache synced with the PS) mode",
         "array|local|remote|cached", 0, 0},
        {"emb-ps", SS_FLAG_STRING, &emb_ps,
         "remote/cached: the shadowsync-ps shards holding the table (default: --ps)", NULL, 0, 0},
        {"emb-optimizer", SS_FLAG_STRING, &emb_opt,
         "the embeddings' optimizer, array or table (lr = --emb-lr)", "adagrad|sgd", 0, 0},
        {"predictions-out", SS_FLAG_STRING, &predictions_out,
         "write the evaluated model's prediction for every test row here, one per line", NULL, 0,
         0},
        {"emb-cache-rows", SS_FLAG_INT, &emb_cache_rows, "cached: rows kept in the local cache",
         NULL, 1, 1ll << 34},
        {"emb-alpha", SS_FLAG_DOUBLE, &emb_alpha, "cached: elastic rate of the row sync", NULL,
         1e-6, 1},
        {"emb-sync-ms", SS_FLAG_INT, &emb_sync_ms, "cached: pause between row-sync passes", NULL, 1,
         60000},
        {"emb-encoding", SS_FLAG_STRING, &emb_encoding,
         "cached: how the row sync sends rows and gets deltas back (each shard applies the "
         "decoded delta it sends)",
         "f32|fp16|bf16|int8", 0, 0},
        {"emb-prefetch", SS_FLAG_BOOL, &emb_prefetch,
         "remote/cached: fetch the next batch's rows while this one trains", NULL, 0, 0},
        {"emb-warm-batches", SS_FLAG_INT, &emb_warm_batches,
         "cached: load the rows of this many upcoming batches into the cache in one call, ahead "
         "of their lookups (ss_table_warm; 0: each batch's misses in its own call)",
         NULL, 0, 1024},
    };
    int exit_code = ss__flags_cli(&program, flags, sizeof flags / sizeof *flags, argc, argv);
    if (exit_code >= 0)
        return exit_code;
    if (!train_path || !test_path) {
        fprintf(stderr, "ctr-train: --train and --test are required (see --help)\n");
        return 2;
    }
    /* One trainer per process, syncing with other processes. */
    const bool process = *ps != '\0' || *agent != '\0' || *peers != '\0';
    int64_t min_gap = process ? (int64_t)cfg.min_round_gap : 1;
    if (strcmp(min_gap_flag, "auto") != 0) {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(min_gap_flag, &end, 10);
        if (errno || end == min_gap_flag || *end || v < 0 || v > 1000000000) {
            fprintf(stderr,
                    "ctr-train: --min-round-gap \"%s\": not auto or a step count in [0, 1e9]\n",
                    min_gap_flag);
            return 2;
        }
        min_gap = v;
    }
    if (!strcmp(sync, "auto")) /* one in-process trainer has nothing to sync with */
        sync = trainers == 1 && !process ? "none" : "shadow";
    ss__ctr_sync_mode_parse(sync, &cfg.sync);
    ss__algo_parse(algo, &cfg.params.algo);
    ss__encoding enc = SS_ENC_F32;
    ss__encoding_parse(encoding, &enc); /* the flag's choices are the names */
    cfg.encoding = (uint32_t)enc;
    cfg.error_feedback = error_feedback;
    if (chunk_floats && !*ps) {
        fprintf(stderr, "ctr-train: --chunk-floats cuts the dense groups sent to --ps; without "
                        "--ps it has nothing to cut (with --agent, give it to the agent)\n");
        return 2;
    }
    if (!error_feedback && process) {
        fprintf(stderr, "ctr-train: --error-feedback false is an in-process ablation; a PS keeps "
                        "the mirrors with feedback (drop --ps/--agent or the flag)\n");
        return 2;
    }
    cfg.trainers = (uint32_t)trainers;
    cfg.workers = (uint32_t)workers;
    cfg.shadow_threads = (uint32_t)shadow_threads;
    cfg.sync_every = (uint32_t)sync_every;
    cfg.params.alpha = (float)alpha;
    cfg.params.bmuf =
        (ss__bmuf_params){.eta = (float)eta, .zeta = (float)zeta, .nesterov = nesterov};
    cfg.round_deadline_ms = (uint32_t)deadline_ms;
    cfg.round_interval_us = (uint64_t)interval_us;
    cfg.final_rounds = (uint32_t)final_rounds;
    cfg.min_round_gap = (uint64_t)min_gap;
    cfg.link_latency_us = (uint32_t)link_latency_us;
    cfg.link_gbps = link_gbps;
    const bool in_process_sync = !process && trainers > 1 && strcmp(sync, "none") != 0;
    if (!strcmp(final_model, "auto"))
        final_model = in_process_sync ? "central" : "replica";
    cfg.eval_central = !strcmp(final_model, "central");
    int64_t synced = strcmp(sync, "none") == 0 ? 1 : process ? world : trainers;
    /* Ring or random gossip averages two replicas a round, not all of them,
     * so the linear rule's N is 2: with 4 processes the 4x lr left some
     * replicas far from the others (held-out NE up to 0.936 against 0.905;
     * BENCHMARKS.md, "Decentralized averaging"). Trees average every one. */
    if (process && *peers && strcmp(peer_schedule, "tree") != 0 && synced > 2)
        synced = 2;
    if (strcmp(lr_scaling, "none") != 0 && synced > 1) {
        const bool sq = !strcmp(lr_scaling, "sqrt");
        snprintf(o->lr_note, sizeof o->lr_note, " (--lr %g x %s%lld%s synced trainers)", lr,
                 sq ? "sqrt(" : "", (long long)synced, sq ? ")" : "");
        cfg.lr_scale = (float)(sq ? sqrt((double)synced) : (double)synced);
        lr *= cfg.lr_scale;
    }
    cfg.eval_each = eval_each;
    cfg.batch = (uint32_t)batch;
    ss__ctr_optimizer_parse(optimizer, &cfg.optimizer);
    cfg.epochs = (uint32_t)epochs;
    cfg.patience = (uint32_t)patience;
    cfg.shuffle = shuffle;
    cfg.train_val_last = train_val_last;
    cfg.predictions_out = predictions_out;
    o->val_fraction = epochs > 1 && patience > 0 ? val_fraction : 0.0;
    cfg.lr = (float)lr;
    cfg.emb_lr = (float)emb_lr;
    cfg.model = (ss__ctr_model_config){.emb_dim = (uint32_t)emb_dim,
                                       .table_rows = (uint32_t)table_rows,
                                       .bottom_hidden = (uint32_t)bottom,
                                       .top_hidden = (uint32_t)top,
                                       .emb_init_scale = (float)emb_init_scale};
    cfg.seed = (uint64_t)seed;
    cfg.progress_interval_s = progress;
    cfg.progress = stdout;
    ss__ctr_emb_mode_parse(emb, &cfg.emb);
    cfg.emb_ps = *emb_ps ? emb_ps : ps;
    cfg.emb_optimizer = !strcmp(emb_opt, "adagrad") ? SS_TABLE_ADAGRAD : SS_TABLE_SGD;
    cfg.emb_cache_rows = (size_t)emb_cache_rows;
    cfg.emb_alpha = (float)emb_alpha;
    cfg.emb_encoding = emb_encoding;
    cfg.emb_sync_ms = (uint32_t)emb_sync_ms;
    cfg.emb_prefetch = emb_prefetch;
    cfg.emb_warm_batches = (uint32_t)emb_warm_batches;
    if ((cfg.emb == SS_CTR_EMB_REMOTE || cfg.emb == SS_CTR_EMB_CACHED) && !*cfg.emb_ps) {
        fprintf(stderr, "ctr-train: --emb %s needs --emb-ps or --ps\n", emb);
        return 2;
    }
    if (*agent && cfg.sync != SS_CTR_SYNC_SHADOW) {
        fprintf(stderr, "ctr-train: --agent syncs in the background: needs --sync shadow\n");
        return 2;
    }
    if (process && (trainers != 1 || rank >= world || cfg.eval_central)) {
        fprintf(stderr, "ctr-train: --ps/--agent/--peers run one trainer per process: needs "
                        "--trainers 1, "
                        "--rank < --world and --final-model replica\n");
        return 2;
    }
    snprintf(o->default_name, sizeof o->default_name, "t%lld", (long long)rank);
    ss_trainer_config pcfg;
    ss_trainer_config_init(&pcfg);
    pcfg.ps = ps;
    pcfg.agent = *agent ? agent : NULL;
    pcfg.peers = *peers ? peers : NULL;
    pcfg.peer_rank = (uint32_t)rank;
    pcfg.peer_schedule = peer_schedule;
    pcfg.topology = *topology ? topology : NULL;
    pcfg.insecure_loopback = insecure_loopback;
    pcfg.name = name ? name : o->default_name;
    pcfg.mode = cfg.sync == SS_CTR_SYNC_NONE     ? SS_SYNC_NONE
                : cfg.sync == SS_CTR_SYNC_SHADOW ? SS_SYNC_BACKGROUND
                                                 : SS_SYNC_FOREGROUND;
    pcfg.algo = algo;
    pcfg.alpha = (float)alpha;
    pcfg.bmuf_eta = (float)eta;
    pcfg.bmuf_zeta = (float)zeta;
    pcfg.bmuf_nesterov = nesterov;
    pcfg.shadow_threads = (uint32_t)shadow_threads;
    pcfg.sync_every = (uint32_t)sync_every;
    pcfg.min_round_gap = (uint64_t)min_gap;
    pcfg.encoding = encoding;
    pcfg.chunk_floats = (uint32_t)chunk_floats;
    pcfg.round_interval_us = (uint64_t)interval_us;
    pcfg.final_rounds = (uint32_t)final_rounds;
    pcfg.final_sync_ms = (uint32_t)final_sync_ms;
    pcfg.timeout_ms = (uint32_t)rpc_timeout_ms;
    pcfg.round_wait_ms = (uint32_t)deadline_ms + 1000;
    pcfg.tls_ca = getenv("SHADOWSYNC_TLS_CA");
    pcfg.tls_cert = getenv("SHADOWSYNC_TLS_CERT");
    pcfg.tls_key = getenv("SHADOWSYNC_TLS_KEY");
    cfg.dense_out = dense_out;
    if (cfg.eval_central && cfg.sync == SS_CTR_SYNC_NONE) {
        fprintf(stderr, "ctr-train: --final-model central needs --sync shadow|foreground\n");
        return 2;
    }
    o->cfg = cfg;
    o->pcfg = pcfg;
    if (process)
        o->cfg.process = &o->pcfg;
    o->process = process;
    if (process) { /* every process holds the validation rows; each trains its share */
        o->cfg.val_rank = (uint32_t)rank;
        o->cfg.val_world = (uint32_t)world;
    }
    o->rank = (size_t)rank;
    o->world = (size_t)world;
    o->train_path = train_path;
    o->test_path = test_path;
    o->max_rows = (size_t)max_rows;
    o->max_test_rows = (size_t)max_test_rows;
    o->sync = sync;
    o->algo = algo;
    o->emb = emb;
    o->ps = ps;
    o->metrics_out = metrics_out;
    return -1;
}

/* Step 2: load the data, train, print per-trainer lines and the summary. */
static int train_and_report(run_options *o) {
    ss__ctr_train_config *cfg = &o->cfg;
    ss__ctr_dataset train = {0}, val = {0}, test = {0};
    if (load_data(o->train_path, o->max_rows, o->test_path, o->max_test_rows,
                  o->process ? o->rank : 0, o->process ? o->world : 1, cfg->trainers,
                  o->val_fraction, &train, &val, &test, &cfg->base_ctr) != 0)
        return 1;
    printf("ctr-train: trainers=%u workers=%u sync=%s algo=%s%s batch=%u optimizer=%s lr=%g%s "
           "emb_optimizer=%s emb_lr=%g epochs<=%u patience=%u shuffle=%s\n",
           cfg->trainers, cfg->workers, o->sync, o->algo,
           cfg->sync == SS_CTR_SYNC_FOREGROUND ? " (foreground)" : "", cfg->batch,
           ss__ctr_optimizer_name(cfg->optimizer), (double)cfg->lr, o->lr_note,
           cfg->emb_optimizer == SS_TABLE_ADAGRAD ? "adagrad" : "sgd", (double)cfg->emb_lr,
           cfg->epochs, val.nrows ? cfg->patience : 0, cfg->shuffle ? "true" : "false");
    if (o->process)
        printf("ctr-train: process mode: trainer %s rank=%zu world=%zu ps=%s\n", o->pcfg.name,
               o->rank, o->world, o->ps);
    fflush(stdout);

    ss__ctr_train_result *res = malloc(sizeof *res);
    if (!res || (o->metrics_out && ss__metrics_create(&cfg->metrics) != SS_OK)) {
        fprintf(stderr, "ctr-train: out of memory\n");
        return 1;
    }
    ss_status st = ss__ctr_train_run(cfg, &train, &val, &test, res);
    int metrics_rc =
        (st == SS_OK && o->metrics_out) ? write_metrics(cfg->metrics, o->metrics_out) : 0;
    ss__metrics_destroy(cfg->metrics);
    if (st != SS_OK) {
        fprintf(stderr, "ctr-train: training failed: %s\n", ss_strerror(st));
        free(res);
        ss__ctr_dataset_free(&train);
        ss__ctr_dataset_free(&val);
        ss__ctr_dataset_free(&test);
        return 1;
    }
    const bool syncing = cfg->sync != SS_CTR_SYNC_NONE;
    for (uint32_t t = 0; t < cfg->trainers; t++)
        print_trainer(o->process ? (uint32_t)o->rank : t, &res->trainer[t], syncing,
                      cfg->eval_each);
    print_quality(res);
    print_summary(o->sync, o->algo, o->emb, cfg, res);
    free(res);
    ss__ctr_dataset_free(&train);
    ss__ctr_dataset_free(&val);
    ss__ctr_dataset_free(&test);
    return metrics_rc ? 1 : 0;
}

int main(int argc, char **argv) {
    ss__malloc_keep_large_buffers(); /* sync rounds reuse their megabyte buffers */
    run_options *o = calloc(1, sizeof *o);
    if (!o) {
        fprintf(stderr, "ctr-train: out of memory\n");
        return 1;
    }
    int rc = parse_options(argc, argv, o);
    if (rc < 0)
        rc = train_and_report(o);
    free(o);
    return rc;
}
