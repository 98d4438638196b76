/* The tree transport's state, shared by its service (tree_service.c:
 * the pushes and leaves it receives) and its rounds (tree_transport.c). */
#ifndef SS_RPC_TREE_INTERNAL_H
#define SS_RPC_TREE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rpc/auth.h"
#include "rpc/peer/peer_list.h"
#include "rpc/rpc.h"
#include "rpc/tree/tree_transport.h"
#include "shadow/forest.h"

#define SS_TREE_PUSH_METHOD  "/shadowsync.v1.TreeSync/Push"
#define SS_TREE_LEAVE_METHOD "/shadowsync.v1.TreeSync/Leave"
#define SS_TREE_PROBE_METHOD "/shadowsync.v1.TreeSync/Probe"
#define SS_TREE_KIND_SUM     1
#define SS_TREE_KIND_MEAN    2

/* What has arrived for one round. A member is in round done + 1; a child
 * that finished it may already push round done + 2 (it cannot go further:
 * that round's mean needs this member's sum), so two slots, by parity. */
typedef struct ss__tree_slot {
    uint64_t round;       /* 0: free */
    float *sum;           /* n: the children's sums, partition by partition */
    uint32_t *count;      /* parts: members summed into sum */
    uint8_t *got;         /* parts * members: child m's sum of partition p is in */
    uint32_t *got_n;      /* parts */
    float *mean;          /* n */
    uint32_t *mean_count; /* parts: members in the mean; 0 = not here yet */
} ss__tree_slot;

typedef struct ss__tree_group {
    struct ss__tree_group *next;
    char *name;
    size_t n;
    ss__forest forest;
    uint32_t *nkids; /* parts: this member's children in each tree */
    uint32_t *kids;  /* parts * members */
    uint64_t done;   /* the last round finished here */
    uint64_t seen;   /* the highest round a push named */
    ss__tree_slot slots[2];
    float *latest; /* the last round's mean */
    bool have;
    uint8_t *gone; /* members: left the group (TreeLeave), or found unreachable */
    /* members: the version of each one's membership, raised by each leave,
     * each finding that it is unreachable and each return; of two views of
     * a member, the higher version wins (tree_membership.c). */
    uint64_t *ver;
    /* S-BMUF: the block state (w, m, b; 3n floats, made on the first BMUF
     * round) of the partitions this member roots, each started once its
     * first round here closed; a partition whose root moves (a member
     * left) starts again at its next mean. */
    float *bmuf_w, *bmuf_m, *bmuf_b;
    bool *bmuf_started;  /* parts */
    uint32_t *bmuf_root; /* parts: the root bmuf_started was for */
    uint64_t epoch;      /* a hash of gone: pushes must agree on it */
} ss__tree_group;

typedef struct ss__tree {
    pthread_mutex_t lock;
    pthread_cond_t arrived; /* a push was buffered */
    ss__tree_group *groups;
    ss__peer_mesh mesh;
    uint32_t parts, timeout_ms;
    ss__topology topo;
    char topology_path[512];
} ss__tree;

/* ---- groups ---- */

/* tree_service.c */
extern const ss__rpc_method ss__tree_methods[3];
ss_status ss__tree_slot_alloc(ss__tree_slot *s, size_t n, uint32_t parts, uint32_t members);
/* Makes s the buffer of `round`, empty. */
void ss__tree_slot_open(ss__tree_slot *s, const ss__tree_group *tg, uint64_t round);
/* Partition p of the slot as if nothing had arrived: its sum overflowed
 * (finite sums can), so the retried round takes the children's new sums
 * instead of adding the same ones again. Caller holds the lock. */
void ss__tree_slot_forget(ss__tree_slot *s, const ss__tree_group *tg, uint32_t p);
/* The fewest members any of the first `parts` partitions' means in s
 * counts: the round's participants once every mean is in, 0 while one is
 * missing. */
uint32_t ss__tree_slot_fewest(const ss__tree_slot *s, uint32_t parts);
void ss__tree_group_free(ss__tree_group *tg);
ss__tree_group *ss__tree_find_group(ss__tree *t, const char *name);
/* The trees over the members still in the group; see tree_service.c. */
ss_status ss__tree_build_forest(const ss__tree *t, ss__tree_group *tg);

/* tree_membership.c: who is in a group, and how the members agree. */

/* The channel to member i, made on first use (NULL when it cannot be). */
ss__rpc_channel *ss__tree_channel(ss__tree *t, uint32_t i);
/* Is v a plausible next version of one known at `known`? */
static inline bool ss__tree_version_plausible(uint64_t known, uint64_t v) {
    return v > known && v - known <= SS_TREE_MAX_VERSION_STEP;
}
/* Bytes of a view: 8 per member. */
size_t ss__tree_view_bytes(const ss__tree *t);
/* Writes this member's view of tg's membership (version << 1 | gone per
 * member, little-endian). Caller holds the lock. */
void ss__tree_view_pack(const ss__tree *t, const ss__tree_group *tg, uint8_t *out);
/* Merges another member's view: of each member, the higher version wins;
 * this member, seen gone (found unreachable while it was slow, or from
 * before a restart), comes back at a higher version. The trees are built
 * again when someone came or went. false: a view of the wrong size.
 * Caller holds the lock. */
bool ss__tree_view_merge(ss__tree *t, ss__tree_group *tg, const uint8_t *view, size_t len);
/* Member m is gone (or back) at version v (0: one more than known); the
 * trees are built again. Caller holds the lock. */
ss_status ss__tree_mark(ss__tree *t, ss__tree_group *tg, uint32_t m, bool gone, uint64_t v,
                        const char *why);
/* Asks member m whether it is there, exchanging views. SS_OK when it
 * answered at all (a refusal is an answer); SS_ERR_IO or SS_ERR_TIMEOUT
 * when it is unreachable. Caller holds no lock. */
ss_status ss__tree_probe(ss__tree *t, const char *group, uint32_t m, uint32_t timeout_ms);

#endif
