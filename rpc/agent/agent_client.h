/* Agent mode of the hooks: the connection to the host's shadowsync-agent.
 * A thread keeps the connection: it connects, says Hello and registers
 * every group (memfd by SCM_RIGHTS); when the agent goes away it
 * reconnects with backoff and registers everything again. Training never
 * waits for any of it. */
#ifndef SS_AGENT_CLIENT_H
#define SS_AGENT_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shadow/device.h"
#include "shadowsync/status.h"

typedef struct ss__agent_client ss__agent_client;

typedef struct ss__agent_group_spec {
    const char *name;
    int fd; /* the group's memfd (stays the caller's) */
    size_t n;
    const char *algo;
    float alpha, bmuf_eta, bmuf_zeta;
    int bmuf_nesterov;
    /* A device group: on CUDA device `device`, its memory exported as
     * cuda_ipc_handle (the memfd carries the header). false: a host group. */
    bool on_device;
    int device;
    unsigned char cuda_ipc_handle[SS_DEVICE_IPC_HANDLE_BYTES];
} ss__agent_group_spec;

ss_status ss__agent_client_create(const char *socket_path, const char *trainer, uint32_t timeout_ms,
                                  ss__agent_client **out, char *why, size_t whylen);
/* Registers now when connected (the agent's verdict is returned: a group
 * it refuses is not kept), else at the next connection (SS_OK). */
ss_status ss__agent_client_add_group(ss__agent_client *c, const ss__agent_group_spec *g);
/* Waits up to wait_ms for a connection, then asks the agent for the final
 * rounds and waits for them. SS_ERR_IO: no agent (final rounds skipped);
 * SS_ERR_PERMISSION: its socket refused this process. why (may be NULL)
 * then says why (the socket's mode and owner when permission was denied). */
ss_status ss__agent_client_finish(ss__agent_client *c, uint32_t final_rounds,
                                  uint32_t final_sync_ms, uint32_t wait_ms, char *why,
                                  size_t whylen);
/* Completed registrations of the whole set (1 + reconnections). */
uint64_t ss__agent_client_sessions(ss__agent_client *c);
void ss__agent_client_destroy(ss__agent_client *c);

#endif
