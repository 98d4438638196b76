/* Host-level averaging: the trainers of one agent average in memory
 * first, and the host takes part in the PS's rounds as one member. */
#ifndef SS_SHADOW_HOST_AVERAGE_TRANSPORT_H
#define SS_SHADOW_HOST_AVERAGE_TRANSPORT_H

#include <stdint.h>

#include "shadow/transport.h"

/* Host-level averaging over `remote` (not owned; must outlive the
 * result): the members of this process (one agent's trainers) first
 * average in memory (a local round closes when all have contributed or
 * local_deadline_ms after the first), then one exchange per local round
 * goes to `remote` as a single member for the whole host. */
ss_status ss__host_average_transport_create(ss__transport *remote, uint32_t local_deadline_ms,
                                            ss__transport **out, char *why, size_t whylen);

#endif
