/* Runs on the scheduler (made, referenced) and on the fronts (released): a
 * batch's answer bytes, shared by the jobs it serves until the last is written. */
#include <stdlib.h>

#include "handoff/handoff.h"

lp_answer_t *lp__answer_take(lp_buf_t *body) {
  lp_answer_t *a = malloc(sizeof(*a));
  if (!a) return NULL;
  a->refs = 1;
  a->has_out = 0;
  a->body = *body; /* moved: its bytes stay where they are, so slices into them stay valid */
  lp_buf_init(body);
  return a;
}

lp_answer_t *lp__answer_copy(const void *data, size_t len) {
  lp_buf_t b;
  lp_buf_init(&b);
  lp_buf_append(&b, data, len);
  lp_answer_t *a = b.oom ? NULL : lp__answer_take(&b);
  if (!a) lp_buf_free(&b);
  return a;
}

void lp__answer_adopt(lp_answer_t *a, lp_tensor_t *t) {
  a->out = *t;
  a->has_out = 1;
  t->ints = NULL; /* the decoded message no longer frees them */
  t->reals = NULL;
}

void lp__answer_ref(lp_answer_t *a) { __atomic_add_fetch(&a->refs, 1, __ATOMIC_RELAXED); }

void lp__answer_unref(lp_answer_t *a) {
  if (!a || __atomic_sub_fetch(&a->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  if (a->has_out) {
    free(a->out.ints);
    free(a->out.reals);
  }
  lp_buf_free(&a->body);
  free(a);
}

void lp__put_output(lp_buf_t *b, const lp_seq_t *s) {
  if (s->out_wrap) lp_buf_puts(b, "[");
  if (s->out) lp_buf_append(b, s->out, s->out_len);
  else lp_tensor_write_json(b, &s->ans->out, s->out_first, s->out_n, s->out_inner);
  if (s->out_wrap) lp_buf_puts(b, "]");
}
