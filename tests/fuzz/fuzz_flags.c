/* Command-line flags and SHADOWSYNC_* environment values: the input is
 * NUL-separated strings; the first is the value of SHADOWSYNC_FUZZ_RATE
 * (when non-empty), the rest are argv. Every flag type and check is in
 * the table. The first string is also read as a shard map and as the
 * epoch a call carries (common/shard_map.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/flags.h"
#include "common/shard_map.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *copy = malloc(size + 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    char *argv[33] = {"fuzz"};
    int argc = 1;
    const char *env = copy;
    for (size_t i = strlen(copy) + 1; i < size && argc < 32; i += strlen(copy + i) + 1)
        argv[argc++] = copy + i;
    if (*env)
        setenv("SHADOWSYNC_FUZZ_RATE", env, 1);
    else
        unsetenv("SHADOWSYNC_FUZZ_RATE");
    const char *name = "x", *mode = "a";
    int64_t count = 3;
    double rate = 0.5;
    bool on = false;
    ss__flag flags[] = {
        {"name", SS_FLAG_STRING, &name, "a string", NULL, 0, 0},
        {"mode", SS_FLAG_STRING, &mode, "a choice", "a|bb|ccc", 0, 0},
        {"count", SS_FLAG_INT, &count, "an int", NULL, -5, 1e6},
        {"fuzz-rate", SS_FLAG_DOUBLE, &rate, "a double", NULL, 0, 1},
        {"on", SS_FLAG_BOOL, &on, "a bool", NULL, 0, 0},
    };
    bool help = false;
    char err[256];
    ss__flags_parse(flags, sizeof flags / sizeof *flags, argc, argv, &help, err, sizeof err);
    ss__shard_map map;
    char why[400];
    if (ss__shard_map_parse(env, "fuzz", &map, why, sizeof why) == SS_OK &&
        (map.epoch == 0 || !map.ps[0]))
        abort(); /* a map it accepts has both */
    uint64_t epoch = 0;
    if (ss__shard_map_epoch_parse(env, strlen(env), &epoch) && epoch == 0)
        abort();
    free(copy);
    return 0;
}
