/* Status codes shared by every ShadowSync library: every fallible call
 * returns one, and ss_strerror() explains it. */
#ifndef SHADOWSYNC_STATUS_H
#define SHADOWSYNC_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ss_status {
    SS_OK = 0,
    SS_ERR_INVALID_ARGUMENT, /* caller passed a bad value */
    SS_ERR_NO_MEMORY,        /* allocation failed */
    SS_ERR_IO,               /* file or socket error (see errno / log) */
    SS_ERR_PARSE,            /* malformed input data */
    SS_ERR_NOT_FOUND,        /* unknown name / id */
    SS_ERR_EXISTS,           /* name already registered */
    SS_ERR_STATE,            /* call not valid in the object's current state */
    SS_ERR_TIMEOUT,          /* deadline passed */
    SS_ERR_SIZE_MISMATCH,    /* vector sizes disagree */
    SS_ERR_NON_FINITE,       /* payload holds NaN or Inf */
    SS_ERR_STOPPED,          /* object is shutting down */
    SS_ERR_END,              /* end of stream (not an error for readers) */
    SS_ERR_INTERNAL,         /* bug: invariant broken */
    SS_ERR_PERMISSION,       /* caller not allowed (e.g. another uid at the agent socket) */
    SS_ERR_TOO_LARGE,        /* request or message over a size limit */
    SS_ERR_UNSUPPORTED,      /* not in this build or on this machine (e.g. no CUDA device) */
    SS_STATUS_COUNT_
} ss_status;

/* A static, human-readable description of a status. Never NULL. */
const char *ss_strerror(ss_status status);

/* A short stable identifier ("invalid_argument") for logs and metric labels. */
const char *ss_status_name(ss_status status);

#ifdef __cplusplus
}
#endif

#endif
