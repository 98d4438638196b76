/* The PS's Embedding and Deltas handlers from raw bytes: the first byte
 * picks the method, the rest is the request message. One in-memory store
 * (tables and rows live across inputs, within small limits); a delta
 * directory with one small base for Read to find; a shard map of two
 * shards, this PS the first, so that Handoff gives rows (epoch 1, to
 * shard 1 of 2). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "embedding-store/emb_store.h"
#include "ps/deltas_service.h"
#include "ps/emb_service.h"
#include "ps/map_watch.h"
#include "ps/row_moves.h"

static char dir[] = "/tmp/fuzz-deltas-XXXXXX";
static const char *const files[] = {"emb.delta", "dense.ckpt"};

/* Removes the directory when the fuzzer exits. */
static void remove_delta_dir(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/fleet.map", dir);
    unlink(path);
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/00000000000000000001-base/%s", dir, files[i]);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/00000000000000000001-base", dir);
    rmdir(path);
    rmdir(dir);
}

/* A temporary delta directory: entry 1, a base, with two small files. */
static const char *delta_dir(void) {
    char path[128];
    if (!mkdtemp(dir))
        abort();
    atexit(remove_delta_dir);
    snprintf(path, sizeof path, "%s/00000000000000000001-base", dir);
    mkdir(path, 0700);
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/00000000000000000001-base/%s", dir, files[i]);
        FILE *f = fopen(path, "w");
        if (!f)
            abort();
        fputs("0123456789abcdef", f);
        fclose(f);
    }
    return dir;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static ss__emb_service svc;
    static ss__deltas_service dsvc;
    static bool ready;
    if (!ready) {
        ss__emb_store_config cfg = {.max_batch = 1024,
                                    .max_reply_bytes = 1 << 20,
                                    .max_tables = 16,
                                    .mem_cap_bytes = 64 << 20};
        ss__emb_store *st;
        if (ss__emb_store_create(&cfg, &st, NULL, 0) != SS_OK)
            abort();
        ss__emb_service_init(&svc, st);
        ss__deltas_service_init(&dsvc, delta_dir());
        char map[128], why[256];
        snprintf(map, sizeof map, "%s/fleet.map", dir);
        FILE *f = fopen(map, "w");
        if (!f)
            abort();
        fputs("epoch 1\nps 127.0.0.1:1,127.0.0.1:2\n", f);
        fclose(f);
        ss__metrics *m;
        ss__ps_map_watch *w;
        ss__ps_row_moves *mv;
        ss__ps_row_moves_config c = {.batch_rows = 64, .store = st};
        if (ss__metrics_create(&m, NULL, 0) != SS_OK ||
            ss__ps_map_watch_start(map, m, &w, why, sizeof why) != SS_OK)
            abort();
        c.map = w;
        c.metrics = m;
        if (ss__ps_row_moves_create(&c, &mv, NULL, 0) != SS_OK ||
            ss__ps_row_moves_run(mv, "127.0.0.1:1") != SS_OK)
            abort();
        svc.ensure = ss__ps_row_moves_ensure;
        svc.handoff = ss__ps_row_moves_handoff;
        svc.moves = mv;
        ready = true;
    }
    if (size < 1)
        return 0;
    const size_t k = data[0] % (SS_EMB_METHODS + SS_DELTAS_METHODS);
    const ss__rpc_method *mt =
        k < SS_EMB_METHODS ? &svc.methods[k] : &dsvc.methods[k - SS_EMB_METHODS];
    ss__rpc_reply reply = {.status = SS_OK};
    ss__rpc_method_run(mt, NULL, data + 1, size - 1, &reply);
    free(reply.data_block ? reply.data_block : reply.data);
    return 0;
}
