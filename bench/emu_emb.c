/* shadowsync-emu-emb: the embedding writer of the fault soak
 * (bench/fault-soak.sh). It pushes gradients to rows never pushed before
 * and records the rows whose push was acknowledged, so that after the
 * soak (PS processes killed and restarted, links lossy or cut) it can
 * check that no acknowledged update was lost.
 *
 * Writing (the default): every --interval-ms it takes --rows new ids, looks
 * their rows up (a remote table), pushes one gradient per row and flushes.
 * A flush that returns SS_OK means the shards applied every row (with
 * `shadowsync-ps --sync-writes`, after their WAL was synced); only then are
 * the rows appended to --log, one line each: "id expected_first_float".
 * A lookup or flush that fails (a shard down, a cut link) is counted and
 * the rows are not logged. At the end it prints
 *   emu-emb: pushes=P acked=A failed=F rows_acked=R
 *
 * Verifying (--verify LOG): looks every logged row up and prints
 *   emu-emb-verify: acked=R found=M lost=L
 * (lost: rows whose first float is not the logged value); exit 1 if any. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/flags.h"
#include "shadowsync/shadowsync.h"

static const ss__program program = {
    "shadowsync-emu-emb",
    "The fault soak's embedding writer: pushes gradients to new rows of a remote table and logs "
    "the rows whose push was acknowledged; with --verify LOG, checks that every logged row holds "
    "its value."};

/* The gradient of row id: a value of its own, so a row left with another
 * row's update does not pass. */
static float grad_of(uint64_t id) {
    return 0.5f + (float)(id % 97) / 97.0f;
}

static int verify(ss_table *tb, uint32_t dim, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        return 2;
    }
    enum { BATCH = 1024 };
    uint64_t ids[BATCH];
    float want[BATCH];
    float *rows = malloc(sizeof *rows * BATCH * dim);
    uint64_t acked = 0, found = 0, lost = 0, failed = 0;
    size_t n = 0;
    int eof = 0;
    while (!eof && rows) {
        unsigned long long id;
        float v;
        if (fscanf(f, "%llu %f", &id, &v) == 2) {
            ids[n] = id;
            want[n++] = v;
            acked++;
        } else {
            eof = 1;
        }
        if (n == BATCH || (eof && n > 0)) {
            ss_status st = ss_table_lookup(tb, ids, n, rows);
            if (st != SS_OK) {
                fprintf(stderr, "%s: lookup: %s\n", program.name, ss_strerror(st));
                failed += n;
            } else {
                for (size_t i = 0; i < n; i++) {
                    if (fabsf(rows[i * dim] - want[i]) <= 1e-5f * (1.0f + fabsf(want[i]))) {
                        found++;
                    } else {
                        if (lost < 5)
                            fprintf(stderr, "%s: row %llu holds %.7g, acknowledged %.7g\n",
                                    program.name, (unsigned long long)ids[i], rows[i * dim],
                                    want[i]);
                        lost++;
                    }
                }
            }
            n = 0;
        }
    }
    fclose(f);
    free(rows);
    printf("emu-emb-verify: acked=%llu found=%llu lost=%llu unreadable=%llu\n",
           (unsigned long long)acked, (unsigned long long)found, (unsigned long long)lost,
           (unsigned long long)failed);
    return lost == 0 && failed == 0 ? 0 : 1;
}

static int write_rows(ss_table *tb, uint32_t dim, const char *path, int64_t rows_per_push,
                      int64_t interval_ms, uint64_t until_ms, uint64_t base) {
    FILE *log = fopen(path, "a");
    if (!log) {
        perror(path);
        return 2;
    }
    const size_t n = (size_t)rows_per_push;
    uint64_t *ids = malloc(sizeof *ids * n);
    float *before = malloc(sizeof *before * n * dim), *grads = malloc(sizeof *grads * n * dim);
    uint64_t next_id = base, pushes = 0, acked = 0, failed = 0, rows_acked = 0;
    while (ids && before && grads && ss__unix_ms() < until_ms) {
        for (size_t i = 0; i < n; i++) {
            ids[i] = next_id++;
            for (uint32_t d = 0; d < dim; d++)
                grads[i * dim + d] = grad_of(ids[i]);
        }
        pushes++;
        ss_status st = ss_table_lookup(tb, ids, n, before);
        if (st == SS_OK)
            st = ss_table_push(tb, ids, n, grads);
        if (st == SS_OK)
            st = ss_table_flush(tb);
        if (st == SS_OK) {
            /* SGD: row -= lr * grad, the table's default lr 0.05. */
            for (size_t i = 0; i < n; i++)
                fprintf(log, "%llu %.9g\n", (unsigned long long)ids[i],
                        before[i * dim] - 0.05f * grads[i * dim]);
            fflush(log);
            acked++;
            rows_acked += n;
        } else {
            failed++;
        }
        ss__sleep_ns((uint64_t)interval_ms * 1000000u);
    }
    fclose(log);
    free(ids);
    free(before);
    free(grads);
    printf("emu-emb: pushes=%llu acked=%llu failed=%llu rows_acked=%llu\n",
           (unsigned long long)pushes, (unsigned long long)acked, (unsigned long long)failed,
           (unsigned long long)rows_acked);
    return 0;
}

int main(int argc, char **argv) {
    const char *ps = "", *shard_map = "", *table = "soak", *log = "emu-emb.log", *check = "";
    int64_t dim = 16, rows = 16, interval_ms = 50, until_ms = 0;
    double seconds = 10;
    ss__flag flags[] = {
        {"ps", SS_FLAG_STRING, &ps, "PS shards, host:port[,host:port...]", NULL, 0, 0},
        {"shard-map", SS_FLAG_STRING, &shard_map,
         "instead of --ps: the shards of a shard map file, routed again when it moves on", NULL, 0,
         0},
        {"table", SS_FLAG_STRING, &table, "the table's name", NULL, 0, 0},
        {"dim", SS_FLAG_INT, &dim, "floats per row", NULL, 1, 4096},
        {"rows", SS_FLAG_INT, &rows, "new rows per push", NULL, 1, 65536},
        {"interval-ms", SS_FLAG_INT, &interval_ms, "pause between pushes", NULL, 0, 60000},
        {"seconds", SS_FLAG_DOUBLE, &seconds, "how long to write", NULL, 0.01, 86400},
        {"until-ms", SS_FLAG_INT, &until_ms,
         "stop at this CLOCK_REALTIME time, ms since the epoch (0 = after --seconds)", NULL, 0, 0},
        {"log", SS_FLAG_STRING, &log, "the acknowledged rows are appended here", NULL, 0, 0},
        {"verify", SS_FLAG_STRING, &check, "check the rows of this log instead of writing", NULL, 0,
         0},
    };
    int code = ss__flags_cli(&program, flags, sizeof flags / sizeof *flags, argc, argv);
    if (code >= 0)
        return code;
    if (!*ps == !*shard_map) {
        fprintf(stderr, "%s: --ps or --shard-map (one of them) is required\n", program.name);
        return 2;
    }
    ss_table_config tc;
    ss_table_config_init(&tc, table, (uint32_t)dim);
    tc.mode = SS_TABLE_REMOTE;
    tc.ps = *ps ? ps : NULL;
    tc.shard_map = *shard_map ? shard_map : NULL;
    ss_table *tb = NULL;
    ss_status st = ss_table_open(NULL, &tc, &tb);
    if (st != SS_OK) {
        fprintf(stderr, "%s: opening table %s on %s: %s\n", program.name, table,
                *ps ? ps : shard_map, ss_last_error());
        return 1;
    }
    const uint64_t start = ss__unix_ms();
    /* Ids from the start time: a writer started again writes new rows. */
    code = *check
               ? verify(tb, (uint32_t)dim, check)
               : write_rows(tb, (uint32_t)dim, log, rows, interval_ms,
                            until_ms > 0 ? (uint64_t)until_ms : start + (uint64_t)(seconds * 1000),
                            start << 20);
    ss_table_close(tb);
    return code;
}
