/* Defaults of the trainer's settings that other programs model as well
 * (tools/sim: a simulated trainer syncs as a real one does by default):
 * written once, here. ss_trainer_config_init (settings.c) sets them. */
#ifndef SS_TRAINER_HOOKS_DEFAULTS_H
#define SS_TRAINER_HOOKS_DEFAULTS_H

#define SS_DEFAULT_SYNC_EVERY    10 /* sync_every: foreground, a round every K steps */
#define SS_DEFAULT_MIN_ROUND_GAP 4  /* min_round_gap: steps between a trainer's rounds */

#endif
