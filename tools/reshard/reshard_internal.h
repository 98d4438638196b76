/* The two halves of tools/reshard/reshard.c's work. Each writes its
 * outputs and says why on failure. */
#ifndef SS_TOOLS_RESHARD_INTERNAL_H
#define SS_TOOLS_RESHARD_INTERNAL_H

#include "tools/reshard/reshard.h"

/* work: a private scratch directory for the export files. */
ss_status ss__reshard_emb(const ss__reshard_config *cfg, const char *work, ss__reshard_report *rep,
                          char *why, size_t whylen);
ss_status ss__reshard_dense(const ss__reshard_config *cfg, ss__reshard_report *rep, char *why,
                            size_t whylen);

#endif
