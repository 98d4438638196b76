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

ss_status ss__private_owner_check(const struct stat *sb, const char *flag, const char *path,
                                  char *why, size_t whylen) {
    if (sb->st_uid != geteuid()) {
        ss__why(why, whylen,
                "%s: %s belongs to uid %d, not to this process's uid %d: another user made it "
                "and could read or replace what is there; use one of your own (or remove it, or "
                "chown %d it)",
                flag, path, (int)sb->st_uid, (int)geteuid(), (int)geteuid());
        return SS_ERR_PERMISSION;
    }
    /* Group-writable is the daemon's own when the group is its own (its
     * effective gid): what Kubernetes' fsGroup makes of a volume (setgid
     * directories, g+rw files) with runAsGroup = fsGroup. Another group's,
     * or writable by others, is not. */
    const bool group_other = (sb->st_mode & S_IWGRP) && sb->st_gid != getegid();
    if ((sb->st_mode & S_IWOTH) || group_other) {
        ss__why(why, whylen,
                "%s: %s (mode %03o, group %d) is writable by %s: others could plant links or "
                "files in it; chmod go-w %s",
                flag, path, (unsigned)(sb->st_mode & 07777), (int)sb->st_gid,
                (sb->st_mode & S_IWOTH) ? "others" : "a group not this process's", path);
        return SS_ERR_PERMISSION;
    }
    return SS_OK;
}

/* What a path that must be a directory (or a file) is instead. */
static const char *kind_of(mode_t mode) {
    return S_ISLNK(mode) ? "a symbolic link" : S_ISDIR(mode) ? "a directory" : "a file";
}

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
                flag, dir, kind_of(sb.st_mode));
        return SS_ERR_PERMISSION;
    }
    return ss__private_owner_check(&sb, flag, dir, why, whylen);
}

int ss__private_open_at(int dirfd, const char *name, bool directory, const char *flag, char *why,
                        size_t whylen) {
    /* O_NONBLOCK: a FIFO planted at the name is refused below, not waited on. */
    const int fd =
        openat(dirfd, name,
               O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (directory ? O_DIRECTORY : 0));
    struct stat sb;
    if (fd < 0 && fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(sb.st_mode)) {
        ss__why(why, whylen, "%s: %s is a symbolic link: never followed there", flag, name);
        errno = EPERM; /* (ELOOP, or ENOTDIR for a directory) */
        return -1;
    }
    if (fd < 0 || fstat(fd, &sb) != 0) {
        ss__why(why, whylen, "%s: cannot open %s: %s", flag, name, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    const bool kind_ok = directory ? S_ISDIR(sb.st_mode) : S_ISREG(sb.st_mode);
    if (!kind_ok)
        ss__why(why, whylen, "%s: %s is %s, not %s", flag, name,
                S_ISFIFO(sb.st_mode) ? "a pipe" : kind_of(sb.st_mode),
                directory ? "a directory" : "a regular file");
    if (!kind_ok || ss__private_owner_check(&sb, flag, name, why, whylen) != SS_OK) {
        close(fd);
        errno = EPERM;
        return -1;
    }
    if (fcntl(fd, F_SETFL, 0) != 0) { /* reads block as usual from here */
        close(fd);
        return -1;
    }
    return fd;
}

/* path is a Kubernetes volume's file as kubelet's atomic writer lays it
 * out (ConfigMap, Secret): NAME -> ..data/NAME, and ..data -> a
 * "..<timestamp>" directory beside it. */
static bool kubernetes_volume_link(const char *path, const char *dir, const char *name) {
    char target[4200], data[4200];
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0)
        return false;
    target[n] = '\0';
    char want[4200];
    snprintf(want, sizeof want, "..data/%s", name);
    if (strcmp(target, want) != 0)
        return false;
    snprintf(data, sizeof data, "%s/..data", dir);
    struct stat sb;
    if (lstat(data, &sb) != 0 || !S_ISLNK(sb.st_mode) ||
        (n = readlink(data, target, sizeof target - 1)) <= 0)
        return false;
    target[n] = '\0';
    return !strncmp(target, "..", 2) && !strchr(target, '/');
}

/* The directory that holds path, into dir ("." for a bare name, "/" at
 * the root); returns path's last component. */
static const char *parent_dir(const char *path, char *dir, size_t dirlen) {
    snprintf(dir, dirlen, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, dirlen, ".");
    else if (slash == dir)
        slash[1] = '\0';
    else
        *slash = '\0';
    const char *name = strrchr(path, '/');
    return name ? name + 1 : path;
}

/* Who may own an operator's file or its directory: this uid, or root. */
static bool owner_trusted(const struct stat *sb) {
    return sb->st_uid == geteuid() || sb->st_uid == 0;
}

/* The directory that holds an operator's file: nobody else may replace
 * the file there (owned by this uid or root; writable by others only with
 * the sticky bit, by its group only when it is this process's group). */
static bool dir_trusted(const char *dir, const char *what, const char *path, char *why,
                        size_t whylen) {
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        ss__why(why, whylen, "%s %s: cannot stat its directory: %s", what, path, strerror(errno));
        return false;
    }
    const bool others = (sb.st_mode & S_IWOTH) && !(sb.st_mode & S_ISVTX),
               group = (sb.st_mode & S_IWGRP) && sb.st_gid != getegid();
    if (owner_trusted(&sb) && !others && !group)
        return true;
    ss__why(why, whylen,
            "%s %s: its directory %s (uid %d, mode %03o) lets another user replace it; keep it "
            "in a directory of this user's or root's that others cannot write",
            what, path, dir, (int)sb.st_uid, (unsigned)(sb.st_mode & 07777));
    return false;
}

int ss__operator_file_open(const char *path, const char *what, char *why, size_t whylen) {
    char dir[4096];
    const char *name = parent_dir(path, dir, sizeof dir);
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        ss__why(why, whylen, "%s %s: %s", what, path, strerror(errno));
        return -1;
    }
    const bool k8s = S_ISLNK(sb.st_mode) && kubernetes_volume_link(path, dir, name);
    if (S_ISLNK(sb.st_mode) && !k8s) {
        ss__why(why, whylen,
                "%s %s is a symbolic link, and not a Kubernetes volume's (%s -> ..data/%s): give "
                "the file itself",
                what, path, name, name);
        errno = EPERM;
        return -1;
    }
    /* A volume's directory is kubelet's to write: not checked. */
    if (!k8s && !dir_trusted(dir, what, path, why, whylen)) {
        errno = EPERM;
        return -1;
    }
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 || fstat(fd, &sb) != 0) {
        ss__why(why, whylen, "%s %s: %s", what, path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    const char *wrong = !S_ISREG(sb.st_mode)                 ? "is not a regular file"
                        : !owner_trusted(&sb)                ? "belongs to another user"
                        : (sb.st_mode & (S_IWGRP | S_IWOTH)) ? "is writable by others"
                                                             : NULL;
    if (wrong) {
        ss__why(why, whylen,
                "%s %s %s (uid %d, mode %03o): another user could rewrite it; it must be this "
                "user's or root's, and chmod go-w",
                what, path, wrong, (int)sb.st_uid, (unsigned)(sb.st_mode & 07777));
        close(fd);
        errno = EPERM;
        return -1;
    }
    if (fcntl(fd, F_SETFL, 0) != 0) {
        close(fd);
        return -1;
    }
    return fd;
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
    parent_dir(path, dir, sizeof dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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
