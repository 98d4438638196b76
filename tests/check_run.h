/* Shared by the Check suites: run a suite, return the process exit code. */
#ifndef SS_TESTS_CHECK_RUN_H
#define SS_TESTS_CHECK_RUN_H

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int ss__check_run(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* A suite of one test case: its tests run with an optional fixture (setup
 * and teardown around each test, in its own process; NULL: none) and a
 * timeout per test (0: Check's default). Gives the process exit code:
 *     return ss__check_tests("rpc", 60, NULL, NULL, test_a, test_b); */
static inline int ss__check_run_tests(const char *name, double timeout_s, SFun setup, SFun teardown,
                                      const TTest *const *tests, size_t n) {
    Suite *s = suite_create(name);
    TCase *tc = tcase_create(name);
    if (setup || teardown)
        tcase_add_checked_fixture(tc, setup, teardown);
    if (timeout_s > 0)
        tcase_set_timeout(tc, timeout_s);
    /* SS_CHECK_ONLY=word: only the tests whose name has it (to run one
     * test again and again while hunting a rare failure) */
    const char *only = getenv("SS_CHECK_ONLY");
    for (size_t i = 0; i < n; i++)
        if (!only || strstr(tests[i]->name, only))
            tcase_add_test(tc, tests[i]);
    suite_add_tcase(s, tc);
    return ss__check_run(s);
}

#define ss__check_tests(name, timeout_s, setup, teardown, ...)                                     \
    ss__check_run_tests((name), (timeout_s), (setup), (teardown), (const TTest *[]){__VA_ARGS__},  \
                        sizeof((const TTest *[]){__VA_ARGS__}) / sizeof(const TTest *))

/* A test program whose main only runs its suite (SIGPIPE ignored: a peer
 * that closes its socket fails the test's write, it does not kill the
 * test program):
 *     SS_CHECK_MAIN("rpc", 60, NULL, NULL, test_a, test_b) */
#define SS_CHECK_MAIN(name, timeout_s, setup, teardown, ...)                                       \
    int main(void) {                                                                               \
        signal(SIGPIPE, SIG_IGN);                                                                  \
        return ss__check_tests((name), (timeout_s), (setup), (teardown), __VA_ARGS__);             \
    }

/* A fresh directory /tmp/<prefix>-XXXXXX for a test (dir: 64 bytes), and
 * its removal with everything in it. */
static inline void ss__check_tmpdir(char dir[64], const char *prefix) {
    snprintf(dir, 64, "/tmp/%s-XXXXXX", prefix);
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

/* A shard map file ("epoch", "ps", "from" when given), written whole: a
 * PS never reads half of one. */
static inline void ss__check_write_map(const char *path, uint64_t epoch, const char *ps,
                                       const char *from) {
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "epoch %llu\nps %s\n", (unsigned long long)epoch, ps);
    if (from)
        fprintf(f, "from %s\n", from);
    fclose(f);
    ck_assert_int_eq(rename(tmp, path), 0);
}

static inline void ss__check_rmdir(const char *dir) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

#endif
