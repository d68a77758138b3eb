/* Configuration keys reach what they configure: a value read from the file is
 * the one the dispatch core is given (a key parsed and never read would pass
 * --check-config and do nothing). */
#include <check.h>
#include <string.h>

#include "sched/sched.h"
#include "testutil.h"

static lp_disp_config_t disp_of(const char *text) {
  static lp_config_t c;
  char err[300];
  lp_config_default(&c);
  ck_assert_msg(lp_config_load_text(&c, text, strlen(text), "test", err, sizeof(err)) == 0, "%s", err);
  ck_assert_msg(lp_config_validate(&c, err, sizeof(err)) == 0, "%s", err);
  lp_disp_config_t dc;
  lp__disp_config(&c, &c.models[0], &c.models[0].shapes, &dc);
  return dc;
}

START_TEST(packer_chooses_the_packer) {
  static const char *const names[] = {"ffd", "bfd", "spfhp"};
  ck_assert_int_eq(disp_of("{\"models\": {\"m\": {\"shapes\": \"3x10\", \"backends\": \"http://x\"}}}").packer,
                   LP_ALGO_BFD);
  for (int a = 0; a < LP_ALGO_COUNT; a++) {
    char text[200];
    snprintf(text, sizeof(text),
             "{\"models\": {\"m\": {\"shapes\": \"3x10\", \"backends\": \"http://x\", \"packer\": \"%s\"}}}", names[a]);
    ck_assert_int_eq(disp_of(text).packer, a);
  }
}
END_TEST

/* The configuration a reload would read: top-level keys top, then model m with
 * the backend and wire every case has, the shapes ("4x64" when NULL) and extra keys. */
static void load(lp_config_t *c, const char *top, const char *shapes, const char *model_extra) {
  char text[600], err[300];
  snprintf(text, sizeof(text),
           "{%s\"models\": {\"m\": {\"shapes\": \"%s\", \"backends\": \"http://x\", "
           "\"protocol\": \"v2\"%s}}}", top, shapes ? shapes : "4x64", model_extra);
  lp_config_default(c);
  ck_assert_msg(lp_config_load_text(c, text, strlen(text), "test", err, sizeof(err)) == 0, "%s", err);
}

/* What a reload refuses is the table's "at restart" keys, found with their
 * paths; the keys applied in place pass. */
START_TEST(restart_keys_found_by_the_table) {
  static const struct {
    const char *top, *model, *what; /* what: the path reported, NULL = applied in place */
    const char *shapes;             /* NULL: 4x64 */
  } cases[] = {
      {"", "", NULL, NULL},
      {"\"threads\": 2, ", "", "threads changed (1 -> 2)", NULL},
      {"\"listen\": \"127.0.0.1:9\", ", "", "listen changed ('127.0.0.1:8080' -> '127.0.0.1:9')", NULL},
      {"\"max_body_bytes\": 4096, \"log_level\": \"debug\", ", "", NULL, NULL},
      {"", ", \"max_wait_ms\": 9, \"packer\": \"ffd\", \"embedding\": {\"normalize\": true}", NULL, NULL},
      {"", "", "models.m.shapes changed", "4x64,2x128"},
      {"", ", \"pad_id\": 5", "models.m.pad_id changed (0 -> 5)", NULL},
      {"", ", \"ragged_max_tokens\": 100", "models.m.ragged_max_tokens changed (32768 -> 100)", NULL},
      {"", ", \"v2\": {\"inputs\": {\"segment_ids\": null}}", "models.m.v2.inputs changed", NULL},
      {"", ", \"v2\": {\"datatype\": \"INT64\"}", "models.m.v2.datatype changed (INT32 -> INT64)", NULL},
      {"", ", \"tokenizer\": {\"sentencepiece\": \"a.model\"}", "models.m.tokenizer.sentencepiece changed ('' -> 'a.model')", NULL},
  };
  static lp_config_t running, next;
  load(&running, "", NULL, "");
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char what[400] = "";
    load(&next, cases[i].top, cases[i].shapes, cases[i].model);
    int changed = lp_config_restart_diff(&running, &next, what, sizeof(what));
    if (cases[i].what) ck_assert_msg(changed && strcmp(what, cases[i].what) == 0, "case %zu: %d '%s'", i, changed, what);
    else ck_assert_msg(!changed, "case %zu: refused as '%s'", i, what);
  }
  /* a model more, or another name: the set of models */
  char err[300];
  const char *two = "{\"models\": {\"m2\": {\"shapes\": \"4x64\", \"backends\": \"http://x\"}}}";
  load(&next, "", NULL, "");
  ck_assert_int_eq(lp_config_load_text(&next, two, strlen(two), "test", err, sizeof(err)), 0);
  char what[400];
  ck_assert_int_eq(lp_config_restart_diff(&running, &next, what, sizeof(what)), 1);
  ck_assert_str_eq(what, "the set of models changed");
}
END_TEST

LP_TEST_MAIN("config", packer_chooses_the_packer, restart_keys_found_by_the_table)
