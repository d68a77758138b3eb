/* The mailbox between the front threads and the scheduler: producers on
 * other threads push jobs (one at a time and in lists), cancels and control
 * messages; the owner's loop takes them all, in each producer's order, woken
 * once per burst. Run under ThreadSanitizer it checks the hand-off too. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "handoff/handoff.h"
#include "testutil.h"

#define PRODUCERS 4
#define PER_PRODUCER 20000

typedef struct {
  lp_mbox_t mb;
  lp_job_t *jobs;            /* PRODUCERS x PER_PRODUCER */
  lp_ctl_t ctls[PRODUCERS];
  size_t got_jobs, got_cancels, got_ctls, wakes;
  uint64_t next[PRODUCERS];  /* the sequence number expected next from each producer */
  int out_of_order;
} fixture_t;

typedef struct {
  fixture_t *fx;
  int id;
} producer_t;

static void on_inbox(lp_wake_t *w) {
  fixture_t *fx = w->data;
  lp_job_t *jobs, *cancels;
  lp_ctl_t *ctls;
  lp_batch_t *batches;
  lp__mbox_take(&fx->mb, &jobs, &cancels, &ctls, &batches);
  if (batches) fx->out_of_order++; /* none was pushed */
  fx->wakes++;
  for (lp_job_t *j = jobs; j; j = j->mq_next) {
    int id = j->priority;
    if (j->bytes != fx->next[id]) fx->out_of_order++;
    fx->next[id] = j->bytes + 1;
    fx->got_jobs++;
  }
  for (lp_job_t *j = cancels; j; j = j->cq_next) fx->got_cancels++;
  for (lp_ctl_t *c = ctls; c; c = c->next) fx->got_ctls++;
  if (fx->got_jobs == PRODUCERS * PER_PRODUCER && fx->got_ctls == PRODUCERS) lp__mbox_close(&fx->mb, NULL);
}

/* Jobs in order, alternately one by one and in lists of up to 7; every tenth
 * also sent as a cancel (its own link); a control message last. */
static void producer(void *arg) {
  producer_t *pr = arg;
  fixture_t *fx = pr->fx;
  lp_job_t *mine = fx->jobs + (size_t)pr->id * PER_PRODUCER;
  size_t i = 0;
  while (i < PER_PRODUCER) {
    size_t n = (i / 7) % 2 ? 1 : 7;
    if (i + n > PER_PRODUCER) n = PER_PRODUCER - i;
    for (size_t k = 0; k < n; k++) {
      mine[i + k].priority = pr->id;
      mine[i + k].bytes = i + k;
      if (k + 1 < n) mine[i + k].mq_next = &mine[i + k + 1];
    }
    if (n == 1) lp__mbox_push_job(&fx->mb, &mine[i]);
    else lp__mbox_push_jobs(&fx->mb, &mine[i], &mine[i + n - 1]);
    for (size_t k = 0; k < n; k++)
      if ((i + k) % 10 == 0) lp__mbox_push_cancel(&fx->mb, &mine[i + k]);
    i += n;
  }
  fx->ctls[pr->id].kind = LP_CTL_CLOSED;
  lp__mbox_push_ctl(&fx->mb, &fx->ctls[pr->id]);
}

START_TEST(test_many_producers) {
  uv_loop_t loop;
  ck_assert_int_eq(uv_loop_init(&loop), 0);
  static fixture_t fx;
  memset(&fx, 0, sizeof(fx));
  fx.jobs = calloc((size_t)PRODUCERS * PER_PRODUCER, sizeof(lp_job_t));
  ck_assert_ptr_nonnull(fx.jobs);
  ck_assert_int_eq(lp__mbox_init(&fx.mb, &loop, on_inbox, &fx), 0);
  producer_t prs[PRODUCERS];
  uv_thread_t th[PRODUCERS];
  for (int i = 0; i < PRODUCERS; i++) {
    prs[i] = (producer_t){&fx, i};
    ck_assert_int_eq(uv_thread_create(&th[i], producer, &prs[i]), 0);
  }
  uv_run(&loop, UV_RUN_DEFAULT); /* until on_inbox closed the handle: everything taken */
  for (int i = 0; i < PRODUCERS; i++) uv_thread_join(&th[i]);
  ck_assert_uint_eq(fx.got_jobs, (size_t)PRODUCERS * PER_PRODUCER);
  ck_assert_uint_eq(fx.got_cancels, (size_t)PRODUCERS * (PER_PRODUCER / 10));
  ck_assert_uint_eq(fx.got_ctls, PRODUCERS);
  ck_assert_int_eq(fx.out_of_order, 0);
  /* one wake-up per burst: far fewer than the pushes (usually) and at least one */
  ck_assert_uint_ge(fx.wakes, 1);
  lp__mbox_destroy(&fx.mb);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
  free(fx.jobs);
}
END_TEST

/* Nothing pushed: taking gives four empty lists and the inbox stays usable. */
START_TEST(test_take_empty) {
  uv_loop_t loop;
  ck_assert_int_eq(uv_loop_init(&loop), 0);
  lp_mbox_t mb;
  ck_assert_int_eq(lp__mbox_init(&mb, &loop, NULL, NULL), 0);
  lp_job_t *j = (lp_job_t *)1, *c = (lp_job_t *)1;
  lp_ctl_t *m = (lp_ctl_t *)1;
  lp_batch_t *b = (lp_batch_t *)1;
  lp__mbox_take(&mb, &j, &c, &m, &b);
  ck_assert_ptr_null(j);
  ck_assert_ptr_null(c);
  ck_assert_ptr_null(m);
  ck_assert_ptr_null(b);
  lp_job_t one;
  memset(&one, 0, sizeof(one));
  lp__mbox_push_job(&mb, &one);
  lp__mbox_take(&mb, &j, &c, &m, &b);
  ck_assert_ptr_eq(j, &one);
  ck_assert_ptr_null(one.mq_next);
  ck_assert_ptr_null(b);
  lp__mbox_close(&mb, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  lp__mbox_destroy(&mb);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

/* A loop turn's jobs and batches go over together: in order, with one
 * wake-up; batches pushed alone follow those before; taking the batches alone
 * leaves the jobs. */
typedef struct {
  lp_mbox_t mb;
  int wakes;
  size_t jobs, batches;
  lp_batch_t *first_batch;
} mixed_t;

static void on_mixed(lp_wake_t *w) {
  mixed_t *mx = w->data;
  lp_job_t *j, *c;
  lp_ctl_t *m;
  lp_batch_t *b;
  lp__mbox_take(&mx->mb, &j, &c, &m, &b);
  if (!j && !b) return;
  mx->wakes++;
  mx->first_batch = b;
  for (; j; j = j->mq_next) mx->jobs++;
  for (; b; b = b->hand_next) mx->batches++;
}

START_TEST(test_jobs_and_batches) {
  uv_loop_t loop;
  ck_assert_int_eq(uv_loop_init(&loop), 0);
  mixed_t mx = {0};
  ck_assert_int_eq(lp__mbox_init(&mx.mb, &loop, on_mixed, &mx), 0);
  lp_job_t jobs[3];
  lp_batch_t bts[4];
  memset(jobs, 0, sizeof(jobs));
  memset(bts, 0, sizeof(bts));
  jobs[0].mq_next = &jobs[1];
  jobs[1].mq_next = &jobs[2];
  bts[0].hand_next = &bts[1];
  bts[2].hand_next = &bts[3];
  lp__mbox_push(&mx.mb, &jobs[0], &jobs[2], &bts[0], &bts[1]);
  lp__mbox_push(&mx.mb, NULL, NULL, &bts[2], &bts[3]);
  uv_run(&loop, UV_RUN_NOWAIT);
  ck_assert_int_eq(mx.wakes, 1);
  ck_assert_uint_eq(mx.jobs, 3);
  ck_assert_uint_eq(mx.batches, 4);
  ck_assert_ptr_eq(mx.first_batch, &bts[0]);
  ck_assert_ptr_eq(bts[1].hand_next, &bts[2]);
  ck_assert_ptr_null(bts[3].hand_next);
  /* the batches alone: the job stays for the owner */
  lp__mbox_push(&mx.mb, &jobs[0], &jobs[0], &bts[0], &bts[0]);
  ck_assert_ptr_eq(lp__mbox_take_batches(&mx.mb), &bts[0]);
  ck_assert_ptr_null(lp__mbox_take_batches(&mx.mb));
  uv_run(&loop, UV_RUN_NOWAIT);
  ck_assert_int_eq(mx.wakes, 2);
  ck_assert_uint_eq(mx.jobs, 4);
  ck_assert_uint_eq(mx.batches, 4);
  lp__mbox_close(&mx.mb, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  lp__mbox_destroy(&mx.mb);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

LP_TEST_MAIN("mailbox", test_take_empty, test_jobs_and_batches, test_many_producers)
