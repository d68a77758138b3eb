/* Tests of the length sources: files (and their errors), mixes, and the
 * statistics of the draws over a fixed seed. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "lanepack/arrivals.h"
#include "lanepack/lengths.h"

static char *write_tmp(const char *text) {
  static char path[64];
  snprintf(path, sizeof(path), "/tmp/lp-lengths-XXXXXX");
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  return path;
}

START_TEST(file_good) {
  char *path = write_tmp("5\n10\r\n\n7\n");
  lp_lengths_t l;
  char err[256];
  ck_assert_int_eq(lp_lengths_load(&l, path, err, sizeof(err)), 0);
  ck_assert_uint_eq(l.count, 3);
  lp_rng_t r;
  lp_rng_seed(&r, 1);
  ck_assert_uint_eq(lp_lengths_next(&l, &r), 5);
  ck_assert_uint_eq(lp_lengths_next(&l, &r), 10);
  ck_assert_uint_eq(lp_lengths_next(&l, &r), 7);
  ck_assert_uint_eq(lp_lengths_next(&l, &r), 5); /* cycles */
  lp_lengths_free(&l);
  unlink(path);
}
END_TEST

START_TEST(file_bad) {
  static const char *bad[] = {"5\nabc\n", "5\n0\n", "5\n-3\n", "5\n7x\n", "\n\n", "99999999999\n"};
  static const char *where[] = {":2:", ":2:", ":2:", ":2:", "no lengths", ":1:"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char *path = write_tmp(bad[i]);
    lp_lengths_t l;
    char err[256] = "";
    ck_assert_int_eq(lp_lengths_load(&l, path, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, path) && strstr(err, where[i]), "case %zu: %s", i, err);
    unlink(path);
  }
  lp_lengths_t l;
  char err[256];
  ck_assert_int_eq(lp_lengths_load(&l, "/nonexistent/file", err, sizeof(err)), -ENOENT);
  ck_assert_ptr_nonnull(strstr(err, "/nonexistent/file"));
}
END_TEST

START_TEST(mixes) {
  lp_lengths_t l;
  char err[256];
  lp_rng_t r;
  lp_rng_seed(&r, 7);
  ck_assert_int_eq(lp_lengths_load(&l, "fixed:42", err, sizeof(err)), 0);
  ck_assert_uint_eq(lp_lengths_next(&l, &r), 42);
  ck_assert_int_eq(lp_lengths_load(&l, "uniform:10,20", err, sizeof(err)), 0);
  for (int i = 0; i < 1000; i++) {
    uint32_t v = lp_lengths_next(&l, &r);
    REQUIRE(v >= 10 && v <= 20);
  }
  /* lognormal: the sample median is near exp(mu) */
  ck_assert_int_eq(lp_lengths_load(&l, "lognormal:mu=6,sigma=1,max=100000", err, sizeof(err)), 0);
  enum { N = 20001 };
  static uint32_t v[N];
  lp_lengths_fill(&l, &r, v, N);
  unsigned below = 0;
  for (int i = 0; i < N; i++) below += v[i] < 403; /* exp(6) = 403.4 */
  ck_assert_msg(below > N * 0.47 && below < N * 0.53, "below median: %u", below);
  /* zipf: 1 is the most frequent, nothing over max */
  ck_assert_int_eq(lp_lengths_load(&l, "zipf:s=1.2,max=500", err, sizeof(err)), 0);
  unsigned ones = 0, twos = 0;
  for (int i = 0; i < N; i++) {
    uint32_t x = lp_lengths_next(&l, &r);
    REQUIRE(x >= 1 && x <= 500);
    ones += x == 1;
    twos += x == 2;
  }
  ck_assert_uint_gt(ones, twos);
  /* weighted mixture */
  ck_assert_int_eq(lp_lengths_load(&l, "0.75*fixed:10+0.25*fixed:1000", err, sizeof(err)), 0);
  unsigned tens = 0;
  for (int i = 0; i < N; i++) tens += lp_lengths_next(&l, &r) == 10;
  ck_assert_msg(tens > N * 0.73 && tens < N * 0.77, "tens: %u", tens);
}
END_TEST

START_TEST(bad_mixes) {
  static const char *bad[] = {"fixed:", "fixed:0", "uniform:5", "uniform:9,3", "lognormal:mu=1",
                              "lognormal:mu=1,sigma=-1", "zipf:s=1", "x*fixed:3", "0*fixed:3",
                              "fixed:3+", "lognormal:mu=1,sigma=1,bogus=2", "fixed:abc"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    lp_lengths_t l;
    char err[256] = "";
    ck_assert_msg(lp_lengths_load(&l, bad[i], err, sizeof(err)) < 0, "accepted %s", bad[i]);
    ck_assert(strlen(err) > 0);
  }
}
END_TEST

/* Poisson arrivals: the mean rate within 1% over a fixed seed, and gaps with
 * the exponential's spread (coefficient of variation 1). */
START_TEST(poisson_arrivals) {
  lp_rng_t r;
  lp_rng_seed(&r, 5);
  double rates[] = {10, 1000, 50000};
  for (size_t k = 0; k < 3; k++) {
    enum { N = 200000 };
    double sum = 0, sq = 0;
    for (int i = 0; i < N; i++) {
      double g = (double)lp_arrival_gap_ns(&r, rates[k]) / 1e9;
      sum += g;
      sq += g * g;
    }
    double mean = sum / N, var = sq / N - mean * mean;
    double rate = 1 / mean, cv = sqrt(var) / mean;
    ck_assert_msg(fabs(rate / rates[k] - 1) < 0.01, "rate %f for %f", rate, rates[k]);
    ck_assert_msg(fabs(cv - 1) < 0.02, "cv %f", cv);
  }
}
END_TEST

LP_TEST_MAIN("lengths", file_good, file_bad, mixes, bad_mixes, poisson_arrivals)
