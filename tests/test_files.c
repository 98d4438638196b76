/* The files the daemons read and write: private directories and
 * link-safe new files, whole files read by who put them there (token
 * files among them), trees removed without following links. */
#include <check.h>

#include "check_run.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/private_files.h"
#include "common/read_file.h"
#include "rpc/auth.h"

/* The directories the daemons write: made 0700 when missing; an existing
 * one refused when it is a link, a file, writable by others or by a group
 * not the process's own, or (as root) owned by another uid, each saying which flag, what and how to
 * fix it. A temporary file is new (a link planted at any name is never
 * written through), random and 0600. */
START_TEST(test_private_dirs_and_files) {
    char base[] = "/tmp/ss-private-XXXXXX", d[128], link_[128], file[128], why[600];
    ck_assert_ptr_nonnull(mkdtemp(base));
    snprintf(d, sizeof d, "%s/made", base);
    ck_assert_int_eq(ss__private_dir(d, "--x", why, sizeof why), SS_OK);
    struct stat sb;
    ck_assert_int_eq(lstat(d, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 0777, 0700);
    ck_assert_int_eq(ss__private_dir(d, "--x", why, sizeof why), SS_OK); /* again: ours */

    /* Writable by its group when the group is this process's own: what
     * Kubernetes' fsGroup makes of a volume (setgid, g+rwx) is the
     * daemon's; another group's is not. */
    ck_assert_int_eq(chown(d, (uid_t)-1, getegid()), 0);
    ck_assert_int_eq(chmod(d, 02770), 0);
    ck_assert_int_eq(ss__private_dir(d, "--x", why, sizeof why), SS_OK);
    if (geteuid() == 0) {
        ck_assert_int_eq(chown(d, (uid_t)-1, 65534), 0);
        ck_assert_int_eq(ss__private_dir(d, "--x", why, sizeof why), SS_ERR_PERMISSION);
        ck_assert_ptr_nonnull(strstr(why, "--x"));
        ck_assert_ptr_nonnull(strstr(why, "a group not this process's"));
        ck_assert_ptr_nonnull(strstr(why, "chmod go-w"));
        ck_assert_int_eq(chown(d, (uid_t)-1, getegid()), 0);
    }
    ck_assert_int_eq(chmod(d, 0702), 0);
    ck_assert_int_eq(ss__private_dir(d, "--x", why, sizeof why), SS_ERR_PERMISSION);
    ck_assert_ptr_nonnull(strstr(why, "chmod go-w"));
    ck_assert_int_eq(chmod(d, 0755), 0);
    ck_assert_int_eq(ss__private_dir(d, "--x", why, sizeof why), SS_OK); /* readable is fine */

    snprintf(link_, sizeof link_, "%s/link", base);
    ck_assert_int_eq(symlink(d, link_), 0);
    ck_assert_int_eq(ss__private_dir(link_, "--x", why, sizeof why), SS_ERR_PERMISSION);
    ck_assert_ptr_nonnull(strstr(why, "symbolic link"));
    snprintf(file, sizeof file, "%s/file", base);
    FILE *f = fopen(file, "w");
    fclose(f);
    ck_assert_int_eq(ss__private_dir(file, "--x", why, sizeof why), SS_ERR_PERMISSION);
    if (geteuid() == 0) { /* another user's directory: only root can make one here */
        ck_assert_int_eq(chown(d, 65534, 65534), 0);
        ck_assert_int_eq(ss__private_dir(d, "--x", why, sizeof why), SS_ERR_PERMISSION);
        ck_assert_ptr_nonnull(strstr(why, "uid 65534"));
    }

    /* A link planted at the old predictable name, and the new file. */
    char final[160], planted[200], tmp[200];
    snprintf(final, sizeof final, "%s/made/out", base);
    snprintf(planted, sizeof planted, "%s.tmp", final);
    ck_assert_int_eq(symlink(file, planted), 0);
    int fd = ss__private_tmp_open(final, tmp, sizeof tmp);
    ck_assert_int_ge(fd, 0);
    ck_assert_str_ne(tmp, planted);
    ck_assert_int_eq(strncmp(tmp, final, strlen(final)), 0);
    ck_assert_int_eq(fstat(fd, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 0777, 0600);
    ck_assert_int_eq(write(fd, "x", 1), 1);
    close(fd);
    ck_assert_int_eq(stat(file, &sb), 0);
    ck_assert_int_eq(sb.st_size, 0); /* the planted link's target is untouched */
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ss__read_file: a file whole and NUL-terminated; missing, too large
 * and (ours) a link or not a regular file each refused as such, while an
 * operator's link is followed and a pipe read to its end, bounded too. */
START_TEST(test_whole_files_by_origin) {
    char base[] = "/tmp/ss-readfile-XXXXXX", file[96], link_[96], why[64];
    ck_assert_ptr_nonnull(mkdtemp(base));
    snprintf(file, sizeof file, "%s/f", base);
    snprintf(link_, sizeof link_, "%s/l", base);
    FILE *f = fopen(file, "w");
    fputs("epoch 3\nps a:1\n", f);
    fclose(f);
    ck_assert_int_eq(symlink(file, link_), 0);
    unsigned char *buf;
    size_t len;
    for (int origin = SS_FILE_OURS; origin <= SS_FILE_OPERATORS; origin++) {
        ck_assert_int_eq(ss__read_file(file, origin, 15, &buf, &len), SS_OK);
        ck_assert_uint_eq(len, 15);
        ck_assert_str_eq((char *)buf, "epoch 3\nps a:1\n");
        free(buf);
        ck_assert_int_eq(ss__read_file(file, origin, 14, &buf, &len), SS_ERR_TOO_LARGE);
        ck_assert_ptr_null(buf);
        snprintf(why, sizeof why, "%s/none", base);
        ck_assert_int_eq(ss__read_file(why, origin, 99, &buf, &len), SS_ERR_NOT_FOUND);
        ck_assert_int_eq(ss__read_file(base, origin, 99, &buf, &len), SS_ERR_IO); /* a directory */
    }
    ck_assert_int_eq(ss__read_file(link_, SS_FILE_OURS, 99, &buf, &len), SS_ERR_IO);
    char fifo[96];
    snprintf(fifo, sizeof fifo, "%s/fifo", base); /* ours: refused at once, no writer awaited */
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    ck_assert_int_eq(ss__read_file(fifo, SS_FILE_OURS, 99, &buf, &len), SS_ERR_IO);
    unlink(fifo);
    ck_assert_int_eq(ss__read_file(link_, SS_FILE_OPERATORS, 99, &buf, &len), SS_OK);
    ck_assert_uint_eq(len, 15);
    free(buf);

    /* Pipes: read to the end (past the first guess of their size), or
     * refused past the bound; never one of ours. */
    enum { PIPED = 6000 };
    char text[PIPED];
    memset(text, 'x', sizeof text);
    for (size_t max = PIPED; max >= PIPED - 1; max--) {
        int p[2];
        ck_assert_int_eq(pipe(p), 0);
        ck_assert_int_eq(write(p[1], text, sizeof text), (ssize_t)sizeof text);
        close(p[1]);
        char path[32];
        snprintf(path, sizeof path, "/dev/fd/%d", p[0]);
        ck_assert_int_eq(ss__read_file(path, SS_FILE_OURS, max, &buf, &len), SS_ERR_IO);
        ss_status st = ss__read_file(path, SS_FILE_OPERATORS, max, &buf, &len);
        close(p[0]);
        if (max == PIPED) {
            ck_assert_int_eq(st, SS_OK);
            ck_assert_uint_eq(len, PIPED);
            ck_assert(memcmp(buf, text, PIPED) == 0 && buf[PIPED] == '\0');
            free(buf);
        } else {
            ck_assert_int_eq(st, SS_ERR_TOO_LARGE);
        }
    }
    unlink(link_);
    unlink(file);
    rmdir(base);
}
END_TEST

/* ss__remove_tree: a directory with everything under it, depth first; a
 * link inside is removed, never followed (what it points at stays); a
 * path already gone is no error. */
START_TEST(test_trees_removed_without_following_links) {
    char base[] = "/tmp/ss-tree-XXXXXX", outside[] = "/tmp/ss-tree-out-XXXXXX", p[200];
    ck_assert_ptr_nonnull(mkdtemp(base));
    ck_assert_ptr_nonnull(mkdtemp(outside));
    snprintf(p, sizeof p, "%s/kept", outside);
    FILE *f = fopen(p, "w");
    fclose(f);
    char sub[128], link_[160];
    snprintf(sub, sizeof sub, "%s/a/b", base);
    snprintf(p, sizeof p, "%s/a", base);
    ck_assert_int_eq(mkdir(p, 0700), 0);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    snprintf(p, sizeof p, "%s/f", sub);
    f = fopen(p, "w");
    fclose(f);
    snprintf(link_, sizeof link_, "%s/to-outside", sub);
    ck_assert_int_eq(symlink(outside, link_), 0);
    ck_assert_int_eq(ss__remove_tree(base), 0);
    struct stat sb;
    ck_assert_int_ne(lstat(base, &sb), 0);
    snprintf(p, sizeof p, "%s/kept", outside);
    ck_assert_int_eq(stat(p, &sb), 0);          /* the link's target is untouched */
    ck_assert_int_eq(ss__remove_tree(base), 0); /* gone already */
    ck_assert_int_eq(ss__remove_tree(outside), 0);
    ck_assert_int_ne(lstat(outside, &sb), 0);
}
END_TEST

/* A token file, an operator's: read through a link, one newline
 * dropped; missing, too short, too long (past what is read) or with a
 * space each refused, saying which. */
START_TEST(test_token_files_checked) {
    char base[] = "/tmp/ss-token-XXXXXX", path[96], link_[96], header[SS_AUTH_HEADER_MAX], why[400];
    ck_assert_ptr_nonnull(mkdtemp(base));
    snprintf(path, sizeof path, "%s/token", base);
    snprintf(link_, sizeof link_, "%s/link", base);
    char longer[SS_AUTH_TOKEN_MAX + 2], longest[SS_AUTH_TOKEN_MAX + 64];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0'; /* one past the limit: read, then refused */
    memset(longest, 'a', sizeof longest - 1);
    longest[sizeof longest - 1] = '\0'; /* past what is read at all */
    const char *cases[][2] = {{"0123456789abcdef\n", NULL},
                              {"0123456789abcde\n", "16 to 256"},
                              {"0123456789 abcdef", "16 to 256"},
                              {longer, "16 to 256"},
                              {longest, "16 to 256"}};
    ck_assert_int_eq(symlink(path, link_), 0);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        FILE *f = fopen(path, "w");
        fputs(cases[i][0], f);
        fclose(f);
        ss_status st = ss__auth_header_from_file(link_, header, sizeof header, why, sizeof why);
        if (!cases[i][1]) {
            ck_assert_int_eq(st, SS_OK);
            ck_assert_str_eq(header, "Bearer 0123456789abcdef");
        } else {
            ck_assert_int_eq(st, SS_ERR_INVALID_ARGUMENT);
            ck_assert_msg(strstr(why, cases[i][1]) && strstr(why, link_), "%zu: %s", i, why);
        }
    }
    unlink(path);
    ck_assert_int_eq(ss__auth_header_from_file(link_, header, sizeof header, why, sizeof why),
                     SS_ERR_IO);
    ck_assert_ptr_nonnull(strstr(why, "cannot read the token file"));
    unlink(link_);
    rmdir(base);
}
END_TEST

SS_CHECK_MAIN("files", 0, NULL, NULL, test_private_dirs_and_files, test_whole_files_by_origin,
              test_trees_removed_without_following_links, test_token_files_checked)
