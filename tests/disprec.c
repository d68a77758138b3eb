/* The dispatch action recorder the dispatch tests share (disprec.h). */
#include "disprec.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

void rec_config(lp_disp_config_t *c, const char *shapes, const uint64_t *cost_ms) {
  lp_disp_config_default(c);
  char err[128];
  ck_assert_msg(lp_bucket_set_parse(&c->shapes, shapes, err, sizeof(err)) == 0, "%s: %s", shapes, err);
  for (size_t i = 0; i < c->shapes.count; i++) c->seed_cost_ns[i] = cost_ms[i] * 1000000ull;
  c->stall_factor = 0;
  c->request_bound_ns = 10000 * 1000000ull;
}

void rec_clear(rec_t *r) {
  for (size_t i = 0; i < r->n; i++) free((void *)r->acts[i].it);
  r->n = 0;
}

void rec_free(rec_t *r) {
  rec_clear(r);
  free(r->acts);
  r->acts = NULL;
}

size_t rec_drain(rec_t *r, lp_disp_t *d, uint64_t now) {
  size_t got = 0;
  lp_disp_action_t a;
  while (lp_disp_next(d, &a)) {
    if (!r->acts) { /* once, never moved: tests keep pointers to actions */
      r->acts = calloc(REC_MAX_ACTS, sizeof(*r->acts));
      ck_assert_ptr_nonnull(r->acts);
    }
    if (r->n == REC_MAX_ACTS) ck_abort_msg("more than %d dispatch actions recorded", REC_MAX_ACTS);
    rec_act_t *x = &r->acts[r->n++];
    x->a = a;
    x->at = now;
    x->it = NULL;
    if (a.kind == LP_DISP_ACT_SEND) {
      lp_disp_item_t *it = malloc((a.send.n ? a.send.n : 1) * sizeof(*it));
      ck_assert_ptr_nonnull(it);
      memcpy(it, a.send.items, a.send.n * sizeof(*it));
      x->it = it;
      x->a.send.items = it;
    }
    got++;
  }
  return got;
}

int rec_count(const rec_t *r, lp_disp_act_kind_t k) {
  int n = 0;
  for (size_t i = 0; i < r->n; i++) n += r->acts[i].a.kind == k;
  return n;
}

const rec_act_t *rec_nth(const rec_t *r, lp_disp_act_kind_t k, int i) {
  for (size_t j = 0; j < r->n; j++)
    if (r->acts[j].a.kind == k && i-- == 0) return &r->acts[j];
  return NULL;
}

const rec_act_t *rec_last(const rec_t *r, lp_disp_act_kind_t k) {
  for (size_t j = r->n; j-- > 0;)
    if (r->acts[j].a.kind == k) return &r->acts[j];
  return NULL;
}

const rec_act_t *rec_answer_of(const rec_t *r, uint64_t job) {
  for (size_t j = 0; j < r->n; j++)
    if (r->acts[j].a.kind == LP_DISP_ACT_ANSWER && r->acts[j].a.answer.job_id == job) return &r->acts[j];
  return NULL;
}

const rec_act_t *rec_send_of(const rec_t *r, uint64_t job, size_t from) {
  const rec_act_t *found = NULL;
  for (size_t j = from; j < r->n; j++)
    if (rec_holds(&r->acts[j], job)) found = &r->acts[j];
  return found;
}

int rec_holds(const rec_act_t *s, uint64_t job) {
  if (!s || s->a.kind != LP_DISP_ACT_SEND) return 0;
  for (size_t i = 0; i < s->a.send.n; i++)
    if (s->it[i].job_id == job) return 1;
  return 0;
}
