/* Between hooks.c (trainers) and tables.c (embedding tables); not
 * exported (the version script keeps only the public names). */
#ifndef SS_HOOKS_INTERNAL_H
#define SS_HOOKS_INTERNAL_H

#include "shadowsync/rpc.h"
#include "shadowsync/shadowsync.h"

typedef struct ss_hooks_endpoint {
    const char *ps; /* NULL when the trainer has none */
    ss_rpc_tls tls;
    uint32_t timeout_ms;
} ss_hooks_endpoint;

void ss_hooks_endpoint_of(ss_trainer *t, ss_hooks_endpoint *out);
/* The trainer keeps the table: finish() flushes it, close() destroys it. */
ss_status ss_hooks_attach_table(ss_trainer *t, ss_table *tb);
ss_status ss_hooks_table_finish(ss_table *tb);
void ss_hooks_table_destroy(ss_table *tb);

#endif
