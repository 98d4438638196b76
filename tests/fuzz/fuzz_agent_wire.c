/* The agent's socket wire: bytes as a trainer (or anyone) would write them
 * to the agent socket, read back frame by frame with the agent's limits,
 * each frame decoded as an AgentRequest and as an AgentReply. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rpc/agent/agent.pb-c.h"
#include "rpc/agent/agent_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 60000) /* one socket buffer: the write below never blocks */
        return 0;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        abort();
    if (size && write(sv[0], data, size) != (ssize_t)size)
        abort();
    close(sv[0]);
    for (;;) {
        ss__agent_frame f;
        ss_status st = ss__agent_recv_frame(sv[1], SS_AGENT_MAX_FRAME, 0, &f);
        if (st != SS_OK)
            break;
        Shadowsync__Agent__V1__AgentRequest *rq =
            shadowsync__agent__v1__agent_request__unpack(NULL, f.len, f.buf);
        if (rq)
            shadowsync__agent__v1__agent_request__free_unpacked(rq, NULL);
        Shadowsync__Agent__V1__AgentReply *rp =
            shadowsync__agent__v1__agent_reply__unpack(NULL, f.len, f.buf);
        if (rp)
            shadowsync__agent__v1__agent_reply__free_unpacked(rp, NULL);
        ss__agent_frame_release(&f);
    }
    close(sv[1]);
    return 0;
}
