/* HTTP for the multi-process tests (libcurl): GET or POST to a process's
 * endpoint, and read Prometheus text. */
#ifndef SS_TESTS_HTTP_CLIENT_H
#define SS_TESTS_HTTP_CLIENT_H

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"

static size_t http_collect(char *data, size_t size, size_t n, void *ctx) {
    ss__strbuf_printf(ctx, "%.*s", (int)(size * n), data);
    return size * n;
}

/* GET (body == NULL) or POST; returns the HTTP code (-1: no answer) and
 * the reply in *out (caller frees; may be NULL). */
static inline long http_request(const char *base, const char *path, const char *method,
                                const char *body, size_t body_len, char **out) {
    char url[100000 + 256];
    snprintf(url, sizeof url, "%s%s", base, path);
    CURL *c = curl_easy_init();
    ss__strbuf b = {0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (method)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    /* A body waits for the server's go-ahead (100 Continue), as a careful
     * client sends a large one: a server that refuses it from its headers
     * (413) answers and closes without reading it, and a client still
     * sending then may see the connection reset before it reads the
     * answer (test_agent's 1 MiB POST said -1 once under ctest -j3; curl
     * 7.88 asks on its own only past 1 MiB). The wait is long: under load
     * the server's answer may take more than curl's default second. */
    struct curl_slist *headers = NULL;
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)body_len);
        headers = curl_slist_append(NULL, "Expect: 100-continue");
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(c, CURLOPT_EXPECT_100_TIMEOUT_MS, 10000L);
    }
    long code = -1;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    curl_slist_free_all(headers);
    char *text = NULL;
    if (ss__strbuf_take(&b, &text, NULL) != SS_OK)
        text = NULL;
    if (out)
        *out = text;
    else
        free(text);
    return code;
}

/* Sum of every series of `name` (with any labels) in Prometheus text;
 * -1 when there is none. With `label` ("reason=\"uid\""), only series
 * whose labels contain it. */
static inline double metric_sum(const char *text, const char *name, const char *label) {
    double sum = -1;
    size_t nl = strlen(name);
    for (const char *line = text; line && *line; line = strchr(line, '\n')) {
        if (*line == '\n')
            line++;
        if (strncmp(line, name, nl) || (line[nl] != '{' && line[nl] != ' '))
            continue;
        const char *end = strchr(line, '\n');
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", (int)(end ? end - line : (long)strlen(line)), line);
        if (label && !strstr(buf, label))
            continue;
        const char *sp = strrchr(buf, ' ');
        sum = (sum < 0 ? 0 : sum) + atof(sp + 1);
    }
    return sum;
}

#endif
