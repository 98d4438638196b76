/* The bulk stream (rpc/bulk/bulk.h) from raw bytes, both ends. The first byte
 * picks the end:
 *  - even: the server's. A bulk server in this process (started once;
 *    its two streamed methods echo the request, so ASan sees every byte of it
 *    read) takes a stream with a live ticket and then the input: whatever
 *    it holds, the server answers or closes the stream.
 *  - odd: the client's. The input is what a server sends back to three
 *    calls: each call ends with a known status, a reply it took within
 *    the bytes that came, and never a read past them; the third reads
 *    its reply's trailing field straight into a place of 32 bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/fd_io.h"
#include "rpc/bulk/bulk.h"

static void h_check(void *ctx, const uint8_t *req, size_t len, ss__rpc_reply *reply) {
    (void)ctx;
    reply->data = malloc(len + 1);
    if (!reply->data)
        abort();
    memcpy(reply->data, req, len);
    reply->len = len;
    reply->status = len % 3 == 0 ? SS_OK : SS_ERR_PARSE;
}

static const ss__rpc_method methods[] = {
    {"/f/A", h_check, false, NULL, false, 1 << 16, NULL, false, true},
    {"/f/B", h_check, false, NULL, false, 64, NULL, false, true},
    {"/f/C", h_check, false, NULL, false, 64, NULL, false, false}}; /* gRPC only */

static ss__bulk_server *server(void) {
    static ss__bulk_server *s;
    if (!s) {
        setenv("SHADOWSYNC_LOG_LEVEL", "error", 0); /* a line per closed stream: slow */
        const ss__bulk_server_config cfg = {.listen = "127.0.0.1:0", .max_message = 1 << 16};
        char why[200];
        if (ss__bulk_server_start(&cfg, methods, 3, NULL, &s, why, sizeof why) != SS_OK)
            abort();
    }
    return s;
}

/* A socket to the server that has sent a live ticket. (libFuzzer's own
 * SIGALRM interrupts a plain connect(): rpc/reach.c's waits it out.) */
static int connect_local(int port) {
    char address[32], why[200];
    snprintf(address, sizeof address, "127.0.0.1:%d", port);
    int fd = ss__tcp_connect(address, 5000, why, sizeof why);
    uint8_t t[SS_BULK_TICKET_BYTES];
    if (fd < 0 || ss__bulk_server_ticket(server(), 0, "fuzz", t) != SS_OK ||
        !ss__send_all(fd, t, sizeof t))
        abort();
    return fd;
}

static void server_end(const uint8_t *data, size_t size) {
    int fd = connect_local(ss__bulk_server_port(server()));
    if (!ss__send_all(fd, data, size))
        abort();
    shutdown(fd, SHUT_WR);
    uint8_t buf[4096];
    while (read(fd, buf, sizeof buf) > 0) {
    }
    close(fd);
}

static ss_status take(ss__rpc_request *rq, const ss__rpc_message *m, void *arg) {
    (void)arg;
    size_t n = ss__rpc_message_length(m);
    uint8_t *out = malloc(n + 1);
    bool ok = ss__rpc_message_copy(m, 0, out, n) && !ss__rpc_message_copy(m, 0, out, n + 1);
    free(out);
    if (!ok)
        abort();
    (void)rq;
    return SS_OK;
}

static void client_end(const uint8_t *data, size_t size) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        abort();
    /* the "server": the input, then the end; the calls' frames are small
     * and stay in the pair's buffer */
    if (!ss__send_all(sv[1], data, size))
        abort();
    shutdown(sv[1], SHUT_WR);
    ss__bulk_stream *b;
    if (ss__bulk_stream_wrap(sv[0], 1 << 16, &b) != SS_OK)
        abort();
    const uint8_t req[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    ss__rpc_request rq[3];
    memset(rq, 0, sizeof rq);
    for (int i = 0; i < 3; i++)
        rq[i] = (ss__rpc_request){.ch = NULL, .method = "/f/A", .req = req, .len = sizeof req};
    rq[1].on_reply = take;
    uint8_t *place = malloc(32); /* the third reply's bytes field 1, when it has 32, goes here */
    rq[2] = (ss__rpc_request){.method = "/f/A",
                              .req = req,
                              .len = sizeof req,
                              .into = place,
                              .into_len = 32,
                              .into_field = 1};
    (void)ss__bulk_call_many(b, rq, 3, NULL, 0, 1);
    for (int i = 0; i < 3; i++) {
        if ((unsigned)rq[i].status >= (unsigned)SS_STATUS_COUNT_ || strlen(rq[i].msg) >= 400)
            abort();
        if (rq[i].resp && rq[i].resp_len > size)
            abort(); /* a reply longer than what came */
        free(rq[i].resp);
    }
    free(place);
    ss__bulk_stream_close(b);
    close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    if (data[0] % 2 == 0)
        server_end(data + 1, size - 1);
    else
        client_end(data + 1, size - 1);
    return 0;
}
