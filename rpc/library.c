/* Every grpc_init and grpc_shutdown of ours, and a wait at exit for the
 * clean-up gRPC finishes on a thread of its own.
 *
 * Why the wait: a channel's subchannel holds a reference to the library
 * of its own while a connection attempt is under way. When we destroy the
 * last channel, gRPC drops that reference later, on one of its threads,
 * and does its clean-up on a detached thread it starts then. A program
 * that returns from main meanwhile runs OpenSSL's exit handler under a
 * handshake still in progress: the TLS test's trainer without a
 * certificate crashed in RAND_priv_bytes (a freed lock), leaked a
 * handshake's objects, or hung, about 1 run in 20 under ASan. */
#include <grpc/grpc.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "rpc/rpc.h"

/* Enough for a handshake that was under way to end (tens of ms) on a
 * loaded machine; an exit never waits longer. */
#define EXIT_WAIT_MS 5000

static pthread_once_t exit_wait_once = PTHREAD_ONCE_INIT;
static atomic_long our_refs;
/* Someone else in the process (the program itself) had gRPC up before
 * us: the library may stay up past our last reference, so we never wait
 * for it to come down. */
static atomic_bool up_before_us;

static void wait_for_grpc_cleanup(void) {
    if (atomic_load(&our_refs) != 0 || atomic_load(&up_before_us))
        return; /* a channel or server of ours is still open: gRPC stays up */
    const struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000};
    /* grpc_is_initialized takes the lock that the clean-up holds while it
     * runs, so a 0 means the clean-up is over. */
    for (int waited = 0; waited < EXIT_WAIT_MS && grpc_is_initialized(); waited++)
        nanosleep(&ms, NULL);
}

static void register_exit_wait(void) {
    if (grpc_is_initialized())
        atomic_store(&up_before_us, true);
    /* OpenSSL registers its exit handler when it is first initialized;
     * initializing it here, before ours is registered, makes ours run
     * first (exit handlers run in reverse order). */
    OPENSSL_init_ssl(0, NULL);
    atexit(wait_for_grpc_cleanup);
}

void ss__rpc_init(void) {
    pthread_once(&exit_wait_once, register_exit_wait);
    atomic_fetch_add(&our_refs, 1);
    grpc_init();
}

void ss__rpc_shutdown(void) {
    grpc_shutdown();
    atomic_fetch_sub(&our_refs, 1);
}
