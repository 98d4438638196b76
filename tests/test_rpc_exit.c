/* A process that used gRPC and returns from main waits for gRPC's own
 * clean-up first (rpc/library.c). A channel destroyed while its
 * connection attempt is under way leaves gRPC up for a while, brought
 * down later on a thread of gRPC's; exiting meanwhile ran OpenSSL's exit
 * handler under a TLS handshake (a crash, a leak or a hang in the TLS
 * test, about 1 run in 20 under ASan). */
#include <check.h>
#include <grpc/grpc.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check_run.h"
#include "rpc/rpc.h"

/* Registered before this process first uses gRPC, so it runs after the
 * wait of ours: gRPC must be down by then. */
static void fail_if_grpc_still_up(void) {
    if (grpc_is_initialized()) {
        fprintf(stderr, "test_rpc_exit: gRPC was still up when the process exited\n");
        _exit(3); /* Check reports the child's early exit */
    }
}

START_TEST(test_exit_waits_for_grpc_to_come_down) {
    atexit(fail_if_grpc_still_up);
    char why[200];
    int port = 0;
    /* A server that accepts (the kernel does) and never speaks: the
     * channel's connection attempt waits on the HTTP/2 handshake. */
    int silent = ss__tcp_listen("127.0.0.1:0", &port, why, sizeof why);
    ck_assert_msg(silent >= 0, "%s", why);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    ss__rpc_channel *ch;
    ck_assert_int_eq(ss__rpc_channel_create(target, 0, NULL, &ch, NULL, 0), SS_OK);
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    ss_status st = ss__rpc_call(ch, "/shadowsync.v1.DenseSync/Heartbeat", (const uint8_t *)"", 0,
                                200, true, &resp, &resp_len, why, sizeof why);
    ck_assert_int_ne(st, SS_OK);
    ss__rpc_channel_destroy(ch);
    close(silent);
} /* Check's child then exits as main returning would: the handlers run */
END_TEST

SS_CHECK_MAIN("rpc_exit", 30, NULL, NULL, test_exit_waits_for_grpc_to_come_down)
