/* What hooks.c and tables.c share of settings.c: reading a caller's
 * config struct. Not exported (the version script keeps only the public
 * names). The last error is errors_internal.h's. */
#ifndef SS_SETTINGS_INTERNAL_H
#define SS_SETTINGS_INTERNAL_H

#include "shadowsync/shadowsync.h"

/* Copies cfg into *out, filling the fields its struct_size does not
 * cover with defaults; says why a struct cannot be read. */
ss_status ss__trainer_config_read(const ss_trainer_config *cfg, ss_trainer_config *out);
ss_status ss__table_config_read(const ss_table_config *cfg, ss_table_config *out);

#endif
