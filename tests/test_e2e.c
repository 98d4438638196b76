/* End to end: the ctr-gen and ctr-train binaries as a user runs them.
 * Model quality of background sync against a single replica, generator
 * determinism, and clear errors for bad command lines. */
#include <check.h>

#include "check_run.h"
#include "procs.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char workdir[] = "/tmp/ss__e2e_XXXXXX";

/* Runs a shell command, captures stdout+stderr into out, returns exit code. */
static int run(const char *cmd, char *out, size_t cap) {
    char full[2048];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static double field(const char *text, const char *line_prefix, const char *key) {
    const char *line = strstr(text, line_prefix);
    ck_assert_msg(line != NULL, "no '%s' line in:\n%s", line_prefix, text);
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *v = strstr(line, pat);
    ck_assert_msg(v != NULL, "no %s in: %s", key, line);
    return atof(v + strlen(pat));
}

static char out[1 << 16];

START_TEST(test_generator_deterministic) {
    char cmd[1024];
    for (int k = 0; k < 3; k++) {
        snprintf(cmd, sizeof cmd, "%s --rows 3000 --model-seed 5 --data-seed %d --out %s/g%d.tsv",
                 CTR_GEN, k == 2 ? 9 : 1, workdir, k);
        ck_assert_int_eq(run(cmd, out, sizeof out), 0);
        ck_assert_ptr_nonnull(strstr(out, "bayes_ne="));
    }
    snprintf(cmd, sizeof cmd, "cmp -s %s/g0.tsv %s/g1.tsv", workdir, workdir);
    ck_assert_int_eq(system(cmd), 0); /* same seeds: same bytes */
    snprintf(cmd, sizeof cmd, "cmp -s %s/g0.tsv %s/g2.tsv", workdir, workdir);
    ck_assert_int_ne(system(cmd), 0);
}
END_TEST

START_TEST(test_background_sync_matches_single_replica) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s --rows 400000 --model-seed 42 --data-seed 1 --out %s/train.tsv && "
             "%s --rows 50000 --model-seed 42 --data-seed 2 --out %s/test.tsv",
             CTR_GEN, workdir, CTR_GEN, workdir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
    double bayes = field(out, "ctr-gen: rows=50000", "bayes_ne");

    snprintf(cmd, sizeof cmd,
             "%s --train %s/train.tsv --test %s/test.tsv --trainers 1 --sync none --progress 0",
             CTR_TRAIN, workdir, workdir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
    double ne1 = field(out, "summary:", "test_ne_train_ctr");
    double ex1 = field(out, "summary:", "examples");

    snprintf(cmd, sizeof cmd,
             "%s --train %s/train.tsv --test %s/test.tsv --trainers 4 --sync shadow "
             "--algo easgd --progress 0 --eval-each",
             CTR_TRAIN, workdir, workdir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
    double ne4 = field(out, "summary:", "test_ne_train_ctr");
    double ex4 = field(out, "summary:", "examples");
    double rounds = field(out, "summary:", "sync_rounds_sum");
    fprintf(stderr, "e2e: bayes_ne=%.4f ne_1_replica=%.4f ne_4_replicas_easgd=%.4f rounds=%.0f\n",
            bayes, ne1, ne4, rounds);

    ck_assert_double_eq(ex1, 400000);
    ck_assert_double_eq(ex4, 400000); /* the same total examples */
    ck_assert_double_gt(rounds, 0);
    ck_assert_double_lt(ne1, 0.95);
    ck_assert_double_lt(ne4, 0.95);
    ck_assert_double_gt(ne1, bayes - 0.01); /* nobody beats the truth */
    ck_assert_msg(ne4 <= 1.01 * ne1, "4 replicas NE %.4f > 1.01 x single replica NE %.4f", ne4,
                  ne1);
    /* Every replica, not just trainer 0, reached the same quality, and the
     * final rounds brought them together: unsynced replicas differ by
     * about 1e-3 in NE, synced ones agree to 1e-4. */
    double lo = 1e9, hi = 0;
    for (int t = 0; t < 4; t++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "trainer %d:", t);
        double ne = field(out, prefix, "ne");
        ck_assert_double_le(ne, 1.01 * ne1);
        lo = ne < lo ? ne : lo;
        hi = ne > hi ? ne : hi;
    }
    ck_assert_msg(hi - lo <= 2e-4, "replicas disagree: NE from %.4f to %.4f", lo, hi);
}
END_TEST

START_TEST(test_cli_bad_input) {
    /* a program, its arguments, its exit code, what it says (NULL: anything) */
    static const struct {
        const char *program, *args;
        int code;
        const char *says;
    } bad[] = {
        {CTR_TRAIN, "--train /nonexistent.tsv --test /nonexistent.tsv", 1, "cannot load data"},
        {CTR_TRAIN, "--train a --test b --sync sometimes", 2, "none|shadow|foreground"},
        {CTR_TRAIN, "--train a --test b --min-round-gap -1", 2,
         "--min-round-gap=\"-1\": not a whole number"},
        {CTR_TRAIN, "--train a --test b --alpha 1.5", 2, "alpha"}, /* the library's one check */
        {CTR_TRAIN, "--train a --test b --chunk-floats 65536", 2,  /* in process: nothing to cut */
         "--chunk-floats cuts the dense groups sent to --ps"},
        {CTR_TRAIN, "--train a --test b --trainers 0", 2, NULL},
        {CTR_TRAIN, "--test b", 2, "one of --train and --train-follow is required"},
        {CTR_TRAIN, "--train a", 2, "--test is required"},
        {CTR_GEN, "--rows ten --out x", 2, NULL},
        {CTR_GEN, "--rows 10 --out /nonexistent/dir/x.tsv", 1, "cannot open"},
    };
    char cmd[1024];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(cmd, sizeof cmd, "%s %s", bad[i].program, bad[i].args);
        ck_assert_msg(run(cmd, out, sizeof out) == bad[i].code, "%s: exit not %d: %s", cmd,
                      bad[i].code, out);
        ck_assert_msg(!bad[i].says || strstr(out, bad[i].says), "%s said: %s", cmd, out);
    }
    /* Training on a file of garbage: every line skipped, a clear error. */
    snprintf(cmd, sizeof cmd,
             "head -c 3000 /dev/urandom > %s/junk.tsv; %s --train %s/junk.tsv --test %s/junk.tsv",
             workdir, CTR_TRAIN, workdir, workdir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 1);
    ck_assert_ptr_nonnull(strstr(out, "need at least one training row"));
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s --help", k ? CTR_GEN : CTR_TRAIN);
        ck_assert_int_eq(run(cmd, out, sizeof out), 0);
        ck_assert_ptr_nonnull(strstr(out, "Usage:"));
        ck_assert_ptr_nonnull(strstr(out, "SHADOWSYNC_"));
    }
}
END_TEST

START_TEST(test_real_criteo_sample_trains) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s --train %s/criteo-kaggle-head-8000.tsv --max-rows 6000 "
             "--test %s/criteo-kaggle-head-8000.tsv --trainers 2 --sync shadow --algo ma "
             "--progress 0",
             CTR_TRAIN, SS_DATA_DIR, SS_DATA_DIR);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
    ck_assert_double_eq(field(out, "summary:", "examples"), 6000);
    double rounds = field(out, "summary:", "sync_rounds_sum");
    ck_assert_double_gt(rounds, 0);
    double auc = field(out, "summary:", "test_auc");
    ck_assert_double_gt(auc, 0.5);

    /* The same run with --metrics-out: the registry holds the engines'
     * counters, and they agree with the summary. */
    char prom[600];
    snprintf(prom, sizeof prom, "%s/metrics.prom", workdir);
    snprintf(cmd, sizeof cmd,
             "%s --train %s/criteo-kaggle-head-8000.tsv --max-rows 6000 "
             "--test %s/criteo-kaggle-head-8000.tsv --trainers 2 --sync shadow --algo ma "
             "--progress 0 --metrics-out %s",
             CTR_TRAIN, SS_DATA_DIR, SS_DATA_DIR, prom);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
    rounds = field(out, "summary:", "sync_rounds_sum");
    FILE *f = fopen(prom, "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    double metric_rounds = 0;
    int help_lines = 0;
    while (fgets(line, sizeof line, f)) {
        help_lines += strncmp(line, "# HELP shadowsync_", 18) == 0;
        if (strncmp(line, "shadowsync_sync_rounds_total{", 29) == 0)
            metric_rounds += atof(strrchr(line, ' ') + 1);
    }
    fclose(f);
    ck_assert_int_ge(help_lines, 8);
    ck_assert_double_eq(metric_rounds, rounds);
    snprintf(cmd, sizeof cmd,
             "%s --train %s/criteo-kaggle-head-8000.tsv --max-rows 100 "
             "--test %s/criteo-kaggle-head-8000.tsv --progress 0 --metrics-out /nonexistent/m",
             CTR_TRAIN, SS_DATA_DIR, SS_DATA_DIR);
    ck_assert_int_eq(run(cmd, out, sizeof out), 1);
    ck_assert_ptr_nonnull(strstr(out, "cannot write metrics"));
}
END_TEST

/* ctr-train with its embeddings in a table of the public API: remote
 * (rows on a shadowsync-ps) and cached (local cache synced by elastic
 * averaging) reach the NE of local within 1%. */
START_TEST(test_emb_modes_match_local) {
    char cmd[1024], log[256], target[64];
    snprintf(cmd, sizeof cmd,
             "%s --rows 200000 --model-seed 42 --data-seed 1 --out %s/emb-train.tsv && "
             "%s --rows 50000 --model-seed 42 --data-seed 2 --out %s/emb-test.tsv",
             CTR_GEN, workdir, CTR_GEN, workdir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
    const char *modes[] = {"local", "remote", "cached"};
    double ne[3];
    for (int m = 0; m < 3; m++) {
        pid_t ps = 0;
        char emb_ps[96] = "";
        if (m > 0) { /* a fresh PS per mode: no rows trained by another run */
            snprintf(log, sizeof log, "%s/emb-ps.log", workdir);
            ps = proc_start_ps(log, target, sizeof target, "127.0.0.1:0", NULL);
            snprintf(emb_ps, sizeof emb_ps, "--emb-ps %s", target);
        }
        snprintf(cmd, sizeof cmd,
                 "%s --train %s/emb-train.tsv --test %s/emb-test.tsv --sync none --progress 0 "
                 "--emb %s %s",
                 CTR_TRAIN, workdir, workdir, modes[m], emb_ps);
        ck_assert_int_eq(run(cmd, out, sizeof out), 0);
        ne[m] = field(out, "summary:", "test_ne_train_ctr");
        ck_assert_double_eq(field(out, "embeddings:", "failed_calls"), 0);
        if (m == 2)
            ck_assert_double_gt(field(out, "embeddings:", "synced_rows"), 0);
        if (ps) {
            kill(ps, SIGTERM);
            ck_assert_int_eq(WEXITSTATUS(proc_wait(ps, 30)), 0);
        }
    }
    fprintf(stderr, "e2e: ne local=%.4f remote=%.4f cached=%.4f\n", ne[0], ne[1], ne[2]);
    ck_assert_double_lt(ne[0], 0.97);
    ck_assert_double_le(ne[1], 1.01 * ne[0]);
    ck_assert_double_le(ne[2], 1.01 * ne[0]);
}
END_TEST

/* ctr-train's own defaults (the suite's SHADOWSYNC_EPOCHS=1 unset) on a
 * time split of the Criteo rows: epochs with a validation line each, early
 * stopping, the validation rows trained last, a prediction per test row
 * whose mean is the one reported; and a test set of one class is scored
 * with what can be defined and says so. */
START_TEST(test_default_protocol_on_criteo) {
    char cmd[2048];
    unsetenv("SHADOWSYNC_EPOCHS");
    snprintf(cmd, sizeof cmd,
             "head -6400 %s/criteo-kaggle-head-8000.tsv > %s/c-train.tsv && "
             "tail -1600 %s/criteo-kaggle-head-8000.tsv > %s/c-test.tsv && "
             "%s --train %s/c-train.tsv --test %s/c-test.tsv --progress 0 "
             "--predictions-out %s/c-pred.txt",
             SS_DATA_DIR, workdir, SS_DATA_DIR, workdir, CTR_TRAIN, workdir, workdir, workdir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "validation_rows=640"));
    ck_assert_ptr_nonnull(strstr(out, "epoch 1: validation rows=640 logloss="));
    ck_assert_ptr_nonnull(strstr(out, "sync=none")); /* one in-process trainer: nothing to sync */
    double epochs = field(out, "summary:", "epochs"), best = field(out, "summary:", "best_epoch");
    ck_assert_double_ge(epochs, 2); /* early stopping needs an epoch that was not better */
    ck_assert_double_le(best, epochs);
    /* 5760 rows per epoch, then the 640 validation rows once. */
    ck_assert_double_eq(field(out, "summary:", "examples"), 5760 * epochs + 640);
    ck_assert_double_lt(field(out, "summary:", "test_ne_train_ctr"), 0.95);
    ck_assert_double_gt(field(out, "summary:", "test_auc"), 0.70);
    char path[600];
    snprintf(path, sizeof path, "%s/c-pred.txt", workdir);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    double p, sum = 0;
    int n = 0;
    while (fscanf(f, "%lf", &p) == 1) {
        ck_assert(p > 0 && p < 1);
        sum += p;
        n++;
    }
    fclose(f);
    ck_assert_int_eq(n, 1600);
    ck_assert_double_eq_tol(sum / n, field(out, "summary:", "test_mean_prediction"), 1e-4);

    snprintf(cmd, sizeof cmd,
             "grep '^0' %s/c-test.tsv > %s/c-zeros.tsv && %s --train %s/c-train.tsv --test "
             "%s/c-zeros.tsv --progress 0 --epochs 1",
             workdir, workdir, CTR_TRAIN, workdir, workdir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "the test set holds only label 0"));
    ck_assert_ptr_nonnull(strstr(out, "test_auc=nan"));
    snprintf(cmd, sizeof cmd, "%s --train %s/c-zeros.tsv --test %s/c-test.tsv --progress 0",
             CTR_TRAIN, workdir, workdir);
    ck_assert_int_eq(run(cmd, out, sizeof out), 1);
    ck_assert_ptr_nonnull(strstr(out, "has label 0: a click model needs both"));
}
END_TEST

int main(void) {
    if (!mkdtemp(workdir)) {
        perror("mkdtemp");
        return EXIT_FAILURE;
    }
    int rc =
        ss__check_tests("e2e", 900, NULL, NULL, test_generator_deterministic, test_cli_bad_input,
                        test_real_criteo_sample_trains, test_background_sync_matches_single_replica,
                        test_emb_modes_match_local, test_default_protocol_on_criteo);
    proc_remove_tree(workdir);
    return rc;
}
