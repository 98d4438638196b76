/* Between hooks.c (trainers) and tables.c (embedding tables); not
 * exported (the version script keeps only the public names). */
#ifndef SS_HOOKS_INTERNAL_H
#define SS_HOOKS_INTERNAL_H

#include "rpc/rpc.h"
#include "shadowsync/shadowsync.h"

typedef struct ss__hooks_endpoint {
    const char *ps; /* NULL when the trainer has none */
    ss__rpc_tls tls;
    uint32_t timeout_ms;
} ss__hooks_endpoint;

void ss__hooks_endpoint_of(ss_trainer *t, ss__hooks_endpoint *out);
/* The trainer keeps the table: finish() flushes it, close() destroys it. */
ss_status ss__hooks_attach_table(ss_trainer *t, ss_table *tb);
ss_status ss__hooks_table_finish(ss_table *tb);
void ss__hooks_table_destroy(ss_table *tb);

#endif
