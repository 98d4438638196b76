/* Where the daemons keep files: directories only this process's user can
 * change, and files created new (never opened through a planted link).
 *
 * A PS or agent run as root with --checkpoint-dir /tmp/x must not write
 * into a /tmp/x another user made first (that user could read the
 * checkpoints, or plant a link that makes root overwrite any file), so an
 * existing directory is refused unless it is a real directory owned by
 * this uid and not writable by group or others. Files are written to a
 * fresh temporary name created with O_EXCL (a link at that name makes the
 * create fail instead of being followed), then renamed over the final
 * name (rename replaces a link, it never writes through one). */
#ifndef SS_COMMON_PRIVATE_FILES_H
#define SS_COMMON_PRIVATE_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#include "shadowsync/status.h"

/* Creates dir (mode 0700) when it is missing; an existing one must be a
 * directory (not a link to one) that passes ss__private_owner_check.
 * SS_ERR_PERMISSION (or SS_ERR_IO) otherwise, why naming flag, what is
 * wrong and how to fix it. */
ss_status ss__private_dir(const char *dir, const char *flag, char *why, size_t whylen);

/* The owner rule of the above for something already opened or stat'ed:
 * owned by this process's effective uid, not writable by others, and
 * writable by its group only when that group is this process's effective
 * gid (Kubernetes' fsGroup with runAsGroup the same: setgid directories,
 * g+rw files). SS_ERR_PERMISSION with why naming flag and path otherwise. */
ss_status ss__private_owner_check(const struct stat *sb, const char *flag, const char *path,
                                  char *why, size_t whylen);

/* Opens name under the directory dirfd (AT_FDCWD: a path) to read, never
 * through a link at its last component (O_NOFOLLOW), and checks that it is
 * a directory (directory) or a regular file, and private by the rule
 * above: what a reader of files that this uid wrote (a follower's delta
 * directory) opens, so that another user can neither plant nor redirect
 * one. Returns the descriptor, or -1 with why naming flag and name and
 * errno EPERM for a refusal (ENOENT: no such name). */
int ss__private_open_at(int dirfd, const char *name, bool directory, const char *flag, char *why,
                        size_t whylen);

/* Opens an operator's file that says where this process sends its token
 * (a shard map), so that no other user can make it say another address:
 * a regular file of this uid or root, not writable by group or others, in
 * a directory others cannot replace it in; a link only as a Kubernetes
 * volume lays its files out (NAME -> ..data/NAME). Returns the
 * descriptor, or -1 with why naming what (and path) and errno (ENOENT: no
 * such file; EPERM: refused). */
int ss__operator_file_open(const char *path, const char *what, char *why, size_t whylen);

/* Creates a new file beside final_path for writing: "<final_path>.XXXXXX"
 * (random), O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode 0600. Its name goes to
 * tmp. Returns the descriptor, or -1 with errno set. */
int ss__private_tmp_open(const char *final_path, char *tmp, size_t tmplen);

/* fsyncs the directory that holds path, so that a rename into it survives
 * a power cut. SS_ERR_IO when it cannot be opened or synced. */
ss_status ss__fsync_parent_dir(const char *path);

/* Removes path and everything under it, depth first and never through a
 * link (a link is removed, not what it points at). 0, also when path is
 * already gone; -1 with errno set when something could not be removed. */
int ss__remove_tree(const char *path);

/* The file mode creation mask of the daemons (027): files that libraries
 * create (RocksDB's, a checkpoint's hard links) are at most 0640. */
void ss__private_umask(void);

#endif
