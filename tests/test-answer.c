/* A batch's answer shared by the jobs it serves: taken without a copy, held
 * by one reference per sequence, freed by the last release on whichever
 * thread that is. Run under ThreadSanitizer it checks the hand-off too. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "handoff/handoff.h"
#include "testutil.h"

#define READERS 4
#define ROUNDS 2000

START_TEST(take_moves_without_copy) {
  lp_buf_t b;
  lp_buf_init(&b);
  lp_buf_puts(&b, "{\"outputs\": [[1,2],[3]]}");
  const char *bytes = b.data;
  size_t len = b.len;
  lp_answer_t *a = lp__answer_take(&b);
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_eq(a->body.data, bytes); /* slices indexed before the take stay valid */
  ck_assert_uint_eq(a->body.len, len);
  ck_assert_ptr_null(b.data);
  ck_assert_uint_eq(b.len, 0);
  lp_buf_free(&b); /* the emptied buffer is still a buffer */
  lp__answer_unref(a);
  lp__answer_unref(NULL);
}
END_TEST

START_TEST(copy_holds_the_bytes) {
  static const char v[] = "\x01\x00\x00\x00\x02\x00\x00\x00";
  lp_answer_t *a = lp__answer_copy(v, 8);
  ck_assert_ptr_nonnull(a);
  ck_assert_uint_eq(a->body.len, 8);
  ck_assert_int_eq(memcmp(a->body.data, v, 8), 0);
  lp_answer_t *e = lp__answer_copy("", 0);
  ck_assert_ptr_nonnull(e);
  ck_assert_uint_eq(e->body.len, 0);
  lp__answer_unref(e);
  lp__answer_unref(a);
}
END_TEST

typedef struct {
  lp_answer_t *a;
  size_t sum;
} reader_t;

/* A front: reads its span after the scheduler has dropped its own reference,
 * then releases; the last of them frees (ASan: no use after free, no leak). */
static void reader(void *arg) {
  reader_t *r = arg;
  for (size_t i = 0; i < r->a->body.len; i++) r->sum += (unsigned char)r->a->body.data[i];
  lp__answer_unref(r->a);
}

START_TEST(last_release_frees_across_threads) {
  for (int round = 0; round < ROUNDS; round++) {
    char text[64];
    int n = snprintf(text, sizeof(text), "[%d, %d]", round, round + 1);
    lp_answer_t *a = lp__answer_copy(text, (size_t)n);
    ck_assert_ptr_nonnull(a);
    reader_t rs[READERS];
    uv_thread_t th[READERS];
    size_t want = 0;
    for (int i = 0; i < n; i++) want += (unsigned char)text[i];
    for (int i = 0; i < READERS; i++) {
      lp__answer_ref(a); /* the scheduler, before the hand-off */
      rs[i] = (reader_t){.a = a};
    }
    for (int i = 0; i < READERS; i++) ck_assert_int_eq(uv_thread_create(&th[i], reader, &rs[i]), 0);
    lp__answer_unref(a); /* the scheduler is done slicing before the fronts write */
    for (int i = 0; i < READERS; i++) {
      uv_thread_join(&th[i]);
      ck_assert_uint_eq(rs[i].sum, want);
    }
  }
}
END_TEST

LP_TEST_MAIN("answer", take_moves_without_copy, copy_holds_the_bytes, last_release_frees_across_threads)
