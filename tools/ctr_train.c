/* ctr-train: the reference DLRM-style CTR trainer. Either several trainers
 * (replicas) in one process, synced by the shadow engine in memory, or
 * (--ps) one trainer of a multi-process cluster that syncs through the
 * public trainer hooks and shadowsync-ps shards. Hogwild workers each;
 * background sync, foreground every K steps, or none. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/flags.h"
#include "common/log.h"
#include "common/malloc_tune.h"
#include "rpc/dense/grpc_transport.h"
#include "shadow/codec.h"
#include "tools/ctr/cli.h"
#include "tools/ctr/run.h"
#include "trainer-hooks/settings_flags.h"

/* What --help and --version say. */
static const ss__program program = {
    "ctr-train",
    "Reference DLRM-style CTR trainer: N replicas with Hogwild workers, synced by ShadowSync\n"
    "(background), in the foreground every K steps, or not at all. Trains epochs over the\n"
    "rows in a new order each time (Adam on the dense part, row-wise Adagrad on the\n"
    "embeddings) until the loss on a validation split carved from the end of --train stops\n"
    "improving, and keeps the best epoch's model. Prints progress, then per trainer and in\n"
    "total: examples/s, sync rounds and gap, and the model's test NE (normalized by the\n"
    "training set's CTR, He et al. 2014; ne_test_ctr: by the test set's) and AUC.\n"
    "Online (--train - or --train-follow DIR): one pass over a stream, each example scored\n"
    "before it is trained on (progressive NE, over a sliding window and overall)."};

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
    if (q->n == 0) {
        printf("quality: no --test: the final model was not scored (the stream's progressive NE "
               "is its quality)\n");
        return;
    }
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

/* Online: the stream being read; SIGTERM and SIGINT end it. */
static ss__ctr_stream *the_stream;

static void on_stop_signal(int sig) {
    (void)sig;
    ss__ctr_stream_stop(the_stream);
}

/* Online: SIGTERM and SIGINT go to the stream's reader thread alone (every
 * thread started after this blocks them; the reader unblocks them), whose
 * handler ends the stream at the next line; the training goes on to the
 * end of what was read and reports. Then the stream's first chunk and
 * --test when given. 1 on failure (said on stderr). */
static int open_stream(const char *train_path, const char *follow_dir, size_t chunk_rows,
                       size_t rank, size_t world, const char *test_path, size_t max_test_rows,
                       const ss__ctr_dataset **first, ss__ctr_dataset *test) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    struct sigaction sa = {.sa_handler = on_stop_signal}; /* no SA_RESTART: reads return */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (test_path && ss__ctr_dataset_load(test_path, max_test_rows, test) != SS_OK) {
        fprintf(stderr, "ctr-train: cannot load --test %s (the log line above says why)\n",
                test_path);
        return 1;
    }
    const ss__ctr_stream_config sc = {.path = follow_dir ? NULL : train_path,
                                      .follow_dir = follow_dir,
                                      .chunk_rows = chunk_rows,
                                      .rank = rank,
                                      .world = world};
    if (ss__ctr_stream_open(&sc, &the_stream, NULL, 0) != SS_OK) {
        fprintf(stderr, "ctr-train: cannot read %s (the log line above says why)\n",
                follow_dir ? follow_dir : "standard input");
        return 1;
    }
    if (ss__ctr_stream_next(the_stream, first) != SS_OK || (*first)->nrows == 0) {
        fprintf(stderr, "ctr-train: the stream (%s) ended before its first well-formed row\n",
                follow_dir ? follow_dir : "standard input");
        return 1;
    }
    printf("ctr-train: online: train=%s chunk_rows=%zu test=%s rows=%zu\n",
           follow_dir ? follow_dir : "stdin", chunk_rows, test_path ? test_path : "none",
           test->nrows);
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
    if (cfg->stream) {
        ss__ctr_stream_stats ss;
        ss__ctr_stream_get_stats(cfg->stream, &ss);
        printf("summary-online: progressive_ne=%.5f progressive_ne_window=%.5f window_rows=%llu "
               "stream_rows=%llu skipped=%llu files=%llu stopped_by_signal=%d\n",
               res->progressive_ne, res->progressive_ne_window,
               (unsigned long long)cfg->progressive_window, (unsigned long long)ss.rows,
               (unsigned long long)ss.skipped, (unsigned long long)ss.files, ss.stopped);
    }
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

/* ctr-train's own flags into flags, each into the field it sets (its
 * default there); returns how many. The sync and table settings are the
 * library's keys (ss__setting_flags_add). */
static size_t own_flag_table(ss__ctr_cli *o, ss__flag *flags) {
    ss__ctr_train_config *c = &o->cfg;
    const ss__flag own[] = {
        {"train", SS_FLAG_STRING, &o->train_path,
         "training data, Criteo TSV (this or --train-follow required); - reads standard input "
         "as a stream: one pass, progressive NE",
         NULL, 0, 0},
        {"train-follow", SS_FLAG_STRING, &o->follow_dir,
         "online: read the files of this directory in name order as they appear, one pass, "
         "until DIR/_DONE or SIGTERM (names starting with . or _ or ending in .tmp skipped)",
         NULL, 0, 0},
        {"progressive-window", SS_FLAG_INT, (int64_t *)&c->progressive_window,
         "online: rows of the sliding window of progressive_ne_window", NULL, 1, 1e12},
        {"progressive-out", SS_FLAG_STRING, &o->progressive_out,
         "online: write \"rows clicks logloss_sum\" of every chunk here (a block bootstrap of "
         "progressive NE)",
         NULL, 0, 0},
        {"stream-chunk-rows", SS_FLAG_INT, &o->chunk_rows,
         "online: rows read ahead and trained per pass of the workers", NULL, 1, 1 << 20},
        {"test", SS_FLAG_STRING, &o->test_path,
         "held-out data, Criteo TSV (required, but optional online: scored at the end)", NULL, 0,
         0},
        {"max-rows", SS_FLAG_INT, &o->max_rows, "read at most this many training rows (0 = all)",
         NULL, 0, 1e12},
        {"max-test-rows", SS_FLAG_INT, &o->max_test_rows, "read at most this many test rows", NULL,
         0, 1e12},
        {"rank", SS_FLAG_INT, &o->rank,
         "process mode (--ps, --agent, --peers): this trainer's index (reads rows rank, "
         "rank+world, ...; its index in --peers)",
         NULL, 0, 65535},
        {"world", SS_FLAG_INT, &o->world, "process mode: number of trainer processes", NULL, 1,
         65536},
        {"trainers", SS_FLAG_U32, &c->trainers, "trainers (replicas), each reads 1/N of the data",
         NULL, 1, SS_CTR_MAX_TRAINERS},
        {"workers", SS_FLAG_U32, &c->workers, "Hogwild worker threads per trainer", NULL, 1, 256},
        {"error-feedback", SS_FLAG_BOOL, &c->error_feedback,
         "with --encoding, in-process trainers: false sends each quantized snapshot as it is, "
         "dropping what the quantization lost (an ablation, to measure what error feedback buys)",
         NULL, 0, 0},
        {"round-deadline-ms", SS_FLAG_U32, &c->round_deadline_ms,
         "in-process MA/BMUF: a round closes this long after its first snapshot", NULL, 1, 3.6e6},
        {"link-latency-us", SS_FLAG_U32, &c->link_latency_us,
         "emulate a network: one-way latency added to every sync exchange", NULL, 0, 1e7},
        {"link-gbps", SS_FLAG_DOUBLE, &c->link_gbps,
         "emulate a network: bandwidth of every sync exchange (0 = memory speed)", NULL, 0, 1e4},
        {"final-model", SS_FLAG_STRING, &o->final_model,
         "model to evaluate: trainer 0's replica or the central variable (auto: central for "
         "several in-process trainers that sync, else replica)",
         "auto|replica|central", 0, 0},
        {"lr-scaling", SS_FLAG_STRING, &o->lr_scaling,
         "N synced trainers each take 1/N of the steps and their replicas are averaged: linear "
         "multiplies the dense lr by N (the progress per epoch of one trainer), sqrt by sqrt(N), "
         "none keeps it; with ring or random --peers, N is 2 (the replicas a round averages)",
         "linear|sqrt|none", 0, 0},
        {"eval-each", SS_FLAG_BOOL, &c->eval_each, "also evaluate every trainer's replica", NULL, 0,
         0},
        {"batch", SS_FLAG_U32, &c->batch, "minibatch size per worker step", NULL, 1, 65536},
        {"epochs", SS_FLAG_U32, &c->epochs,
         "at most this many passes over the training rows (early stopping ends sooner)", NULL, 1,
         100000},
        {"patience", SS_FLAG_U32, &c->patience,
         "stop after this many epochs without a lower validation loss and evaluate the best "
         "epoch's model (0: run every epoch, evaluate the last)",
         NULL, 0, 100000},
        {"val-fraction", SS_FLAG_DOUBLE, &o->val_fraction,
         "validation split for early stopping: this fraction of --train's last rows, never "
         "trained on (used when --epochs > 1 and --patience > 0)",
         NULL, 0, 0.9},
        {"shuffle", SS_FLAG_BOOL, &c->shuffle,
         "every epoch, each trainer's rows in a new order (online: the stream's order, one pass)",
         NULL, 0, 0},
        {"train-val-last", SS_FLAG_BOOL, &c->train_val_last,
         "once early stopping has chosen the epoch, train one pass over the validation rows (the "
         "newest) in file order",
         NULL, 0, 0},
        {"optimizer", SS_FLAG_STRING, &o->optimizer,
         "the dense part's optimizer (each trainer keeps its own state)", "adam|adagrad|sgd", 0, 0},
        {"lr", SS_FLAG_DOUBLE, &o->lr, "dense learning rate", NULL, 1e-9, 100},
        {"table-rows", SS_FLAG_U32, &c->model.table_rows, "rows per embedding table", NULL, 2,
         1 << 26},
        {"bottom-hidden", SS_FLAG_U32, &c->model.bottom_hidden, "bottom MLP hidden width", NULL, 1,
         4096},
        {"top-hidden", SS_FLAG_U32, &c->model.top_hidden, "top MLP hidden width", NULL, 1, 4096},
        {"wide-lr", SS_FLAG_STRING, &o->wide_lr,
         "first-order weights (one per embedding row and per integer feature's log2 class) "
         "added to the logit, trained by SGD at this rate in [0, 1] (the wide part of Wide & "
         "Deep: it learns from an id's first examples); with a table (--emb local|remote|cached) "
         "they are a second table, ctr_wide, of one float per id, which costs examples/s; "
         "auto: " SS_CTR_WIDE_LR_ONLINE
         " on a stream with --emb array (chosen on bench/online-floor.sh's "
         "dev streams), else 0 (none)",
         NULL, 0, 0},
        {"seed", SS_FLAG_INT, (int64_t *)&c->seed, "initialization seed", NULL, 0, 0},
        {"emb-prefetch", SS_FLAG_BOOL, &c->emb_prefetch,
         "remote/cached: fetch the next batch's rows while this one trains", NULL, 0, 0},
        {"emb-warm-batches", SS_FLAG_U32, &c->emb_warm_batches,
         "cached: load the rows of this many upcoming batches into the cache in one call, ahead "
         "of their lookups (ss_table_warm; 0: each batch's misses in its own call)",
         NULL, 0, 1024},
        {"dense-out", SS_FLAG_STRING, &c->dense_out,
         "write trainer 0's final dense replica here (raw float32)", NULL, 0, 0},
        {"predictions-out", SS_FLAG_STRING, &c->predictions_out,
         "write the evaluated model's prediction for every test row here, one per line", NULL, 0,
         0},
        {"metrics-out", SS_FLAG_STRING, &o->metrics_out,
         "write the sync metrics in Prometheus text format to this file at the end", NULL, 0, 0},
        {"progress", SS_FLAG_DOUBLE, &c->progress_interval_s,
         "seconds between progress lines (0 = none)", NULL, 0, 3600},
    };
    memcpy(flags, own, sizeof own);
    return sizeof own / sizeof *own;
}

/* Step 1: flags (ctr-train's own and the library's settings), --help,
 * --version and the checks across flags (tools/ctr/cli.c); builds the
 * training config. -1: go on; otherwise the exit code. */
static int parse_options(int argc, char **argv, ss__ctr_cli *o) {
    ss__ctr_cli_init(o);
    ss__flag flags[128];
    size_t n = own_flag_table(o, flags);
    if (ss__ctr_cli_add_settings(o, flags, &n, sizeof flags / sizeof *flags) != SS_OK) {
        fprintf(stderr, "ctr-train: out of memory\n");
        return 1;
    }
    int rc = ss__flags_cli(&program, flags, n, argc, argv);
    if (rc >= 0)
        return rc;
    char why[256];
    const char *refusal =
        ss__ctr_cli_resolve(o, why, sizeof why) != SS_OK ? why : ss__ctr_cli_refusal(o);
    if (refusal)
        fprintf(stderr, "ctr-train: %s\n", refusal);
    return refusal ? 2 : -1;
}

/* Step 2: load the data, train, print per-trainer lines and the summary. */
static int train_and_report(ss__ctr_cli *o) {
    ss__ctr_train_config *cfg = &o->cfg;
    ss__ctr_dataset train = {0}, val = {0}, test = {0};
    const ss__ctr_dataset *first = &train; /* online: the stream's first chunk */
    if (o->online) {
        if (open_stream(o->train_path, o->follow_dir, o->chunk_rows, o->process ? o->rank : 0,
                        o->process ? o->world : 1, o->test_path, o->max_test_rows, &first,
                        &test) != 0) {
            ss__ctr_stream_close(the_stream);
            ss__ctr_dataset_free(&test);
            return 1;
        }
        cfg->stream = the_stream;
        if (o->progressive_out && !(cfg->progressive_out = fopen(o->progressive_out, "w"))) {
            fprintf(stderr, "ctr-train: cannot write --progressive-out %s: %s\n",
                    o->progressive_out, strerror(errno));
            ss__ctr_stream_close(the_stream);
            ss__ctr_dataset_free(&test);
            return 1;
        }
    } else if (load_data(o->train_path, o->max_rows, o->test_path, o->max_test_rows,
                         o->process ? o->rank : 0, o->process ? o->world : 1, cfg->trainers,
                         o->val_fraction, &train, &val, &test, &cfg->base_ctr) != 0) {
        return 1;
    }
    printf("ctr-train: trainers=%u workers=%u sync=%s algo=%s%s batch=%u optimizer=%s lr=%g%s "
           "emb_optimizer=%s emb_lr=%g wide_lr=%g epochs<=%u patience=%u shuffle=%s\n",
           cfg->trainers, cfg->workers, o->sync, o->algo,
           cfg->sync == SS_CTR_SYNC_FOREGROUND ? " (foreground)" : "", cfg->batch,
           ss__ctr_optimizer_name(cfg->optimizer), (double)cfg->lr, o->lr_note,
           cfg->emb_optimizer == SS_TABLE_ADAGRAD ? "adagrad" : "sgd", (double)cfg->emb_lr,
           (double)cfg->model.wide_lr, o->online ? 1 : cfg->epochs, val.nrows ? cfg->patience : 0,
           cfg->shuffle && !o->online ? "true" : "false");
    if (o->process)
        printf("ctr-train: process mode: trainer %s rank=%lld world=%lld ps=%s\n", o->pcfg.name,
               (long long)o->rank, (long long)o->world, o->ps);
    fflush(stdout);

    ss__ctr_train_result *res = malloc(sizeof *res);
    if (!res || (o->metrics_out && ss__metrics_create(&cfg->metrics, NULL, 0) != SS_OK)) {
        fprintf(stderr, "ctr-train: out of memory\n");
        return 1;
    }
    ss_status st = ss__ctr_train_run(cfg, first, &val, &test, res);
    int metrics_rc =
        (st == SS_OK && o->metrics_out) ? write_metrics(cfg->metrics, o->metrics_out) : 0;
    ss__metrics_destroy(cfg->metrics);
    if (st != SS_OK) {
        /* The library's message names the setting, the address and why. */
        fprintf(stderr, "ctr-train: training failed: %s\n",
                *res->error ? res->error : ss_strerror(st));
        free(res);
        ss__ctr_dataset_free(&train);
        ss__ctr_dataset_free(&val);
        ss__ctr_dataset_free(&test);
        ss__ctr_stream_close(the_stream);
        return 1;
    }
    const bool syncing = cfg->sync != SS_CTR_SYNC_NONE;
    for (uint32_t t = 0; t < cfg->trainers; t++)
        print_trainer(o->process ? (uint32_t)o->rank : t, &res->trainer[t], syncing,
                      cfg->eval_each);
    print_quality(res);
    print_summary(o->sync, o->algo, o->emb, cfg, res);
    if (syncing && res->rounds == 0) { /* trained alone, while sync was asked for */
        fprintf(stderr,
                "ctr-train: --sync %s was asked for, but no sync round completed: the "
                "model was trained alone (the warnings above say what could not be "
                "reached)\n",
                o->sync);
        metrics_rc = 1;
    }
    free(res);
    ss__ctr_dataset_free(&train);
    ss__ctr_dataset_free(&val);
    ss__ctr_dataset_free(&test);
    ss__ctr_stream_close(the_stream);
    if (cfg->progressive_out && fclose(cfg->progressive_out) != 0)
        metrics_rc = 1;
    return metrics_rc ? 1 : 0;
}

int main(int argc, char **argv) {
    ss__malloc_keep_large_buffers(); /* sync rounds reuse their megabyte buffers */
    ss__ctr_cli *o = calloc(1, sizeof *o);
    if (!o) {
        fprintf(stderr, "ctr-train: out of memory\n");
        return 1;
    }
    int rc = parse_options(argc, argv, o);
    if (rc < 0)
        rc = train_and_report(o);
    ss__setting_flags_destroy(o->settings);
    free(o);
    return rc;
}
