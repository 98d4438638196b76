/* The PS's Embedding handlers from raw bytes: the first byte picks the
 * method, the rest is the request message. One in-memory store (tables and
 * rows live across inputs, within small limits). */
#include <stdint.h>
#include <stdlib.h>

#include "embedding-store/emb_store.h"
#include "ps/emb_service.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static ss__emb_service svc;
    static bool ready;
    if (!ready) {
        ss__emb_store_config cfg = {.max_batch = 1024,
                                    .max_reply_bytes = 1 << 20,
                                    .max_tables = 16,
                                    .mem_cap_bytes = 64 << 20};
        ss__emb_store *st;
        if (ss__emb_store_create(&cfg, &st) != SS_OK)
            abort();
        ss__emb_service_init(&svc, st);
        ready = true;
    }
    if (size < 1)
        return 0;
    const ss__rpc_method *mt = &svc.methods[data[0] % SS_EMB_METHODS];
    ss__rpc_reply reply = {.status = SS_OK};
    mt->handler(mt->ctx, data + 1, size - 1, &reply);
    free(reply.data_block ? reply.data_block : reply.data);
    return 0;
}
