/* Topology-adaptive aggregation: a forest of trees, one per partition of a
 * group, packed over links of known bandwidth.
 *
 * The members of a round (trainers, or agents) sit on hosts; hosts are
 * joined by links of measured or given bandwidth (a topology file). A
 * group of n floats is cut into `parts` partitions; partition p is
 * summed up its own tree towards its root and the mean comes back down
 * the same edges, so every tree edge carries the partition once each way.
 * Roots differ from partition to partition and the trees are packed
 * greedily so that no host's link and no pair of hosts carries more than
 * its share: for each partition in turn, every member is tried as the
 * root, the tree grows by the edge whose use leaves the busiest link
 * least busy (Prim's order; ties go to the shallower attachment), and the
 * root whose tree leaves the whole forest's bottleneck lowest wins. This
 * is the forest-packing idea of topology-adaptive synchronization; the
 * packing is a heuristic, not an optimum. */
#ifndef SS_SHADOW_FOREST_H
#define SS_SHADOW_FOREST_H

#include <stddef.h>
#include <stdint.h>

#include "shadowsync/status.h"

#define SS_FOREST_MAX_MEMBERS 1024

/* Bandwidths between members, Gbit/s. */
typedef struct ss__topology {
    uint32_t members;
    uint32_t *host; /* members: each member's host index */
    uint32_t hosts;
    double *link; /* hosts * hosts: between two hosts (each direction) */
    double *nic;  /* hosts: a host's own limit, all its traffic each way */
    double local; /* between members of one host */
} ss__topology;

/* Every member on its own host, every link `gbit`. */
ss_status ss__topology_uniform(uint32_t members, double gbit, ss__topology *out);
/* per_host members to a host (members 0 .. per_host - 1 on host 0, and
 * so on; the last host may have fewer), every link and NIC `gbit`. */
ss_status ss__topology_grouped(uint32_t members, uint32_t per_host, double gbit, ss__topology *out);
/* Members are "host:port" addresses; a member's host is the part before
 * the last ':'. The file, one statement a line, '#' comments:
 *     default <gbit>            between hosts no `link` names (10)
 *     local <gbit>              between members of one host (100)
 *     link <host> <host> <gbit> between two hosts, both directions
 *     nic <host> <gbit>         a host's own limit (its fastest link)
 * why: what is wrong and on which line. */
ss_status ss__topology_load(const char *path, const char *const *members, uint32_t n,
                            ss__topology *out, char *why, size_t whylen);
void ss__topology_free(ss__topology *t);

typedef struct ss__forest {
    uint32_t members, parts;
    size_t *part_off; /* parts + 1: partition p is floats [part_off[p], part_off[p + 1]) */
    uint32_t *root;   /* parts */
    int32_t *parent;  /* parts * members: member m's parent in tree p, -1 at its root */
    uint32_t *depth;  /* parts: the tree's height in edges */
    /* Seconds a round's transfers take on the busiest link or host (both
     * directions are used at once), for 4-byte floats: the packing's
     * objective, and what a simulator or tuner can read. */
    double bottleneck_s;
} ss__forest;

/* parts: 1 .. floats (0: one per member, at most floats). */
ss_status ss__forest_pack(const ss__topology *t, size_t floats, uint32_t parts, ss__forest *out);
void ss__forest_free(ss__forest *f);
/* Member m's children in tree p, into kids (room for members); returns
 * how many. */
uint32_t ss__forest_children(const ss__forest *f, uint32_t p, uint32_t m, uint32_t *kids);

#endif
