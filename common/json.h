/* JSON documents (json-c) for /status and its readers. A library of its
 * own (ss_json) so that only the daemons and shadowsync-ctl link json-c,
 * not libshadowsync. */
#ifndef SS_COMMON_JSON_H
#define SS_COMMON_JSON_H

#include <json-c/json.h>
#include <stddef.h>

#include "shadowsync/status.h"

/* Writes root as pretty-printed JSON plus a newline into *out (caller
 * frees; *len its length when len is not NULL) and releases root. */
ss_status ss__json_take(json_object *root, char **out, size_t *len);

/* Parses text as one JSON document; NULL with why when it is not. */
json_object *ss__json_parse(const char *text, char *why, size_t whylen);

#endif
