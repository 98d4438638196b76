#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/grow.h"
#include "common/log.h"
#include "common/names.h"
#include "common/private_files.h"
#include "embedding-store/checkpoints_internal.h"

ss_status ss__emb_ckpt_path(const char *root, const char *name, char *path, size_t pathlen,
                            char *why, size_t whylen) {
    char made[SS_NAME_MAX];
    if (!root || !*root) {
        snprintf(why, whylen, "the server has no checkpoint directory (start it with one)");
        return SS_ERR_STATE;
    }
    if (!name || !*name) {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        snprintf(made, sizeof made, "emb-%04d%02d%02dT%02d%02d%02d.%03ldZ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
        name = made;
    }
    if (!ss__name_valid(name)) {
        snprintf(why, whylen,
                 "a checkpoint is named, not placed: the name must be " SS_NAME_RULE
                 " (it goes under the server's checkpoint directory)");
        return SS_ERR_INVALID_ARGUMENT;
    }
    if (snprintf(path, pathlen, "%s/%s", root, name) >= (int)pathlen) {
        snprintf(why, whylen, "checkpoint path longer than %zu bytes", pathlen - 1);
        return SS_ERR_INVALID_ARGUMENT;
    }
    struct stat sb;
    if (lstat(path, &sb) == 0) {
        snprintf(why, whylen, "checkpoint %s exists; a checkpoint goes into a new directory", name);
        return SS_ERR_EXISTS;
    }
    return SS_OK;
}

typedef struct ckpt {
    char name[SS_NAME_MAX];
    struct timespec mtime;
} ckpt;

static int older_first(const void *a, const void *b) {
    const ckpt *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Directories under root that hold a RocksDB CURRENT file and a valid
 * name, in *out (caller frees); -1 when root cannot be read. */
static long list_checkpoints(const char *root, ckpt **out) {
    DIR *d = opendir(root);
    if (!d)
        return -1;
    ckpt *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char current[4200];
        struct stat dir_sb, cur_sb;
        if (!ss__name_valid(e->d_name) ||
            snprintf(current, sizeof current, "%s/%s/CURRENT", root, e->d_name) >=
                (int)sizeof current ||
            lstat(current, &cur_sb) != 0)
            continue;
        current[strlen(current) - strlen("/CURRENT")] = '\0';
        if (lstat(current, &dir_sb) != 0 || !S_ISDIR(dir_sb.st_mode))
            continue;
        if (!SS_GROW(v, cap, n, 16))
            break;
        snprintf(v[n].name, sizeof v[n].name, "%.63s", e->d_name); /* valid: < 64 */
        v[n++].mtime = dir_sb.st_mtim;
    }
    closedir(d);
    *out = v;
    return (long)n;
}

size_t ss__emb_ckpt_prune(const char *root, uint32_t keep) {
    ckpt *v = NULL;
    long n = list_checkpoints(root, &v);
    size_t removed = 0;
    if (n > (long)keep) {
        qsort(v, (size_t)n, sizeof *v, older_first);
        for (long i = 0; i < n - (long)keep; i++) {
            char path[4200];
            snprintf(path, sizeof path, "%s/%s", root, v[i].name);
            if (ss__remove_tree(path) == 0) {
                removed++;
                ss__log(SS_LOG_INFO, "emb", "event=checkpoint_pruned name=%s keep=%u", v[i].name,
                        keep);
            } else {
                ss__log(SS_LOG_ERROR, "emb", "event=checkpoint_prune_failed name=%s error=%s",
                        v[i].name, strerror(errno));
            }
        }
    }
    free(v);
    return removed;
}
