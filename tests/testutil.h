/* Shared test scaffolding: a Check runner for a list of tests (LP_TEST_MAIN,
 * every C test's main), and REQUIRE for hot loops (Check records every passing ck_assert with a write to its message
 * file, seconds over millions of checks; REQUIRE calls Check only on failure). */
#ifndef LANEPACK_TESTUTIL_H
#define LANEPACK_TESTUTIL_H

#include <check.h>
#include <stdlib.h>

#define REQUIRE(cond)                                                  \
  do {                                                                 \
    if (!(cond)) ck_abort_msg("%s:%d: %s", __FILE__, __LINE__, #cond); \
  } while (0)

/* Seconds each test may run: a file whose tests drive servers defines a longer
 * one before including this header. */
#ifndef LP_TEST_TIMEOUT_S
#define LP_TEST_TIMEOUT_S 60
#endif

static inline int lp_test_main(const char *name, const TTest *const *tests, size_t n) {
  Suite *s = suite_create(name);
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, LP_TEST_TIMEOUT_S);
  for (size_t i = 0; i < n; i++) _tcase_add_test(tc, tests[i], 0, 0, 0, 1);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#define LP_TEST_MAIN(name, ...)                                      \
  int main(void) {                                                   \
    const TTest *const tests_[] = {__VA_ARGS__};                     \
    return lp_test_main(name, tests_, sizeof(tests_) / sizeof(tests_[0])); \
  }

#endif
