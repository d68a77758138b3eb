/* The fronts' histograms merged for a scrape (lp_hist_add) while their owners
 * write them: a read can fall between a bucket's increment and the count's, so
 * the merged _count must come from the buckets read, or the +Inf bucket and
 * _count of one scrape disagree (the exposition format has them equal). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "lanepack/buf.h"
#include "lanepack/metrics.h"

static const double bounds[] = {0.001, 0.01, 0.1};

/* The +Inf bucket's value and _count's in the text of one histogram. */
static void inf_and_count(const lp_hist_t *h, unsigned long long *inf, unsigned long long *count) {
  lp_buf_t b;
  lp_buf_init(&b);
  lp_metric_hist(&b, "x", NULL, h);
  lp_buf_append(&b, "", 1);
  const char *p = strstr(b.data, "le=\"+Inf\"} ");
  const char *c = strstr(b.data, "x_count ");
  ck_assert_ptr_nonnull(p);
  ck_assert_ptr_nonnull(c);
  *inf = strtoull(p + strlen("le=\"+Inf\"} "), NULL, 10);
  *count = strtoull(c + strlen("x_count "), NULL, 10);
  lp_buf_free(&b);
}

START_TEST(merged_count_is_the_buckets) {
  lp_hist_t front, merged;
  lp_hist_init(&front, bounds, 3);
  lp_hist_observe(&front, 0.0005);
  lp_hist_observe(&front, 0.05);
  lp_hist_observe(&front, 5);
  /* as a scrape sees a front mid-observation: the bucket counted, the count not yet */
  front.counts[1]++;
  lp_hist_init(&merged, bounds, 3);
  lp_hist_add(&merged, &front);
  unsigned long long inf, count;
  inf_and_count(&merged, &inf, &count);
  ck_assert_uint_eq(inf, 4);
  ck_assert_uint_eq(count, inf);
}
END_TEST

START_TEST(two_fronts_merged) {
  lp_hist_t a, b, merged;
  lp_hist_init(&a, bounds, 3);
  lp_hist_init(&b, bounds, 3);
  for (int i = 0; i < 10; i++) lp_hist_observe(&a, 0.002 * i);
  for (int i = 0; i < 7; i++) lp_hist_observe(&b, 0.03 * i);
  lp_hist_init(&merged, bounds, 3);
  lp_hist_add(&merged, &a);
  lp_hist_add(&merged, &b);
  unsigned long long inf, count;
  inf_and_count(&merged, &inf, &count);
  ck_assert_uint_eq(inf, 17);
  ck_assert_uint_eq(count, 17);
}
END_TEST

LP_TEST_MAIN("hist-merge", merged_count_is_the_buckets, two_fronts_merged)
