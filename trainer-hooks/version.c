/* ss_version (shadowsync.h): the build's version, as every program's
 * --version says it (common/flags.h). */
#include "common/flags.h"
#include "shadowsync/shadowsync.h"

const char *ss_version(void) {
    return ss__version();
}
