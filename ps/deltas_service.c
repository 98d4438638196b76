/* Deltas service handlers: the index of --delta-dir past a sequence
 * number, and an entry's file read in parts. */
#include "ps/deltas_service.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps/deltas.h"
#include "rpc/emb/delta_client.h"
#include "rpc/emb/embedding.pb-c.h"
#include "rpc/rpc_pb.h"

static void serve_index(void *ctx, void *request, ss__rpc_reply *reply) {
    const ss__deltas_service *svc = ctx;
    const Shadowsync__V1__DeltaIndexRequest *m = request;
    ss__delta_index ix;
    if (ss__ps_delta_index(svc->dir, m->after, NULL, &ix, NULL) != SS_OK) {
        reply->status = SS_ERR_IO;
        snprintf(reply->message, sizeof reply->message, "cannot read the delta directory");
    } else {
        Shadowsync__V1__DeltaIndexReply out = SHADOWSYNC__V1__DELTA_INDEX_REPLY__INIT;
        out.next = ix.next;
        out.next_is_base = ix.next_is_base;
        out.newest_base = ix.newest_base;
        out.newest = ix.newest;
        ss__rpc_reply_pack(&out.base, reply);
    }
}

static const ss__rpc_request_type index_request = {&shadowsync__v1__delta_index_request__descriptor,
                                                   serve_index, NULL, 0, 0};

/* Bytes [offset, offset + max) of the entry's file into out's data
 * (malloc'd); out's size the file's. */
static ss_status read_part(const ss__deltas_service *svc, const Shadowsync__V1__DeltaReadRequest *m,
                           Shadowsync__V1__DeltaReadReply *out, char *why, size_t whylen) {
    if (m->seq == 0 || m->file > SS_DELTA_DENSE || m->max_bytes == 0 ||
        m->max_bytes > SS_DELTA_PART_MAX) {
        snprintf(why, whylen, "seq >= 1, file 0 (emb.delta) or 1 (dense.ckpt), max_bytes 1..%u",
                 SS_DELTA_PART_MAX);
        return SS_ERR_INVALID_ARGUMENT;
    }
    char path[4400];
    ss__ps_delta_path(svc->dir, m->seq, m->is_base,
                      m->file == SS_DELTA_EMB ? "emb.delta" : "dense.ckpt", path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        snprintf(why, whylen, "no %s %" PRIu64 " (pruned, or not yet published)",
                 m->is_base ? "base" : "delta", m->seq);
        if (fd >= 0)
            close(fd);
        return SS_ERR_NOT_FOUND;
    }
    uint64_t size = (uint64_t)sb.st_size;
    uint64_t n = m->offset >= size ? 0 : size - m->offset;
    n = n < m->max_bytes ? n : m->max_bytes;
    out->size = size;
    out->data.data = malloc(n ? n : 1);
    ssize_t got = out->data.data ? pread(fd, out->data.data, n, (off_t)m->offset) : -1;
    close(fd);
    if (got != (ssize_t)n) {
        snprintf(why, whylen, "reading %s: %s",
                 m->file == SS_DELTA_EMB ? "emb.delta" : "dense.ckpt",
                 got < 0 ? strerror(errno) : "short read");
        free(out->data.data);
        out->data.data = NULL;
        return SS_ERR_IO;
    }
    out->data.len = n;
    return SS_OK;
}

static void serve_read(void *ctx, void *request, ss__rpc_reply *reply) {
    const Shadowsync__V1__DeltaReadRequest *m = request;
    Shadowsync__V1__DeltaReadReply out = SHADOWSYNC__V1__DELTA_READ_REPLY__INIT;
    ss_status st = read_part(ctx, m, &out, reply->message, sizeof reply->message);
    if (st == SS_OK)
        ss__rpc_reply_pack(&out.base, reply);
    else
        reply->status = st;
    free(out.data.data);
}

static const ss__rpc_request_type read_request = {&shadowsync__v1__delta_read_request__descriptor,
                                                  serve_read, NULL, 0, 0};

void ss__deltas_service_init(ss__deltas_service *svc, const char *dir) {
    svc->dir = dir;
    const ss__rpc_method m[SS_DELTAS_METHODS] = {
        {SS_DELTA_M_INDEX, NULL, false, svc, true, SS_RPC_SMALL_REQUEST, &index_request, false,
         false},
        /* at most 4 MiB a call, from the page cache mostly */
        {SS_DELTA_M_READ, NULL, false, svc, true, SS_RPC_SMALL_REQUEST, &read_request, false,
         false},
    };
    memcpy(svc->methods, m, sizeof m);
}
