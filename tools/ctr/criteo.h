/* Criteo TSV reader: label, 13 integer features, 26 categorical features
 * (32-bit hex hashes); empty fields are missing values. Integers are
 * log-transformed (log1p of the value, negatives and missing as 0). */
#ifndef SS_CTR_CRITEO_H
#define SS_CTR_CRITEO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "shadowsync/status.h"

#define SS_CTR_NUM_DENSE 13
#define SS_CTR_NUM_CAT   26

typedef struct ss__ctr_example {
    float label; /* 0 or 1 */
    float dense[SS_CTR_NUM_DENSE];
    uint32_t cat[SS_CTR_NUM_CAT];
    uint32_t cat_missing; /* bit f set: categorical field f was empty */
} ss__ctr_example;

/* Parses one line (without or with its trailing newline). On failure
 * returns SS_ERR_PARSE and writes the reason to err. */
ss_status ss__criteo_parse_line(const char *line, size_t len, ss__ctr_example *ex, char *err,
                                size_t errlen);

typedef struct ss__ctr_dataset {
    ss__ctr_example *rows;
    size_t nrows;
    size_t skipped;        /* malformed lines skipped */
    size_t first_bad_line; /* 1-based line number of the first skip, 0 if none */
    char first_error[160]; /* its reason */
} ss__ctr_dataset;

/* Loads up to max_rows (0 = all) well-formed rows. Malformed lines are
 * skipped and counted; a missing or unreadable file is SS_ERR_IO. */
ss_status ss__ctr_dataset_load(const char *path, size_t max_rows, ss__ctr_dataset *out);
void ss__ctr_dataset_free(ss__ctr_dataset *ds);

/* A reader's state across calls: its line buffer, the line number, the
 * rows' capacity. Zero it to start; free(line) at the end. */
typedef struct ss__ctr_reader {
    char *line;
    size_t linecap, lineno, cap;
} ss__ctr_reader;

/* Appends the well-formed lines of f to out until max_rows rows (0: no
 * limit) or the end of f; malformed lines are skipped and counted as in
 * ss__ctr_dataset_load (name names f in the warnings). Stops early, with
 * SS_OK, when a read is interrupted by a signal (EINTR): the caller asks
 * why. SS_ERR_IO on a read error, SS_ERR_NO_MEMORY. */
ss_status ss__ctr_dataset_read(FILE *f, const char *name, size_t max_rows, ss__ctr_reader *rd,
                               ss__ctr_dataset *out);

/* The click rate: the share of rows labelled 1 (0 for no rows). */
double ss__ctr_dataset_ctr(const ss__ctr_dataset *ds);

#endif
