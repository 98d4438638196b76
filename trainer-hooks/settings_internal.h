/* What hooks.c and tables.c share of settings.c: the per-thread last
 * error behind ss_last_error(), and the names of settings for messages.
 * Not exported (the version script keeps only the public names). */
#ifndef SS_SETTINGS_INTERNAL_H
#define SS_SETTINGS_INTERNAL_H

#include "shadowsync/shadowsync.h"

/* Every public call starts with ss__err_begin() (forgets the previous
 * call's message) and returns through ss__err_end(st): a failure that
 * said nothing more gets ss_strerror's text, so ss_last_error() always
 * describes the last call that failed in this thread. */
void ss__err_begin(void);
ss_status ss__err_end(ss_status st);

/* Sets the message (printf-style; logged at debug level too) and returns
 * st. */
ss_status ss__err_set(ss_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Copies cfg into *out, filling the fields its struct_size does not
 * cover with defaults; says why a struct cannot be read. */
ss_status ss__trainer_config_read(const ss_trainer_config *cfg, ss_trainer_config *out);
ss_status ss__table_config_read(const ss_table_config *cfg, ss_table_config *out);

#endif
