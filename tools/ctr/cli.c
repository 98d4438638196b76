/* ctr-train's command line, resolved (cli.h). */
#include "tools/ctr/cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shadow/engine.h"

void ss__ctr_cli_init(ss__ctr_cli *o) {
    *o = (ss__ctr_cli){.world = 1,
                       .chunk_rows = 16384,
                       .val_fraction = 0.1,
                       .final_model = "auto",
                       .lr_scaling = "linear",
                       .optimizer = "adam",
                       .wide_lr = "auto"};
    ss__ctr_train_config_default(&o->cfg);
    o->cfg.progressive_window = 100000;
    o->lr = o->cfg.lr;
}

/* The library keys whose ctr-train default is its own, or resolved by it
 * ("auto"). defs holds the rendered numbers. */
static void program_defaults(const ss__ctr_train_config *cfg, char defs[4][32],
                             ss__setting_default out[10]) {
    snprintf(defs[0], 32, "%u", cfg->model.emb_dim);
    snprintf(defs[1], 32, "%g", (double)cfg->emb_lr);
    snprintf(defs[2], 32, "%g", (double)cfg->model.emb_init_scale);
    const ss__setting_default d[10] = {
        {"sync", "auto", "auto: shadow, or none for one in-process trainer (nothing to sync with)"},
        {"min_round_gap", "auto",
         "auto: 1 for in-process trainers, whose rounds cost microseconds; the library's 4 through "
         "a PS, an agent or peers"},
        {"round_wait_ms", "auto", "auto: --round-deadline-ms + 1000"},
        {"trainer_name", "auto", "auto: t<rank>"},
        {"emb", "array",
         "or array: ctr-train's shared in-process array, updated per example (no table)"},
        {"emb_dim", defs[0], NULL},
        {"emb_optimizer", "adagrad", NULL},
        {"emb_lr", defs[1], NULL},
        {"emb_init_scale", defs[2], NULL},
        {NULL, NULL, NULL}};
    memcpy(out, d, sizeof d);
}

ss_status ss__ctr_cli_add_settings(ss__ctr_cli *o, ss__flag *flags, size_t *n, size_t max) {
    ss__setting_default defaults[10];
    program_defaults(&o->cfg, o->defs, defaults);
    static const char *const skip[] = {"peer_rank", NULL}; /* --rank */
    return ss__setting_flags_add(NULL, skip, defaults, flags, n, max, &o->settings);
}

/* The "auto" values, now that the mode is known; then every library key
 * into pcfg and the table's config, and from them into cfg. */
static ss_status apply_settings(ss__ctr_cli *o, ss_table_config *table, char *why, size_t cap) {
    const bool process = o->process;
    ss__setting_flags *st = o->settings;
    const char *sync = ss__setting_flag(st, "sync");
    if (!strcmp(sync, "auto")) /* one in-process trainer has nothing to sync with */
        ss__setting_flag_set(st, "sync", o->cfg.trainers == 1 && !process ? "none" : "shadow");
    if (!strcmp(ss__setting_flag(st, "min_round_gap"), "auto"))
        ss__setting_flag_set(st, "min_round_gap", process ? NULL : "1");
    snprintf(o->round_wait, sizeof o->round_wait, "%llu",
             (unsigned long long)o->cfg.round_deadline_ms + 1000);
    if (!strcmp(ss__setting_flag(st, "round_wait_ms"), "auto"))
        ss__setting_flag_set(st, "round_wait_ms", o->round_wait);
    snprintf(o->default_name, sizeof o->default_name, "t%lld", (long long)o->rank);
    if (!strcmp(ss__setting_flag(st, "trainer_name"), "auto"))
        ss__setting_flag_set(st, "trainer_name", o->default_name);
    o->emb = ss__setting_flag(st, "emb");
    const bool array = !strcmp(o->emb, "array");
    if (array)
        ss__setting_flag_set(st, "emb", NULL);
    ss_trainer_config_init(&o->pcfg);
    ss_table_config_init(table, "ctr", 8);
    ss_status s = ss__setting_flags_apply(st, &o->pcfg, table);
    if (s != SS_OK) {
        snprintf(why, cap, "%s", ss_last_error());
        return s;
    }
    if ((s = ss__ctr_train_config_settings(&o->cfg, &o->pcfg, table, why, cap)) != SS_OK ||
        (s = ss__sync_params_check(&o->cfg.params, why, cap)) != SS_OK)
        return s;
    o->cfg.emb = array ? SS_CTR_EMB_ARRAY : (ss__ctr_emb_mode)(table->mode + 1);
    o->pcfg.peer_rank = (uint32_t)o->rank;
    o->pcfg.agent = o->pcfg.agent && *o->pcfg.agent ? o->pcfg.agent : NULL;
    o->pcfg.peers = o->pcfg.peers && *o->pcfg.peers ? o->pcfg.peers : NULL;
    o->pcfg.ps = o->pcfg.ps ? o->pcfg.ps : "";
    if (!o->cfg.emb_ps || !*o->cfg.emb_ps)
        o->cfg.emb_ps = o->pcfg.ps;
    return SS_OK;
}

/* The dense lr times the number of synced trainers (--lr-scaling). */
static float scaled_lr(ss__ctr_cli *o, int64_t synced) {
    double lr = o->lr;
    if (strcmp(o->lr_scaling, "none") != 0 && synced > 1) {
        const bool sq = !strcmp(o->lr_scaling, "sqrt");
        snprintf(o->lr_note, sizeof o->lr_note, " (--lr %g x %s%lld%s synced trainers)", lr,
                 sq ? "sqrt(" : "", (long long)synced, sq ? ")" : "");
        o->cfg.lr_scale = (float)(sq ? sqrt((double)synced) : (double)synced);
        lr *= o->cfg.lr_scale;
    }
    return (float)lr;
}

/* What ctr-train's own flags decide once the mode is known. */
static void resolve_own(ss__ctr_cli *o) {
    ss__ctr_train_config *cfg = &o->cfg;
    ss__ctr_sync_mode_parse(o->sync, &cfg->sync);
    const bool in_process_sync = !o->process && cfg->trainers > 1 && cfg->sync != SS_CTR_SYNC_NONE;
    const char *model = o->final_model;
    if (!strcmp(model, "auto"))
        model = in_process_sync ? "central" : "replica";
    cfg->eval_central = !strcmp(model, "central");
    int64_t synced = cfg->sync == SS_CTR_SYNC_NONE ? 1 : o->process ? o->world : cfg->trainers;
    /* Ring or random gossip averages two replicas a round, not all of them,
     * so the linear rule's N is 2: with 4 processes the 4x lr left some
     * replicas far from the others (held-out NE up to 0.936 against 0.905).
     * Trees average every one. */
    if (o->pcfg.peers && strcmp(o->pcfg.peer_schedule, "tree") != 0 && synced > 2)
        synced = 2;
    cfg->lr = scaled_lr(o, synced);
    ss__ctr_optimizer_parse(o->optimizer, &cfg->optimizer);
    cfg->progress = stdout;
    if (!(cfg->epochs > 1 && cfg->patience > 0))
        o->val_fraction = 0.0;
    o->online = o->follow_dir || (o->train_path && !strcmp(o->train_path, "-"));
    char *end = NULL;
    double wide = strtod(o->wide_lr, &end);
    if (!strcmp(o->wide_lr, "auto"))
        wide = o->online && cfg->emb == SS_CTR_EMB_ARRAY ? atof(SS_CTR_WIDE_LR_ONLINE) : 0.0;
    else if (end == o->wide_lr || *end || !(wide >= 0.0 && wide <= 1.0))
        wide = -1.0; /* refused by check_combination */
    cfg->model.wide_lr = (float)wide;
    /* with a shard map, the map names the PS (the header says which file) */
    o->ps =
        *o->pcfg.ps || !o->pcfg.shard_map || !*o->pcfg.shard_map ? o->pcfg.ps : o->pcfg.shard_map;
    if (o->process) { /* every process holds the validation rows; each trains its share */
        cfg->process = &o->pcfg;
        cfg->val_rank = (uint32_t)o->rank;
        cfg->val_world = (uint32_t)o->world;
    }
}

ss_status ss__ctr_cli_resolve(ss__ctr_cli *o, char *why, size_t cap) {
    const char *ps = ss__setting_flag(o->settings, "ps"),
               *agent = ss__setting_flag(o->settings, "agent"),
               *peers = ss__setting_flag(o->settings, "peers"),
               *map = ss__setting_flag(o->settings, "shard_map");
    /* One trainer per process, syncing with other processes. */
    o->process = (ps && *ps) || (agent && *agent) || (peers && *peers) || (map && *map);
    ss_table_config table;
    ss_status st = apply_settings(o, &table, why, cap);
    if (st != SS_OK)
        return st;
    o->sync = ss__setting_flag(o->settings, "sync");
    o->algo = o->pcfg.algo;
    resolve_own(o);
    return SS_OK;
}

const char *ss__ctr_cli_refusal(const ss__ctr_cli *o) {
    const ss__ctr_train_config *cfg = &o->cfg;
    const char *why = NULL;
    if (!o->train_path == !o->follow_dir)
        why = "one of --train and --train-follow is required (see --help)";
    else if (!o->test_path && !o->online)
        why = "--test is required (see --help)";
    else if (o->online && o->max_rows)
        why = "--max-rows does not apply to a stream (it ends at its end, _DONE or SIGTERM)";
    else if (o->pcfg.chunk_floats && !*o->ps)
        why = "--chunk-floats cuts the dense groups sent to --ps; without --ps it has nothing to "
              "cut (with --agent, give it to the agent)";
    else if (!cfg->error_feedback && o->process)
        why = "--error-feedback false is an in-process ablation; a PS keeps the mirrors with "
              "feedback (drop --ps/--agent or the flag)";
    else if ((cfg->emb == SS_CTR_EMB_REMOTE || cfg->emb == SS_CTR_EMB_CACHED) && !*cfg->emb_ps &&
             !(cfg->emb_shard_map && *cfg->emb_shard_map))
        why = "--emb remote and cached need --emb-ps, --emb-shard-map or --ps";
    else if (cfg->model.wide_lr < 0.0f)
        why = "--wide-lr takes a rate in [0, 1] or auto";
    else if (o->pcfg.agent && cfg->sync != SS_CTR_SYNC_SHADOW)
        why = "--agent syncs in the background: needs --sync shadow";
    else if (o->process && (cfg->trainers != 1 || o->rank >= o->world || cfg->eval_central))
        why = "--ps/--agent/--peers run one trainer per process: needs --trainers 1, --rank < "
              "--world and --final-model replica";
    else if (cfg->eval_central && cfg->sync == SS_CTR_SYNC_NONE)
        why = "--final-model central needs --sync shadow|foreground";
    return why;
}
