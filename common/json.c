#include "common/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ss_status ss__json_take(json_object *root, char **out, size_t *len) {
    if (!root || !out)
        return SS_ERR_INVALID_ARGUMENT;
    size_t n = 0;
    const char *text = json_object_to_json_string_length(
        root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE,
        &n);
    char *copy = text ? malloc(n + 2) : NULL;
    if (copy) {
        memcpy(copy, text, n);
        copy[n] = '\n';
        copy[n + 1] = '\0';
    }
    json_object_put(root);
    if (!copy)
        return SS_ERR_NO_MEMORY;
    *out = copy;
    if (len)
        *len = n + 1;
    return SS_OK;
}

json_object *ss__json_parse(const char *text, char *why, size_t whylen) {
    json_tokener *tok = json_tokener_new();
    if (!tok) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    size_t n = strlen(text);
    json_object *o = json_tokener_parse_ex(tok, text, (int)n);
    enum json_tokener_error err = json_tokener_get_error(tok);
    if (!o || err != json_tokener_success) {
        snprintf(why, whylen, "not JSON: %s at byte %zu",
                 json_tokener_error_desc(err == json_tokener_success ? json_tokener_continue : err),
                 json_tokener_get_parse_end(tok));
        json_object_put(o);
        o = NULL;
    } else {
        /* Only whitespace may follow the document. */
        size_t end = json_tokener_get_parse_end(tok);
        if (text[end + strspn(text + end, " \t\r\n")] != '\0') {
            snprintf(why, whylen, "not JSON: text after the document at byte %zu", end);
            json_object_put(o);
            o = NULL;
        }
    }
    json_tokener_free(tok);
    return o;
}
