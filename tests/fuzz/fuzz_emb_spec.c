/* The RocksDB value decoder of embedding table specs: the first byte says
 * how long the key's name part is, the rest is name + value. */
#include <stdint.h>

#include "embedding-store/emb_store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    size_t nlen = data[0];
    if (nlen > size - 1)
        nlen = size - 1;
    ss__emb_spec spec;
    ss__emb_db_decode_spec((const char *)data + 1, nlen, (const char *)data + 1 + nlen,
                           size - 1 - nlen, &spec);
    return 0;
}
