/* The W3C trace context codec: traceparent read and written, tracestate
 * cleaned (whitespace and empty members dropped, invalid values refused
 * whole, long ones cut at whole members from the end). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "lanepack/trace.h"
#include "testutil.h"

static int clean(const char *v, char *out) { return lp_trace_state_clean(v, strlen(v), out); }

START_TEST(traceparent_read_and_written) {
  lp_trace_t t;
  const char *ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  ck_assert_int_eq(lp_trace_parse(ok, strlen(ok), &t), 0);
  ck_assert_uint_eq(t.flags, 1);
  ck_assert_uint_eq(t.trace_id[0], 0x4b);
  ck_assert_uint_eq(t.parent_id[7], 0xb7);
  char out[LP_TRACEPARENT_SIZE];
  lp_trace_format(t.trace_id, t.parent_id, t.flags, out);
  ck_assert_str_eq(out, ok);
  const char *bad[] = {"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                       "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                       "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                       "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                       "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
                       "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ck_assert_int_eq(lp_trace_parse(bad[i], strlen(bad[i]), &t), -EINVAL);
  const char *later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more";
  ck_assert_int_eq(lp_trace_parse(later, strlen(later), &t), 0);
}
END_TEST

START_TEST(tracestate_cleaned) {
  char out[LP_TRACESTATE_SIZE];
  ck_assert_int_eq(clean("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", out), 39);
  ck_assert_str_eq(out, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
  /* optional whitespace and empty members (the headers joined) dropped */
  ck_assert_int_eq(clean(" rojo=1 ,\t, ,congo=2\t", out), 14);
  ck_assert_str_eq(out, "rojo=1,congo=2");
  ck_assert_int_eq(clean("", out), 0);
  ck_assert_str_eq(out, "");
  ck_assert_int_eq(clean("tenant1@vendor=x,a-b_c*d/e=v w", out), 30);
  /* refused whole: no '=', a bad key, a repeated key, a value ending in a
   * space or holding a comma's neighbour '=', too many members */
  const char *bad[] = {"rojo", "Rojo=1", "1abc=2", "a=1,a=2", "a=1 =2", "a=", "=1", "a@=1", "@b=1",
                       "a@B=1", "a=\x01", "a=\x7f", "a@bcdefghijklmnop=1"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) ck_assert_msg(clean(bad[i], out) == -EINVAL, "%s", bad[i]);
  char many[40 * 8] = "";
  for (int i = 0; i < LP_TRACESTATE_MEMBERS + 1; i++) {
    char m[16];
    snprintf(m, sizeof(m), "%sk%d=v", i ? "," : "", i);
    strcat(many, m);
  }
  ck_assert_int_eq(clean(many, out), -EINVAL);
}
END_TEST

START_TEST(tracestate_cut_at_members) {
  /* members of 100 characters: five fit in 512 (5 * 100 + 4 commas), the rest cut */
  char v[2048] = "", out[LP_TRACESTATE_SIZE];
  for (int i = 0; i < 10; i++) {
    char m[128];
    int k = snprintf(m, sizeof(m), "k%d=", i); /* the member: its key, '=', x's up to 100 */
    memset(m + k, 'x', (size_t)(100 - k));
    m[100] = '\0';
    if (i) strcat(v, ",");
    strcat(v, m);
  }
  int n = clean(v, out);
  ck_assert_int_eq(n, 5 * 100 + 4);
  ck_assert_int_eq(strncmp(out, v, (size_t)n), 0);
  ck_assert_int_le(n, LP_TRACESTATE_MAX);
}
END_TEST

LP_TEST_MAIN("trace-codec", traceparent_read_and_written, tracestate_cleaned, tracestate_cut_at_members)
