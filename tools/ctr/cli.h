/* ctr-train's command line, resolved: the fields its flags point into,
 * their "auto" values once the mode is known, the dense lr's scaling by
 * the synced trainers and the checks across flags. tools/ctr_train.c
 * declares the flags; this says what they mean together, where a test
 * can check it without a process (tests/test_ctr.c). */
#ifndef SS_CTR_CLI_H
#define SS_CTR_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/flags.h"
#include "tools/ctr/run.h"
#include "trainer-hooks/settings_flags.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the command line asks for: ctr-train's own flags point here and
 * into cfg (ss__ctr_train_config_default's values are their defaults),
 * the library's keys into settings. */
typedef struct ss__ctr_cli {
    ss__ctr_train_config cfg;
    ss_trainer_config pcfg;      /* process mode: this process's trainer */
    ss__setting_flags *settings; /* the library's keys as flags; pcfg points into it */
    char default_name[32];       /* t<rank>: --trainer-name auto */
    char round_wait[24];         /* --round-deadline-ms + 1000: --round-wait-ms auto */
    char defs[4][32];            /* ctr-train's own defaults of library keys, as text */
    bool process;
    int64_t rank, world, max_rows, max_test_rows, chunk_rows;
    double val_fraction; /* 0 once parsed: no validation split (one epoch, or no early stopping) */
    double lr;           /* --lr, before --lr-scaling */
    char lr_note[96];    /* how --lr was scaled, for the header line */
    const char *train_path, *test_path, *sync, *algo, *emb, *ps, *metrics_out;
    const char *follow_dir;      /* online: --train-follow */
    bool online;                 /* --train - or --train-follow */
    const char *progressive_out; /* online: per-chunk progressive sums */
    const char *final_model, *lr_scaling, *optimizer;
    const char *wide_lr; /* a rate, or auto */
} ss__ctr_cli;

/* --wide-lr auto on a stream with --emb array. */
#define SS_CTR_WIDE_LR_ONLINE "0.005"

/* ctr-train's own defaults (the library keys' come with settings). */
void ss__ctr_cli_init(ss__ctr_cli *o);
/* The library's keys as flags after flags[0 .. *n) (at most max in all),
 * into o->settings, with ctr-train's own defaults ("auto" where the mode
 * decides). */
ss_status ss__ctr_cli_add_settings(ss__ctr_cli *o, ss__flag *flags, size_t *n, size_t max);
/* Once the flags are parsed: the mode (one trainer per process when
 * --ps, --agent, --peers or --shard-map is given), the keys' "auto"
 * values, every key into pcfg and the table's config and from them into
 * cfg, then ctr-train's own "auto" values and the dense lr. SS_OK, or
 * the setting and why in why. */
ss_status ss__ctr_cli_resolve(ss__ctr_cli *o, char *why, size_t cap);
/* The checks across flags, once resolved: NULL, or why they do not go
 * together (naming the flags). */
const char *ss__ctr_cli_refusal(const ss__ctr_cli *o);

#ifdef __cplusplus
}
#endif

#endif
