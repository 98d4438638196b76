#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc_internal.h"
#include "shadowsync/rpc.h"

struct ss_rpc_channel {
    grpc_channel *channel;
};

ss_status ss_rpc_channel_create(const char *target, size_t max_message_bytes,
                                ss_rpc_channel **out) {
    if (!target || !*target || !out)
        return SS_ERR_INVALID_ARGUMENT;
    ss_rpc_channel *ch = calloc(1, sizeof *ch);
    if (!ch)
        return SS_ERR_NO_MEMORY;
    grpc_init();
    int max = (int)(max_message_bytes ? max_message_bytes : SS_RPC_DEFAULT_MAX_MESSAGE);
    grpc_arg args[2] = {
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = max},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, .value.integer = max},
    };
    grpc_channel_args cargs = {.num_args = 2, .args = args};
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    ch->channel = grpc_channel_create(target, creds, &cargs);
    grpc_channel_credentials_release(creds);
    if (!ch->channel) {
        free(ch);
        grpc_shutdown();
        return SS_ERR_IO;
    }
    *out = ch;
    return SS_OK;
}

void ss_rpc_channel_destroy(ss_rpc_channel *ch) {
    if (!ch)
        return;
    grpc_channel_destroy(ch->channel);
    free(ch);
    grpc_shutdown();
}

static ss_status from_grpc(grpc_status_code code, const char *details) {
    /* Our servers name the exact ss_status: "ss=<name>: text". */
    if (details && strncmp(details, "ss=", 3) == 0) {
        for (int s = 0; s < SS_STATUS_COUNT_; s++) {
            const char *name = ss_status_name((ss_status)s);
            size_t n = strlen(name);
            if (strncmp(details + 3, name, n) == 0 && details[3 + n] == ':')
                return (ss_status)s;
        }
    }
    switch (code) {
    case GRPC_STATUS_OK:
        return SS_OK;
    case GRPC_STATUS_INVALID_ARGUMENT:
    case GRPC_STATUS_OUT_OF_RANGE:
        return SS_ERR_INVALID_ARGUMENT;
    case GRPC_STATUS_NOT_FOUND:
        return SS_ERR_NOT_FOUND;
    case GRPC_STATUS_ALREADY_EXISTS:
        return SS_ERR_EXISTS;
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return SS_ERR_TIMEOUT;
    case GRPC_STATUS_FAILED_PRECONDITION:
        return SS_ERR_STATE;
    case GRPC_STATUS_RESOURCE_EXHAUSTED:
        return SS_ERR_NO_MEMORY;
    case GRPC_STATUS_UNAVAILABLE:
    case GRPC_STATUS_CANCELLED:
        return SS_ERR_IO;
    default:
        return SS_ERR_INTERNAL;
    }
}

ss_status ss_rpc_call(ss_rpc_channel *ch, const char *method, const uint8_t *req, size_t len,
                      uint32_t timeout_ms, bool wait_for_ready, uint8_t **resp, size_t *resp_len,
                      char *msg, size_t msglen) {
    if (!ch || !method || (!req && len) || !resp || !resp_len || timeout_ms == 0)
        return SS_ERR_INVALID_ARGUMENT;
    *resp = NULL;
    *resp_len = 0;
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                         gpr_time_from_millis((int64_t)timeout_ms, GPR_TIMESPAN));
    grpc_slice path = grpc_slice_from_static_string(method);
    grpc_call *call = grpc_channel_create_call(ch->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq, path,
                                               NULL, deadline, NULL);
    grpc_slice body =
        len ? grpc_slice_from_copied_buffer((const char *)req, len) : grpc_empty_slice();
    grpc_byte_buffer *send = grpc_raw_byte_buffer_create(&body, 1);
    grpc_slice_unref(body);
    grpc_metadata_array initial_md, trailing_md;
    grpc_metadata_array_init(&initial_md);
    grpc_metadata_array_init(&trailing_md);
    grpc_byte_buffer *recv = NULL;
    grpc_status_code code = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    const char *error_string = NULL;

    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].flags = wait_for_ready ? GRPC_INITIAL_METADATA_WAIT_FOR_READY : 0;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    /* Without RECV_INITIAL_METADATA a rejected call hangs to its deadline. */
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trailing_md;
    ops[5].data.recv_status_on_client.status = &code;
    ops[5].data.recv_status_on_client.status_details = &details;
    ops[5].data.recv_status_on_client.error_string = &error_string;

    ss_status st = SS_OK;
    if (grpc_call_start_batch(call, ops, 6, call, NULL) != GRPC_CALL_OK) {
        st = SS_ERR_INTERNAL;
    } else {
        grpc_event ev =
            grpc_completion_queue_pluck(cq, call, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type != GRPC_OP_COMPLETE || !ev.success)
            st = SS_ERR_IO;
    }
    if (st == SS_OK) {
        char *text = grpc_slice_to_c_string(details);
        st = from_grpc(code, text);
        if (st != SS_OK && msg && msglen)
            snprintf(msg, msglen, "%s", text);
        gpr_free(text);
    }
    if (st == SS_OK) {
        grpc_slice all = grpc_empty_slice();
        if (recv) {
            grpc_byte_buffer_reader r;
            if (grpc_byte_buffer_reader_init(&r, recv)) {
                all = grpc_byte_buffer_reader_readall(&r);
                grpc_byte_buffer_reader_destroy(&r);
            }
        }
        size_t n = GRPC_SLICE_LENGTH(all);
        *resp = malloc(n ? n : 1);
        if (!*resp) {
            st = SS_ERR_NO_MEMORY;
        } else {
            memcpy(*resp, GRPC_SLICE_START_PTR(all), n);
            *resp_len = n;
        }
        grpc_slice_unref(all);
    }
    if (recv)
        grpc_byte_buffer_destroy(recv);
    grpc_byte_buffer_destroy(send);
    grpc_slice_unref(details);
    if (error_string)
        gpr_free((void *)error_string);
    grpc_metadata_array_destroy(&initial_md);
    grpc_metadata_array_destroy(&trailing_md);
    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
    return st;
}
