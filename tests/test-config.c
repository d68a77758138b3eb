/* Configuration keys reach what they configure: a value read from the file is
 * the one the dispatch core is given (a key parsed and never read would pass
 * --check-config and do nothing). */
#include <check.h>
#include <string.h>

#include "proxy.h"
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

LP_TEST_MAIN("config", packer_chooses_the_packer)
