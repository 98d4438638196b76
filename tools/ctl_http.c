/* shadowsync-ctl's shared parts (tools/ctl.h): HTTP through libcurl with
 * the shared token, and a StatefulSet's pod names. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"
#include "rpc/auth.h"
#include "tools/ctl.h"

static size_t on_body(char *data, size_t size, size_t n, void *ctx) {
    ss__strbuf_printf(ctx, "%.*s", (int)(size * n), data);
    return size * n;
}

/* GET or POST url + path; the body in *out (caller frees). Returns the
 * HTTP code, or -1 when nothing answered (err says why). */
long ss__ctl_fetch(const char *base, const char *path, bool post, long timeout_ms, char **out,
                   char *err, size_t errlen) {
    char url[1024];
    snprintf(url, sizeof url, "%s%s", base, path);
    CURL *c = curl_easy_init();
    if (!c) {
        snprintf(err, errlen, "curl_easy_init failed");
        return -1;
    }
    ss__strbuf body = {0};
    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    struct curl_slist *headers = NULL;
    if (post) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    }
    /* The shared token when there is one: a POST changes state, and
     * /status names groups and trainers only to the token's holders. */
    char auth[SS_AUTH_HEADER_MAX], header[SS_AUTH_HEADER_MAX + 32];
    if (ss__auth_header_from_env(auth, sizeof auth, err, errlen) != SS_OK) {
        curl_easy_cleanup(c);
        return -1;
    }
    if (auth[0]) {
        snprintf(header, sizeof header, "Authorization: %s", auth);
        headers = curl_slist_append(NULL, header);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    }
    CURLcode rc = curl_easy_perform(c);
    long code = -1;
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    else
        snprintf(err, errlen, "%.200s: %.300s", url, cerr[0] ? cerr : curl_easy_strerror(rc));
    curl_easy_cleanup(c);
    curl_slist_free_all(headers);
    if (ss__strbuf_take(&body, out, NULL) != SS_OK) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return code;
}

/* "NAME-0.SERVICE[.NS.svc]:PORT,..." for n pods into out. */
void ss__ctl_pod_list(const char *sts, const char *svc, const char *ns, int64_t port, int64_t n,
                      char *out, size_t len) {
    size_t at = 0;
    out[0] = '\0';
    for (int64_t i = 0; i < n && at < len; i++)
        at += (size_t)snprintf(out + at, len - at, "%s%s-%lld.%s%s%s%s:%lld", i ? "," : "", sts,
                               (long long)i, svc, *ns ? "." : "", ns, *ns ? ".svc" : "",
                               (long long)port);
}
