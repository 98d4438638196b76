#include "shadowsync/status.h"

static const struct {
    const char *name;
    const char *text;
} status_table[SS_STATUS_COUNT_] = {
    [SS_OK] = {"ok", "success"},
    [SS_ERR_INVALID_ARGUMENT] = {"invalid_argument", "invalid argument"},
    [SS_ERR_NO_MEMORY] = {"no_memory", "out of memory"},
    [SS_ERR_IO] = {"io", "input/output error"},
    [SS_ERR_PARSE] = {"parse", "malformed input"},
    [SS_ERR_NOT_FOUND] = {"not_found", "not found"},
    [SS_ERR_EXISTS] = {"exists", "already exists"},
    [SS_ERR_STATE] = {"state", "operation not valid in the current state"},
    [SS_ERR_TIMEOUT] = {"timeout", "deadline exceeded"},
    [SS_ERR_SIZE_MISMATCH] = {"size_mismatch", "vector sizes do not match"},
    [SS_ERR_NON_FINITE] = {"non_finite", "payload contains NaN or Inf"},
    [SS_ERR_STOPPED] = {"stopped", "object is stopped or shutting down"},
    [SS_ERR_END] = {"end", "end of stream"},
    [SS_ERR_INTERNAL] = {"internal", "internal error"},
    [SS_ERR_PERMISSION] = {"permission", "permission denied"},
    [SS_ERR_TOO_LARGE] = {"too_large", "over a size limit"},
    [SS_ERR_UNSUPPORTED] = {"unsupported", "not supported by this build or machine"},
};

const char *ss_strerror(ss_status status) {
    if ((unsigned)status >= SS_STATUS_COUNT_)
        return "unknown status code";
    return status_table[status].text;
}

const char *ss_status_name(ss_status status) {
    if ((unsigned)status >= SS_STATUS_COUNT_)
        return "unknown";
    return status_table[status].name;
}
