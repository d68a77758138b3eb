/* The shape advisor's library (lanepack/shapeadv.h), as the proxy calls it:
 * the cost model fitted from the measured shapes (a negative fixed part refitted
 * through 0), weighted lengths (a histogram) giving the same advice as the same
 * lengths repeated, the time bound on a fake clock that still yields an advice,
 * and bad parameters. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "testutil.h"
#include "lanepack/shapeadv.h"

/* 60% of 50, 30% of 200, 10% of 900 */
static const uint32_t lens_w[] = {50, 200, 900};
static const double weights[] = {6, 3, 1};

static void params(lp_sadv_params_t *p, uint64_t c1024, uint64_t c256) {
  memset(p, 0, sizeof(*p));
  lp_bucket_set_init(&p->current);
  int a = lp_bucket_set_add(&p->current, 4, 1024), b = lp_bucket_set_add(&p->current, 8, 256);
  p->current.shapes[a].cost_ns = c1024;
  p->current.shapes[b].cost_ns = c256;
  p->lens = lens_w;
  p->weight = weights;
  p->nlens = 3;
  p->k = 2;
  p->p99_ms = 40;
  p->rate = 300;
  p->seed = 3;
  p->short_requests = 300;
  p->max_devices = 4;
}

static lp_sadv_result_t r1, r2;

START_TEST(fit_and_sources) {
  lp_sadv_params_t p;
  char err[160];
  params(&p, 10000000, 7000000); /* 4096 slots 10 ms, 2048 slots 7 ms: 4 ms + 3 ms / 2048 */
  ck_assert_int_eq(lp_sadv_run(&p, &r1, err, sizeof(err)), 0);
  ck_assert_double_eq_tol(r1.fixed_ns, 4e6, 1);
  ck_assert_double_eq_tol(r1.per_slot_ns, 3e6 / 2048, 1e-6);
  ck_assert_uint_eq(r1.fit_points, 2);
  ck_assert_uint_eq(r1.longest, 900);
  for (size_t i = 0; i < r1.candidates; i++) {
    const lp_sadv_shape_t *c = &r1.cand[i];
    int measured = (c->lanes == 4 && c->bucket == 1024) || (c->lanes == 8 && c->bucket == 256);
    ck_assert_int_eq(c->fitted, !measured);
    if (!measured) ck_assert_uint_eq(c->cost_ns, (uint64_t)(4e6 + 3e6 / 2048 * c->lanes * c->bucket));
  }
  ck_assert_uint_ge(r1.advice.n, 1);
  ck_assert_uint_le(r1.advice.n, 2);
  ck_assert_uint_ge(r1.advice.s[r1.advice.n - 1].bucket, 900);
  ck_assert(r1.advice.capacity_rps > 0 && r1.current.capacity_rps > 0);
  /* a line that would make small shapes cheaper than nothing: refitted through 0 */
  params(&p, 10000000, 2000000);
  ck_assert_int_eq(lp_sadv_run(&p, &r2, err, sizeof(err)), 0);
  ck_assert_double_eq(r2.fixed_ns, 0);
  ck_assert(r2.per_slot_ns > 0);
}
END_TEST

START_TEST(weights_are_repeats) {
  lp_sadv_params_t p;
  char err[160];
  params(&p, 10000000, 7000000);
  p.no_devices = 1;
  ck_assert_int_eq(lp_sadv_run(&p, &r1, err, sizeof(err)), 0);
  uint32_t rep[10] = {50, 50, 50, 50, 50, 50, 200, 200, 200, 900};
  p.lens = rep;
  p.weight = NULL;
  p.nlens = 10;
  ck_assert_int_eq(lp_sadv_run(&p, &r2, err, sizeof(err)), 0);
  ck_assert_uint_eq(r1.advice.n, r2.advice.n);
  for (size_t i = 0; i < r1.advice.n; i++) {
    ck_assert_uint_eq(r1.advice.s[i].lanes, r2.advice.s[i].lanes);
    ck_assert_uint_eq(r1.advice.s[i].bucket, r2.advice.s[i].bucket);
  }
  ck_assert_double_eq(r1.advice.p99_ms, r2.advice.p99_ms);
  ck_assert_double_eq(r1.kept_weight, 10);
  /* lengths over the largest bucket are left out and counted */
  uint32_t over[3] = {50, 5000, 900};
  p.lens = over;
  p.nlens = 3;
  ck_assert_int_eq(lp_sadv_run(&p, &r2, err, sizeof(err)), 0);
  ck_assert_double_eq(r2.dropped_weight, 1);
  ck_assert_uint_eq(r2.longest, 900);
}
END_TEST

/* A clock that moves a second at every look. */
static double ticks;
static double fake_clock(void *arg) {
  (void)arg;
  return ticks += 1;
}

START_TEST(time_bound) {
  lp_sadv_params_t p;
  char err[160];
  params(&p, 10000000, 7000000);
  p.k = 3;
  p.clock = fake_clock;
  p.budget_s = 2.5; /* two looks in: the search stops at once */
  ck_assert_int_eq(lp_sadv_run(&p, &r1, err, sizeof(err)), 0);
  ck_assert_int_eq(r1.complete, 0);
  ck_assert_uint_ge(r1.advice.n, 1);
  /* a budget spent before the search starts still gives an answer */
  p.budget_s = 0.5;
  ck_assert_int_eq(lp_sadv_run(&p, &r1, err, sizeof(err)), 0);
  ck_assert_int_eq(r1.complete, 0);
  ck_assert_uint_ge(r1.advice.n, 1);
  p.budget_s = 2.5;
  ck_assert_int_eq(lp_sadv_run(&p, &r1, err, sizeof(err)), 0);
  p.clock = NULL;
  ck_assert_int_eq(lp_sadv_run(&p, &r2, err, sizeof(err)), 0);
  ck_assert_int_eq(r2.complete, 1);
  ck_assert_uint_gt(r2.evaluated, r1.evaluated);
}
END_TEST

START_TEST(bad_parameters) {
  lp_sadv_params_t p;
  char err[160];
  params(&p, 10000000, 7000000);
  p.k = 0;
  ck_assert_int_eq(lp_sadv_run(&p, &r1, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "k"));
  params(&p, 10000000, 7000000);
  p.p99_ms = 0;
  ck_assert_int_eq(lp_sadv_run(&p, &r1, err, sizeof(err)), -EINVAL);
  params(&p, 10000000, 7000000);
  p.rate = -1;
  ck_assert_int_eq(lp_sadv_run(&p, &r1, err, sizeof(err)), -EINVAL);
  p.rate = 1e-300; /* its arrivals would overflow virtual nanoseconds */
  ck_assert_int_eq(lp_sadv_run(&p, &r1, err, sizeof(err)), -EINVAL);
  params(&p, 0, 0); /* nothing measured to fit from */
  ck_assert_int_eq(lp_sadv_run(&p, &r1, err, sizeof(err)), -EINVAL);
  params(&p, 10000000, 7000000);
  uint32_t too_long[1] = {5000};
  p.lens = too_long;
  p.weight = NULL;
  p.nlens = 1;
  ck_assert_int_eq(lp_sadv_run(&p, &r1, err, sizeof(err)), -ENODATA);
  params(&p, 10000000, 7000000);
  lp_bucket_set_add(&p.candidates, 8, 256); /* none holds 900 */
  ck_assert_int_eq(lp_sadv_run(&p, &r1, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "longest"));
}
END_TEST

START_TEST(json_fits_and_counts) {
  lp_sadv_params_t p;
  char err[160], buf[8192];
  params(&p, 10000000, 7000000);
  ck_assert_int_eq(lp_sadv_run(&p, &r1, err, sizeof(err)), 0);
  size_t need = lp_sadv_json(&p, &r1, NULL, 0);
  ck_assert_uint_lt(need, sizeof(buf));
  ck_assert_uint_eq(lp_sadv_json(&p, &r1, buf, sizeof(buf)), need);
  ck_assert_uint_eq(strlen(buf), need);
  ck_assert_ptr_nonnull(strstr(buf, "\"advice\": {\"shapes\": ["));
  char small[16];
  ck_assert_uint_eq(lp_sadv_json(&p, &r1, small, sizeof(small)), need);
  ck_assert_uint_eq(strlen(small), sizeof(small) - 1);
}
END_TEST

LP_TEST_MAIN("shapeadv", fit_and_sources, weights_are_repeats, time_bound, bad_parameters, json_fits_and_counts)
