/* An embedding table's spec (embedding-store/emb_table.h) and its wire
 * form, TableSpec in embedding.proto: one spelling of the fields for the
 * client, the PS's service and rows moving between shards. */
#ifndef SS_RPC_EMB_SPEC_PB_H
#define SS_RPC_EMB_SPEC_PB_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "embedding-store/emb_table.h"
#include "rpc/emb/embedding.pb-c.h"

/* The spec's wire form; its name points into spec. */
static inline void ss__emb_spec_to_pb(const ss__emb_spec *spec, Shadowsync__V1__TableSpec *ts) {
    shadowsync__v1__table_spec__init(ts);
    ts->name = (char *)spec->name;
    ts->dim = spec->dim;
    ts->optimizer = (uint32_t)spec->optimizer;
    ts->lr = spec->lr;
    ts->eps = spec->eps;
    ts->init_scale = spec->init_scale;
}

/* A wire spec's numbers (dim, optimizer, lr, eps, init_scale) into spec,
 * its name left as it is. */
static inline void ss__emb_spec_numbers_from_pb(const Shadowsync__V1__TableSpec *ts,
                                                ss__emb_spec *spec) {
    spec->dim = ts->dim;
    spec->optimizer = (ss__emb_optimizer)ts->optimizer;
    spec->lr = ts->lr;
    spec->eps = ts->eps;
    spec->init_scale = ts->init_scale;
}

/* A whole wire spec into spec: false (spec untouched) when it has no
 * name or one too long for a table's. */
static inline bool ss__emb_spec_from_pb(const Shadowsync__V1__TableSpec *ts, ss__emb_spec *spec) {
    if (!ts || !ts->name || strlen(ts->name) >= sizeof spec->name)
        return false;
    memset(spec, 0, sizeof *spec);
    snprintf(spec->name, sizeof spec->name, "%s", ts->name);
    ss__emb_spec_numbers_from_pb(ts, spec);
    return true;
}

#endif
