#include "common/names.h"

#include <string.h>

bool ss__name_valid(const char *name) {
    size_t n = name ? strnlen(name, SS_NAME_MAX) : 0;
    if (n == 0 || n == SS_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}
