#include "tools/reshard/reshard.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/private_files.h"
#include "tools/reshard/reshard_internal.h"

/* An output must be new: missing, or an empty directory. */
static ss_status check_new(const char *path, const char *flag, char *why, size_t whylen) {
    DIR *d = opendir(path);
    if (!d && errno == ENOENT)
        return SS_OK;
    if (!d) {
        snprintf(why, whylen, "%s %s: %s", flag, path, strerror(errno));
        return SS_ERR_IO;
    }
    struct dirent *e;
    bool empty = true;
    while ((e = readdir(d)))
        empty &= !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(d);
    if (empty)
        return SS_OK;
    snprintf(why, whylen, "%s %s exists and is not empty: an output is written new", flag, path);
    return SS_ERR_EXISTS;
}

static ss_status check_counts(const ss__reshard_config *c, char *why, size_t whylen) {
    const struct {
        size_t in, out;
        const char *what;
    } pairs[] = {{c->n_in_db, c->n_out_db, "--in-emb-db and --out-emb-db"},
                 {c->n_in_ckpt, c->n_out_ckpt, "--in-checkpoint-dir and --out-checkpoint-dir"}};
    for (size_t i = 0; i < 2; i++) {
        if (!pairs[i].in != !pairs[i].out || pairs[i].in > SS_RESHARD_MAX_SHARDS ||
            pairs[i].out > SS_RESHARD_MAX_SHARDS) {
            snprintf(why, whylen, "%s: give both, 1 to %d directories each", pairs[i].what,
                     SS_RESHARD_MAX_SHARDS);
            return SS_ERR_INVALID_ARGUMENT;
        }
    }
    if (!c->n_in_db && !c->n_in_ckpt) {
        snprintf(why, whylen,
                 "nothing to reshard: give --in-emb-db/--out-emb-db, "
                 "--in-checkpoint-dir/--out-checkpoint-dir, or both");
        return SS_ERR_INVALID_ARGUMENT;
    }
    return SS_OK;
}

static ss_status check_outputs(const ss__reshard_config *c, char *why, size_t whylen) {
    ss_status s = SS_OK;
    for (size_t j = 0; j < c->n_out_db && s == SS_OK; j++)
        s = check_new(c->out_db[j], "--out-emb-db", why, whylen);
    for (size_t j = 0; j < c->n_out_ckpt && s == SS_OK; j++)
        if ((s = check_new(c->out_ckpt[j], "--out-checkpoint-dir", why, whylen)) == SS_OK)
            s = ss__private_dir(c->out_ckpt[j], "--out-checkpoint-dir", why, whylen);
    return s;
}

ss_status ss__reshard(const ss__reshard_config *cfg, ss__reshard_report *out, char *why,
                      size_t whylen) {
    if (!cfg || !out)
        return SS_ERR_INVALID_ARGUMENT;
    *out = (ss__reshard_report){0};
    ss_status s = check_counts(cfg, why, whylen);
    if (s == SS_OK)
        s = check_outputs(cfg, why, whylen);
    char work[] = "/tmp/ss-reshard-XXXXXX";
    if (s == SS_OK && cfg->n_in_db && !mkdtemp(work)) {
        snprintf(why, whylen, "cannot make a scratch directory in /tmp: %s", strerror(errno));
        s = SS_ERR_IO;
    }
    if (s == SS_OK && cfg->n_in_db)
        s = ss__reshard_emb(cfg, work, out, why, whylen);
    if (cfg->n_in_db)
        rmdir(work);
    if (s == SS_OK && cfg->n_in_ckpt)
        s = ss__reshard_dense(cfg, out, why, whylen);
    return s;
}
