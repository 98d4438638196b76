/* Shared by the Check suites: run a suite, return the process exit code. */
#ifndef SS_TESTS_CHECK_RUN_H
#define SS_TESTS_CHECK_RUN_H

#include <check.h>
#include <stdlib.h>

static inline int ss__check_run(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
