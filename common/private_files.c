/* Private directories and link-safe file creation (private_files.h). */
#include "common/private_files.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/strbuf.h"

ss_status ss__private_dir(const char *dir, const char *flag, char *why, size_t whylen) {
    if (!dir || !*dir) {
        ss__why(why, whylen, "%s: an empty path", flag);
        return SS_ERR_INVALID_ARGUMENT;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        ss__why(why, whylen, "%s: cannot create %s: %s", flag, dir, strerror(errno));
        return SS_ERR_IO;
    }
    struct stat sb;
    if (lstat(dir, &sb) != 0) {
        ss__why(why, whylen, "%s: cannot stat %s: %s", flag, dir, strerror(errno));
        return SS_ERR_IO;
    }
    if (!S_ISDIR(sb.st_mode)) {
        ss__why(why, whylen, "%s: %s is %s, not a directory; give the real path of a directory",
                flag, dir, S_ISLNK(sb.st_mode) ? "a symbolic link" : "a file");
        return SS_ERR_PERMISSION;
    }
    if (sb.st_uid != geteuid()) {
        ss__why(why, whylen,
                "%s: %s belongs to uid %d, not to this process's uid %d: another user made it "
                "first and could read or replace what is written there; use a directory of your "
                "own (or remove it, or chown %d it)",
                flag, dir, (int)sb.st_uid, (int)geteuid(), (int)geteuid());
        return SS_ERR_PERMISSION;
    }
    if (sb.st_mode & (S_IWGRP | S_IWOTH)) {
        ss__why(why, whylen,
                "%s: %s (mode %03o) is writable by %s: others could plant links or files in "
                "it; chmod go-w %s",
                flag, dir, (unsigned)(sb.st_mode & 07777),
                (sb.st_mode & S_IWOTH) ? "others" : "its group", dir);
        return SS_ERR_PERMISSION;
    }
    return SS_OK;
}

int ss__private_tmp_open(const char *final_path, char *tmp, size_t tmplen) {
    if (!final_path || snprintf(tmp, tmplen, "%s.XXXXXX", final_path) >= (int)tmplen) {
        errno = ENAMETOOLONG;
        return -1;
    }
    /* mkostemp: O_CREAT | O_EXCL and mode 0600; a link at the name fails
     * the create (EEXIST) and the next random name is tried. */
    return mkostemp(tmp, O_CLOEXEC | O_NOFOLLOW);
}

ss_status ss__fsync_parent_dir(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    int dfd = open(slash ? (dir[0] ? dir : "/") : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ss_status st = dfd >= 0 && fsync(dfd) == 0 ? SS_OK : SS_ERR_IO;
    if (dfd >= 0)
        close(dfd);
    return st;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

int ss__remove_tree(const char *path) {
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0)
        return 0;
    return errno == ENOENT ? 0 : -1;
}

void ss__private_umask(void) {
    umask(027);
}
