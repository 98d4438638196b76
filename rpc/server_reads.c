/* Fair shares of a server's reads (so that readers cannot hold up writers): one client
 * connection has at most reads_per_peer reads in flight; the next ones
 * wait in its queue, their messages not yet read, and go as the earlier
 * ones end. So one connection's bulk reads cannot fill the readers'
 * threads, and a client with many reads at once (a trainer's tables,
 * whose channels share a connection) is slowed, never refused. */
#include <grpc/support/alloc.h>
#include <stdio.h>
#include <string.h>

#include "rpc/server_internal.h"

/* The slot of a connection: its own, else a free one (named for it);
 * -1 when every slot holds another connection. peer_lock held. */
static int slot_of(ss__rpc_server *srv, const char *peer) {
    int free_slot = -1;
    for (int i = 0; i < PEER_SLOTS; i++) {
        peer_reads *p = &srv->peers[i];
        if (p->reads && !strncmp(p->peer, peer, sizeof p->peer))
            return i;
        if (!p->reads && free_slot < 0)
            free_slot = i;
    }
    if (free_slot >= 0)
        snprintf(srv->peers[free_slot].peer, sizeof srv->peers[free_slot].peer, "%s", peer);
    return free_slot;
}

read_turn ss__rpc_read_turn(call_ctx *c) {
    ss__rpc_server *srv = c->srv;
    char *peer = grpc_call_get_peer(c->call);
    if (!peer)
        return READ_GOES;
    read_turn turn = READ_GOES;
    pthread_mutex_lock(&srv->peer_lock);
    int slot = slot_of(srv, peer);
    peer_reads *p = slot >= 0 ? &srv->peers[slot] : NULL; /* a full table counts nobody */
    if (p && p->reads < srv->reads_per_peer) {
        p->reads++;
        c->peer_slot = slot;
    } else if (p && p->nwaiting < SS_RPC_WAITING_READS_PER_PEER) {
        c->peer_slot = slot; /* its place is taken when it goes */
        c->next_waiting = NULL;
        if (p->last)
            p->last->next_waiting = c;
        else
            p->first = c;
        p->last = c;
        p->nwaiting++;
        turn = READ_WAITS;
    } else if (p) {
        turn = READ_REFUSED;
    }
    pthread_mutex_unlock(&srv->peer_lock);
    gpr_free(peer);
    if (turn == READ_WAITS)
        ss__counter_add(srv->reads_waited, 1);
    return turn;
}

/* The oldest waiting read of p, out of its queue (NULL: none). */
static call_ctx *next_waiting(peer_reads *p) {
    call_ctx *w = p->first;
    if (w) {
        p->first = w->next_waiting;
        if (!p->first)
            p->last = NULL;
        p->nwaiting--;
        w->next_waiting = NULL;
    }
    return w;
}

void ss__rpc_read_done(call_ctx *c) {
    if (c->peer_slot < 0)
        return;
    ss__rpc_server *srv = c->srv;
    pthread_mutex_lock(&srv->peer_lock);
    peer_reads *p = &srv->peers[c->peer_slot];
    call_ctx *w = atomic_load(&srv->shutting_down) ? NULL : next_waiting(p);
    if (!w && --p->reads == 0) /* a waiting read takes the place as it is */
        p->peer[0] = '\0';
    pthread_mutex_unlock(&srv->peer_lock);
    c->peer_slot = -1;
    if (w)
        ss__rpc_server_receive(w);
}

void ss__rpc_reads_drop_waiting(ss__rpc_server *srv) {
    for (int i = 0; i < PEER_SLOTS; i++) {
        pthread_mutex_lock(&srv->peer_lock);
        call_ctx *w, *list = NULL;
        while ((w = next_waiting(&srv->peers[i])) != NULL) {
            w->peer_slot = -1; /* never counted in reads */
            w->next_waiting = list;
            list = w;
        }
        pthread_mutex_unlock(&srv->peer_lock);
        while ((w = list) != NULL) {
            list = w->next_waiting;
            ss__rpc_server_free_call(w);
        }
    }
}
