/* What an attacker plants where a daemon writes: a symbolic link to a file
 * of someone else's, and the check that the file came through untouched. */
#ifndef SS_TESTS_PLANTED_LINK_H
#define SS_TESTS_PLANTED_LINK_H

#include <check.h>
#include <stdio.h>
#include <unistd.h>

/* target holds "precious"; planted is a link to it. */
static inline void plant_link(const char *planted, const char *target) {
    FILE *f = fopen(target, "w");
    ck_assert_ptr_nonnull(f);
    fputs("precious", f);
    fclose(f);
    ck_assert_int_eq(symlink(target, planted), 0);
}

/* target still holds "precious": nothing was written through the link. */
static inline void assert_not_written_through(const char *target) {
    char got[32] = "";
    FILE *f = fopen(target, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(got, sizeof got, f));
    fclose(f);
    ck_assert_str_eq(got, "precious");
}

#endif
