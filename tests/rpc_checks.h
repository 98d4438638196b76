/* Checks of the RPC framework's bad-input path, shared by the tests of
 * every service: bytes that are no protobuf message are refused. */
#ifndef SS_TESTS_RPC_CHECKS_H
#define SS_TESTS_RPC_CHECKS_H

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/rpc.h"

/* A field tag past the largest field number with wire type 7: no message
 * of any type parses from it. */
static const uint8_t rpc_garbage[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x01, 0x02};

/* A call of method (with a token when authed) whose body is rpc_garbage
 * fails with want (SS_OK: any failure) and, when said is not NULL, the
 * server's message contains said. */
static inline void assert_garbage_refused(ss__rpc_channel *ch, const char *method, bool authed,
                                          ss_status want, const char *said) {
    uint8_t *resp = NULL;
    size_t len = 0;
    char msg[256] = "";
    ss_status st = ss__rpc_call(ch, method, rpc_garbage, sizeof rpc_garbage, 5000, authed, &resp,
                                &len, msg, sizeof msg);
    free(resp);
    if (want == SS_OK)
        ck_assert_msg(st != SS_OK, "%s took garbage", method);
    else
        ck_assert_msg(st == want, "%s: status %d, want %d (%s)", method, (int)st, (int)want, msg);
    if (said)
        ck_assert_msg(strstr(msg, said), "%s said \"%s\", want \"%s\"", method, msg, said);
}

#endif
