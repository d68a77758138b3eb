/* The fault goal's lost requests, reproduced in the dispatch core in virtual
 * time (loadgen/bench-faults.py lost about one request in fifty runs, each
 * waiting out its batch's 30 s transfer timeout): the exact backend behaviour
 * of those runs, replayed event by event. */
#include <check.h>
#include <string.h>

#include "disprec.h"
#include "testutil.h"
#include "lanepack/dispatch.h"

#define MS 1000000ull

static rec_t R; /* every action the core gave, in order */

static void admit(lp_disp_t *d, uint64_t job, uint32_t len, uint64_t now) {
  ck_assert_int_eq(lp_disp_admit(d, job, 1, &len, 0, 0, now), 0);
  rec_drain(&R, d, now);
}

static void ok(lp_disp_t *d, const rec_act_t *s, uint64_t now) {
  lp_disp_result_t r = {.outcome = LP_DISP_OK, .device_ns = 8 * MS};
  ck_assert_int_eq(lp_disp_result(d, s->a.send.batch_id, &r, now), 0);
  rec_drain(&R, d, now);
}

/* Ticks at each wake the core asks for up to `until`. */
static void run_until(lp_disp_t *d, uint64_t until) {
  for (int i = 0; i < 1000 && lp_disp_wake_at(d) <= until; i++) {
    uint64_t at = lp_disp_wake_at(d);
    lp_disp_tick(d, at);
    rec_drain(&R, d, at);
  }
}

/* Ticks as asked up to `until` or until a SEND holding job appears after
 * index from; returns that SEND or NULL. */
static const rec_act_t *run_until_sent(lp_disp_t *d, uint64_t job, int from, uint64_t until) {
  for (int i = 0; i < 1000 && lp_disp_wake_at(d) <= until; i++) {
    uint64_t at = lp_disp_wake_at(d);
    lp_disp_tick(d, at);
    rec_drain(&R, d, at);
    const rec_act_t *s = rec_send_of(&R, job, from);
    if (s) return s;
  }
  return NULL;
}

/* Two backends, nothing seeded (the fault benchmark configures no cost_ms).
 * The first batch goes to backend 0 and stalls there; backend 1 answers
 * everything else. Backend 0's own clock never learns a time (it gets no other
 * batch: before its clock knows one, nothing says when its device frees), so
 * the stalled batch had no stall time and its request waited for the 30 s
 * transfer timeout, past the client's (seed 107). A backend whose own clock
 * knows no time is timed for stalls by the others'. */
static lp_disp_t *two_backends(void) {
  lp_disp_config_t c;
  lp_disp_config_default(&c);
  char err[128];
  ck_assert_int_eq(lp_bucket_set_parse(&c.shapes, "8x2048", err, sizeof(err)), 0);
  c.nbackends = 2;
  c.stall_factor = 3;
  c.stall_min_ns = 100 * MS;
  c.backend_timeout_ns = 30000 * MS;
  lp_disp_t *d = lp_disp_new(&c);
  ck_assert_ptr_nonnull(d);
  rec_clear(&R);
  return d;
}

START_TEST(stall_timed_by_another_backends_clock) {
  lp_disp_t *d = two_backends();
  admit(d, 1, 1500, 0);
  const rec_act_t *s1 = rec_send_of(&R, 1, 0);
  ck_assert_ptr_nonnull(s1);
  uint32_t stuck = s1->a.send.backend;
  admit(d, 2, 1500, 1 * MS);
  const rec_act_t *s2 = rec_send_of(&R, 2, 0);
  ck_assert_ptr_nonnull(s2);
  ck_assert_uint_ne(s2->a.send.backend, stuck); /* idle backends take turns */
  ok(d, s2, 10 * MS); /* the other backend's clock learns 8 ms */
  ck_assert_ptr_nonnull(rec_answer_of(&R, 2));
  /* job 1 is hedged well before any transfer timeout, and answered */
  const rec_act_t *h = run_until_sent(d, 1, (int)(s1 - R.acts) + 1, 1000 * MS);
  ck_assert_msg(h != NULL, "the stalled batch on the backend that knows no time was not hedged within 1 s");
  ok(d, h, h->at + 9 * MS);
  ck_assert_ptr_nonnull(rec_answer_of(&R, 1));
  ck_assert_int_eq(rec_answer_of(&R, 1)->a.answer.status, LP_DISP_ST_OK);

  lp_disp_free(d);
}
END_TEST

/* The batch sent to a backend after its only batch so far ended without
 * teaching its clock (a reset, a timeout) stalls too: sent while that clock
 * knows no time, it had no stall time either (seed 107's second timeout, 30 s
 * after the first, was such a batch). */
START_TEST(stall_timed_when_sent_to_an_untaught_backend) {
  lp_disp_t *d = two_backends();
  admit(d, 1, 1500, 0);
  const rec_act_t *s1 = rec_send_of(&R, 1, 0);
  uint32_t untaught = s1->a.send.backend;
  admit(d, 2, 1500, 1 * MS);
  const rec_act_t *s2 = rec_send_of(&R, 2, 0);
  ck_assert_uint_ne(s2->a.send.backend, untaught);
  lp_disp_result_t reset = {.outcome = LP_DISP_RESET};
  ck_assert_int_eq(lp_disp_result(d, s1->a.send.batch_id, &reset, 5 * MS), 0);
  rec_drain(&R, d, 5 * MS);
  ok(d, s2, 10 * MS);
  /* more requests until one goes to the untaught backend; the rest are answered */
  uint64_t t = 20 * MS;
  const rec_act_t *s3 = NULL;
  for (uint64_t job = 3; job < 20 && !s3; job++, t += 20 * MS) {
    int mark = (int)R.n;
    admit(d, job, 1500, t);
    run_until(d, t + 10 * MS);
    for (int j = mark; j < (int)R.n; j++) {
      const rec_act_t *s = &R.acts[j];
      if (s->a.kind != LP_DISP_ACT_SEND) continue;
      if (s->a.send.backend == untaught) s3 = s;
      else ok(d, s, t + 10 * MS);
    }
  }
  ck_assert_ptr_nonnull(s3);
  uint64_t job3 = s3->it[0].job_id;
  int mark = (int)(s3 - R.acts) + 1;
  const rec_act_t *h3 = run_until_sent(d, job3, mark, s3->at + 1000 * MS);
  ck_assert_msg(h3 != NULL, "a batch sent to the backend whose clock knows no time was not hedged within 1 s");
  ok(d, h3, h3->at + 9 * MS);
  ck_assert_ptr_nonnull(rec_answer_of(&R, job3));
  ck_assert_int_eq(rec_answer_of(&R, job3)->a.answer.status, LP_DISP_ST_OK);
  lp_disp_free(d);
}
END_TEST

/* A sequence whose copies were spent on failures (resets, a backend killed:
 * connection refused) and whose last copy stalls: nothing hedges it (a
 * sequence has a fixed number of copies), and it waited for that batch's 30 s
 * transfer timeout, past the client's (seed 129: copies 3 of 3, the last in a
 * stalled batch). It is given up (504 backend_timeout) half that timeout after
 * its stalled copy was sent (a client that waits as long as the proxy does
 * still gets it); a slow answer before then still serves it. */
START_TEST(last_copy_stalled_given_up) {
  lp_disp_config_t c;
  lp_disp_config_default(&c);
  char err[128];
  ck_assert_int_eq(lp_bucket_set_parse(&c.shapes, "8x2048", err, sizeof(err)), 0);
  c.seed_cost_ns[0] = 8 * MS;
  c.stall_factor = 3;
  c.stall_min_ns = 100 * MS;
  c.max_copies = 3;
  c.retry_backoff_ns = 10 * MS;
  c.backend_timeout_ns = 30000 * MS;
  for (int late_answer = 0; late_answer < 2; late_answer++) {
    lp_disp_t *d = lp_disp_new(&c);
    ck_assert_ptr_nonnull(d);
    rec_clear(&R);
    admit(d, 1, 1500, 0);
    lp_disp_result_t reset = {.outcome = LP_DISP_RESET};
    for (int i = 0; i < 2; i++) { /* two copies spent on resets */
      const rec_act_t *s = rec_send_of(&R, 1, 0);
      ck_assert_int_eq(lp_disp_result(d, s->a.send.batch_id, &reset, s->at + 1 * MS), 0);
      rec_drain(&R, d, s->at + 1 * MS);
      run_until(d, s->at + 100 * MS);
    }
    const rec_act_t *last = rec_send_of(&R, 1, 0);
    ck_assert_ptr_nonnull(last);
    ck_assert_ptr_null(rec_answer_of(&R, 1));
    if (late_answer) {
      /* stalled (past 3 x 8 ms and 100 ms more), answered 10 s later: served */
      run_until(d, last->at + 10000 * MS);
      ck_assert_ptr_null(rec_answer_of(&R, 1));
      ok(d, last, last->at + 10000 * MS);
      ck_assert_ptr_nonnull(rec_answer_of(&R, 1));
      ck_assert_int_eq(rec_answer_of(&R, 1)->a.answer.status, LP_DISP_ST_OK);
    } else {
      run_until(d, last->at + 15000 * MS);
      ck_assert_msg(rec_answer_of(&R, 1) != NULL, "a request whose last copy stalled was not answered within 15 s");
      ck_assert_int_eq(rec_answer_of(&R, 1)->a.answer.status, LP_DISP_ST_BACKEND_TIMEOUT);
      ck_assert_int_eq(rec_send_of(&R, 1, 0) == last, 1); /* no copy beyond the budget */
      /* the batch's timeout, later, changes nothing */
      int before = (int)R.n;
      lp_disp_result_t to = {.outcome = LP_DISP_TIMEOUT};
      ck_assert_int_eq(lp_disp_result(d, last->a.send.batch_id, &to, last->at + 30000 * MS), 0);
      rec_drain(&R, d, last->at + 30000 * MS);
      ck_assert_int_eq((int)R.n, before);
    }
    lp_disp_stats_t st;
    lp_disp_stats(d, &st);
    ck_assert_uint_eq(st.stalls, 1); /* the give-up is no second stall */
    lp_disp_free(d);
  }
}
END_TEST

/* A backend killed and restarting refuses connections: batches sent to it
 * before it is marked down never reach it. Its sequences go elsewhere at no
 * cost to their copies (each such batch spent one copy of every sequence in
 * it, so a batch of them that then met a reset and a stall was given up 504
 * together: up to 16 in one fault-benchmark run). */
START_TEST(refused_connection_costs_no_copy) {
  lp_disp_config_t c;
  lp_disp_config_default(&c);
  char err[128];
  ck_assert_int_eq(lp_bucket_set_parse(&c.shapes, "8x2048", err, sizeof(err)), 0);
  c.seed_cost_ns[0] = 8 * MS;
  c.nbackends = 2;
  c.max_copies = 3;
  c.stall_factor = 3;
  c.stall_min_ns = 100 * MS;
  c.unhealthy_after = 10; /* the dead one stays up here: every batch may try it */
  lp_disp_t *d = lp_disp_new(&c);
  ck_assert_ptr_nonnull(d);
  rec_clear(&R);
  admit(d, 1, 1500, 0);
  const rec_act_t *s = rec_send_of(&R, 1, 0);
  uint32_t dead = s->a.send.backend;
  lp_disp_result_t refused = {.outcome = LP_DISP_UNSENT};
  ck_assert_int_eq(lp_disp_result(d, s->a.send.batch_id, &refused, 1 * MS), 0);
  rec_drain(&R, d, 1 * MS);
  /* at once, and to the other backend */
  const rec_act_t *s2 = rec_send_of(&R, 1, (int)(s - R.acts) + 1);
  ck_assert_ptr_nonnull(s2);
  ck_assert_uint_ne(s2->a.send.backend, dead);
  /* two resets there spend the two copies left; a third would fail it */
  lp_disp_result_t reset = {.outcome = LP_DISP_RESET};
  const rec_act_t *x = s2;
  for (int i = 0; i < 2; i++) {
    int from = (int)R.n;
    ck_assert_int_eq(lp_disp_result(d, x->a.send.batch_id, &reset, x->at + 1 * MS), 0);
    rec_drain(&R, d, x->at + 1 * MS);
    ck_assert_ptr_null(rec_answer_of(&R, 1));
    x = run_until_sent(d, 1, from, x->at + 1000 * MS);
    ck_assert_ptr_nonnull(x);
  }
  ok(d, x, x->at + 9 * MS);
  ck_assert_ptr_nonnull(rec_answer_of(&R, 1));
  ck_assert_int_eq(rec_answer_of(&R, 1)->a.answer.status, LP_DISP_ST_OK);
  lp_disp_free(d);
}
END_TEST

LP_TEST_MAIN("dispatch-faults", stall_timed_by_another_backends_clock, stall_timed_when_sent_to_an_untaught_backend,
             last_copy_stalled_given_up, refused_connection_costs_no_copy)
