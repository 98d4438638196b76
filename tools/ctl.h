/* shadowsync-ctl's parts shared by its commands (tools/shadowsync_ctl.c,
 * tools/ctl_scale.c). */
#ifndef SS_TOOLS_CTL_H
#define SS_TOOLS_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* GET or POST base + path, with the shared token when there is one
 * (SHADOWSYNC_AUTH_TOKEN_FILE); the body in *out (caller frees). Returns
 * the HTTP code, or -1 when nothing answered (err says why). */
long ss__ctl_fetch(const char *base, const char *path, bool post, long timeout_ms, char **out,
                   char *err, size_t errlen);

/* "NAME-0.SERVICE[.NS.svc]:PORT,..." for n pods of a StatefulSet. */
void ss__ctl_pod_list(const char *sts, const char *svc, const char *ns, int64_t port, int64_t n,
                      char *out, size_t len);

/* shadowsync-ctl scale (argv[0] is "scale"): its exit code. */
int ss__ctl_scale_main(int argc, char **argv);

#endif
