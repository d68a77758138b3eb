/* REQUIRE: an assertion for hot loops. Check records every passing ck_assert
 * (a write to its message file), which costs seconds over millions of checks;
 * this calls into Check only on failure. */
#ifndef LANEPACK_TEST_REQUIRE_H
#define LANEPACK_TEST_REQUIRE_H

#include <check.h>

#define REQUIRE(cond)                                                  \
  do {                                                                 \
    if (!(cond)) ck_abort_msg("%s:%d: %s", __FILE__, __LINE__, #cond); \
  } while (0)

#endif
