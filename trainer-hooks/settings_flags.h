/* The library's settings as a program's command-line flags: one flag per
 * key of the trainer and table key tables (trainer-hooks/settings.c),
 * named after its key with '-' for '_' (alpha, rpc-timeout-ms, emb-lr),
 * its environment fallback SHADOWSYNC_<KEY> as every flag's, its help the
 * key's, marked "(library setting)". A program declares only its own
 * extras; the values go through ss_trainer_config_set /
 * ss_table_config_set, the one door that checks a setting's range.
 * tests/repo/test_setting_flags.py fails when a program declares a flag of a
 * key's name by hand. */
#ifndef SS_TRAINER_HOOKS_SETTINGS_FLAGS_H
#define SS_TRAINER_HOOKS_SETTINGS_FLAGS_H

#include <stddef.h>

#include "common/flags.h"
#include "shadowsync/shadowsync.h"

#define SS_SETTING_FLAG_MARK "(library setting)"

typedef struct ss__setting_flags ss__setting_flags;

/* A program's default for a key where it differs from the library's (the
 * reference trainer's model, say), or a value the program reads itself
 * ("auto"); shown in --help as the default. */
typedef struct ss__setting_default {
    const char *key; /* "emb_lr" */
    const char *value;
    const char *note; /* appended to the key's help, or NULL */
} ss__setting_default;

/* Appends a flag per library key to flags[*n .. max): every key, or only
 * those named in only, less those named in skip (both NULL-terminated
 * lists of key names; either may be NULL). The defaults come from
 * ss_trainer_config_init / ss_table_config_init, or from defaults (up to
 * a { NULL } entry). SS_ERR_TOO_LARGE: flags has no room. */
ss_status ss__setting_flags_add(const char *const *only, const char *const *skip,
                                const ss__setting_default *defaults, ss__flag *flags, size_t *n,
                                size_t max, ss__setting_flags **out);
void ss__setting_flags_destroy(ss__setting_flags *s);

/* The value a key's flag holds after parsing (its default when not
 * given; NULL for an unset string). */
const char *ss__setting_flag(const ss__setting_flags *s, const char *key);
/* Replaces a key's value (a program's "auto" resolved). */
void ss__setting_flag_set(ss__setting_flags *s, const char *key, const char *value);

/* Every key's value into trainer and table (whole structs, from
 * ss_*_config_init) through the key table's one check of its value. On a
 * bad value its status, and ss_last_error() names the flag and why
 * ("--alpha=\"x\": not a finite number"). */
ss_status ss__setting_flags_apply(const ss__setting_flags *s, ss_trainer_config *trainer,
                                  ss_table_config *table);

#endif
