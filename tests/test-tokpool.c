/* The tokenizer workers' pool (src/proxy/tokwork/pool.c) without a
 * tokenizer: jobs of CALL units. Inputs are taken round robin across jobs (a
 * one-unit job submitted behind one of 200 runs after the 200's first turn,
 * a turn taking short units together); every job's memory
 * is freed exactly once whatever the moment its client leaves (before its
 * units are taken, while they run, after it is back in the box), and done
 * runs only for those whose client stayed; the bound on held text; a stop
 * with work queued. Run under ThreadSanitizer (suite threads) it checks the
 * hand-offs too. */
#define _GNU_SOURCE /* SCHED_BATCH */
#include <check.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <uv.h>

#include "front/front.h" /* a front's tok box */
#include "lanepack/config.h"
#include "tokwork/tokwork.h"

typedef struct {
  uv_mutex_t lock;
  int order[512];           /* the job index of each unit run, in order */
  int norder;
  uv_sem_t gate;            /* the gate unit waits on it */
  int freed, done;          /* ctx_free and done calls (atomic: workers free too) */
  int spin;                 /* a unit's work, in loop iterations */
} fixture_t;

static fixture_t fx;

typedef struct {
  int index;
} ctx_t;

static void ctx_free(void *p) {
  if (!p) return;
  __atomic_fetch_add(&fx.freed, 1, __ATOMIC_RELAXED);
  free(p);
}

static void unit_record(lp_tokjob_t *job) {
  ctx_t *c = job->ctx;
  volatile int x = 0;
  for (int i = 0; i < fx.spin; i++) x = x + i;
  (void)x;
  uv_mutex_lock(&fx.lock);
  if (fx.norder < 512) fx.order[fx.norder++] = c->index;
  uv_mutex_unlock(&fx.lock);
}

static void unit_gate(lp_tokjob_t *job) {
  (void)job;
  uv_sem_wait(&fx.gate);
}

static void done_cb(lp_front_t *f, lp_tokjob_t *job, lp_http_req_t *req) {
  (void)f, (void)job, (void)req;
  fx.done++;
}

/* The front's side of the box, as front/tokhand.c's: done unless cancelled,
 * then freed. Closes the box once every expected job is back (0: the test
 * closes it). */
static int expected_back;
static int back;
static char is_back[1024]; /* by ctx index: taken back and freed (a client gone then cancels nothing) */
static void on_box(lp_wake_t *w) {
  lp_front_t *f = w->data;
  for (lp_tokjob_t *j = lp__tokbox_take(&f->tokbox), *n; j; j = n) {
    n = j->done_next;
    if (!j->cancelled) j->done(f, j, NULL);
    is_back[((ctx_t *)j->ctx)->index] = 1;
    lp__tokjob_free(j);
    back++;
  }
  if (expected_back && back >= expected_back) lp__tokbox_close(&f->tokbox);
}

static lp_tokjob_t *job_of(lp_front_t *f, int index, size_t nunits, void (*call)(lp_tokjob_t *), size_t len) {
  lp_tokjob_t *j = lp__tokjob_new(f, NULL, nunits);
  ck_assert_ptr_nonnull(j);
  ctx_t *c = malloc(sizeof(*c));
  ck_assert_ptr_nonnull(c);
  c->index = index;
  j->ctx = c;
  j->ctx_free = ctx_free;
  j->done = done_cb;
  for (size_t i = 0; i < nunits; i++) {
    j->units[i].op = LP_TOKOP_CALL;
    j->units[i].call = call;
    j->units[i].len = len;
  }
  return j;
}

/* A loop, a front with its tok box on it, and a pool of n workers. */
static lp_tokpool_t *open_pool(uv_loop_t *loop, lp_front_t *f, unsigned n) {
  ck_assert_int_eq(uv_loop_init(loop), 0);
  memset(f, 0, sizeof(*f));
  f->loop = loop;
  ck_assert_int_eq(lp__tokbox_init(&f->tokbox, loop, on_box, f), 0);
  lp_tokpool_t *p = lp__tokpool_start(n, 0, lp__front_tok_finished);
  ck_assert_ptr_nonnull(p);
  return p;
}

static void setup(void) {
  memset(&fx, 0, sizeof(fx));
  ck_assert_int_eq(uv_mutex_init(&fx.lock), 0);
  ck_assert_int_eq(uv_sem_init(&fx.gate, 0), 0);
  back = expected_back = 0;
  memset(is_back, 0, sizeof(is_back));
}

static void teardown(void) {
  uv_sem_destroy(&fx.gate);
  uv_mutex_destroy(&fx.lock);
}

/* One worker held by a gate; then a job of 200 inputs and one of 1: once the
 * gate opens, the one-input job's unit runs after the first turn of the
 * 200, not after all of them. A turn takes short units together (up to
 * LP_TOKPOOL_TURN_BYTES of text, LP_TOKPOOL_TURN_UNITS units) and a long one
 * alone: per loop index, the 200's units' length and how many a turn takes. */
static const struct {
  size_t len, per_turn;
} turns[] = {
  {1, LP_TOKPOOL_TURN_UNITS},                      /* tiny: as many as a turn may count */
  {LP_TOKPOOL_TURN_BYTES / 4, 4},                  /* short: a turn's bytes */
  {LP_TOKPOOL_TURN_BYTES / 4 + 1, 3},              /* the next would pass the budget */
  {LP_TOKPOOL_TURN_BYTES * 2, 1},                  /* long: alone */
};

START_TEST(test_round_robin) {
  size_t len = turns[_i].len, per_turn = turns[_i].per_turn;
  uv_loop_t loop;
  lp_front_t f;
  lp_tokpool_t *p = open_pool(&loop, &f, 1);
  expected_back = 3;
  ck_assert_int_eq(lp__tokpool_submit(p, job_of(&f, 0, 1, unit_gate, 1), SIZE_MAX), 0);
  ck_assert_int_eq(lp__tokpool_submit(p, job_of(&f, 1, 200, unit_record, len), SIZE_MAX), 0);
  ck_assert_int_eq(lp__tokpool_submit(p, job_of(&f, 2, 1, unit_record, 1), SIZE_MAX), 0);
  uv_sem_post(&fx.gate);
  uv_run(&loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(fx.norder, 201);
  for (size_t i = 0; i < per_turn; i++) ck_assert_int_eq(fx.order[i], 1); /* the 200's first turn */
  ck_assert_int_eq(fx.order[per_turn], 2); /* then the one-input job: not after the 200 */
  ck_assert_int_eq(fx.order[per_turn + 1], 1);
  ck_assert_int_eq(fx.done, 3);
  ck_assert_int_eq(fx.freed, 3);
  lp__tokpool_stop(p);
  lp__tokpool_free(p);
  lp__tokbox_destroy(&f.tokbox);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

/* Turns per client: one worker held by a gate; 50 one-input jobs of one
 * flow (a client pipelining), then one of another: the other's unit runs
 * second, not after the 50; and a client leaving mid-queue (its first job
 * in the round, one waiting behind it, its last) leaves the rest in order. */
START_TEST(test_flows) {
  uv_loop_t loop;
  lp_front_t f;
  lp_tokpool_t *p = open_pool(&loop, &f, 1);
  static int client_a, client_b;
  lp_tokjob_t *a[50];
  expected_back = 1 + 50 + 1 - 3;
  ck_assert_int_eq(lp__tokpool_submit(p, job_of(&f, 0, 1, unit_gate, 1), SIZE_MAX), 0);
  for (int i = 0; i < 50; i++) {
    a[i] = job_of(&f, 1 + i, 1, unit_record, 1);
    a[i]->flow = &client_a;
    ck_assert_int_eq(lp__tokpool_submit(p, a[i], SIZE_MAX), 0);
  }
  lp_tokjob_t *b = job_of(&f, 100, 1, unit_record, 1);
  b->flow = &client_b;
  ck_assert_int_eq(lp__tokpool_submit(p, b, SIZE_MAX), 0);
  /* the worker holds the gate: none of these is taken yet */
  lp__tokpool_cancel(p, a[0]);  /* the flow's place in the round: a[1] takes it */
  lp__tokpool_cancel(p, a[10]); /* waiting behind it */
  lp__tokpool_cancel(p, a[49]); /* its last */
  uv_sem_post(&fx.gate);
  uv_run(&loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(fx.norder, 48);
  ck_assert_int_eq(fx.order[0], 2);   /* a[1] */
  ck_assert_int_eq(fx.order[1], 100); /* b: second, not 48th */
  for (int i = 2, want = 3; i < 48; i++, want++) {
    if (want == 11) want++; /* a[10] left */
    ck_assert_int_eq(fx.order[i], want);
  }
  ck_assert_int_eq(fx.done, 49); /* with the gate's */
  lp__tokpool_stop(p);
  lp__tokpool_free(p);
  lp__tokbox_destroy(&f.tokbox);
  ck_assert_int_eq(fx.freed, 52);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

/* 600 jobs on 3 workers, each client leaving at a different moment: right
 * after the hand-off, after a few spins (units running), or never, their
 * jobs in 70 flows (waiting behind each other) or none; every job freed
 * exactly once, done only for those not cancelled. */
START_TEST(test_cancel_any_time) {
  enum { JOBS = 600 };
  uv_loop_t loop;
  lp_front_t f;
  lp_tokpool_t *p = open_pool(&loop, &f, 3);
  fx.spin = 20000;
  static lp_tokjob_t *jobs[JOBS];
  int cancelled = 0;
  for (int i = 0; i < JOBS; i++) {
    jobs[i] = job_of(&f, i, 1 + (size_t)(i % 5), unit_record, 10);
    /* 70 clients (past the flow table's first size), some without one */
    static char clients[70];
    if (i % 7) jobs[i]->flow = &clients[i % 70];
    ck_assert_int_eq(lp__tokpool_submit(p, jobs[i], SIZE_MAX), 0);
    if (i % 3 == 0) { /* at once: usually before a worker took a unit */
      lp__tokpool_cancel(p, jobs[i]);
      cancelled++;
    }
    if (i % 3 == 1 && i > 30 && !is_back[i - 30]) { /* a while later: running, done, or in the box */
      lp__tokpool_cancel(p, jobs[i - 30]);
      cancelled++;
    }
    if (i % 50 == 0) uv_run(&loop, UV_RUN_NOWAIT); /* some come back meanwhile */
  }
  /* wait until the pool holds nothing, then take the box's last ones */
  while (lp__tokpool_bytes(p)) uv_sleep(1);
  lp__tokpool_stop(p); /* joined: every worker's push has been made */
  on_box(&f.tokbox.wake); /* what is in the box now, as its wake-up would */
  lp__tokbox_close(&f.tokbox);
  uv_run(&loop, UV_RUN_DEFAULT);
  lp__tokpool_free(p);
  lp__tokbox_destroy(&f.tokbox); /* frees what a closed box still held */
  ck_assert_int_eq(fx.freed, JOBS);
  ck_assert_int_eq(fx.done, JOBS - cancelled);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

/* The bound: past it -EAGAIN, the job still the caller's; a lone job larger
 * than the bound goes in; a stop with work queued frees it. */
START_TEST(test_bound_and_stop) {
  uv_loop_t loop;
  lp_front_t f;
  lp_tokpool_t *p = open_pool(&loop, &f, 1);
  ck_assert_int_eq(lp__tokpool_submit(p, job_of(&f, 0, 1, unit_gate, 5000), 1000), 0); /* alone: in */
  ck_assert_uint_eq(lp__tokpool_bytes(p), 5000);
  lp_tokjob_t *over = job_of(&f, 1, 2, unit_record, 10);
  ck_assert_int_eq(lp__tokpool_submit(p, over, 1000), -EAGAIN);
  lp__tokjob_free(over); /* still ours */
  ck_assert_int_eq(lp__tokpool_submit(p, job_of(&f, 2, 3, unit_record, 10), SIZE_MAX), 0);
  uv_sem_post(&fx.gate); /* the gate's job ends; the other may or may not run before the stop */
  lp__tokpool_stop(p);
  lp__tokbox_close(&f.tokbox);
  uv_run(&loop, UV_RUN_DEFAULT);
  lp__tokpool_free(p);
  lp__tokbox_destroy(&f.tokbox);
  ck_assert_int_eq(fx.freed, 3);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

/* A front's side for a test: its loop and tok box; closed once the pool is freed. */
static void front_open(uv_loop_t *loop, lp_front_t *f) {
  ck_assert_int_eq(uv_loop_init(loop), 0);
  memset(f, 0, sizeof(*f));
  f->loop = loop;
  ck_assert_int_eq(lp__tokbox_init(&f->tokbox, loop, on_box, f), 0);
}

static void front_close(uv_loop_t *loop, lp_front_t *f) {
  lp__tokbox_destroy(&f->tokbox);
  ck_assert_int_eq(uv_loop_close(loop), 0);
}

/* The policy and nice value a unit runs at, as the worker sees them. */
static int unit_policy, unit_nice;
static void unit_priority(lp_tokjob_t *job) {
  (void)job;
  unit_policy = sched_getscheduler(0);
  errno = 0;
  unit_nice = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
  if (unit_nice == -1 && errno) unit_nice = -100;
}

/* A worker runs below the loops by default: SCHED_BATCH and a higher nice
 * value than the thread that started the pool (a loop's), so a front or the
 * scheduler waking on a core a busy worker holds gets it (fails before: the
 * workers ran at the loops' policy and nice value); tokenizer_nice 0 leaves
 * them as the process is. */
START_TEST(test_lower_priority) {
  uv_loop_t loop;
  lp_front_t f;
  front_open(&loop, &f);
  errno = 0;
  int base = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
  ck_assert(!(base == -1 && errno));
  int base_policy = sched_getscheduler(0);
  ck_assert_int_ne(base_policy, SCHED_BATCH);
  for (int round = 0; round < 2; round++) {
    /* the default, then 0: at the loops' policy and nice value */
    lp_tokpool_t *p = lp__tokpool_start(1, round ? 0 : LP_TOKENIZER_NICE_DEFAULT, lp__front_tok_finished);
    ck_assert_ptr_nonnull(p);
    expected_back = back + 1;
    ck_assert_int_eq(lp__tokpool_submit(p, job_of(&f, round, 1, unit_priority, 1), SIZE_MAX), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(fx.done, round + 1);
    if (!round) {
      ck_assert_int_eq(unit_policy, SCHED_BATCH);
      ck_assert_int_gt(unit_nice, base < 19 ? base : 18); /* at 19 already: as low as it goes */
    } else {
      ck_assert_int_eq(unit_policy, base_policy);
      ck_assert_int_eq(unit_nice, base);
    }
    /* the thread that started the pool keeps its own */
    ck_assert_int_eq(getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid)), base);
    ck_assert_int_eq(sched_getscheduler(0), base_policy);
    lp__tokpool_stop(p);
    lp__tokpool_free(p);
    if (!round) { /* the box was closed when the job came back: a new one */
      lp__tokbox_destroy(&f.tokbox);
      ck_assert_int_eq(lp__tokbox_init(&f.tokbox, &loop, on_box, &f), 0);
    }
  }
  front_close(&loop, &f);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("tokpool");
  TCase *tc = tcase_create("pool");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_round_robin, 0, (int)(sizeof(turns) / sizeof(turns[0])));
  tcase_add_test(tc, test_flows);
  tcase_add_test(tc, test_cancel_any_time);
  tcase_add_test(tc, test_bound_and_stop);
  tcase_add_test(tc, test_lower_priority);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
