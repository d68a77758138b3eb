/* libFuzzer: the configuration loader on arbitrary bytes: it accepts or names
 * the problem, never crashes; what it accepts validates and prints. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static lp_config_t c;
  lp_config_default(&c);
  char err[512];
  err[0] = 0;
  if (lp_config_load_text(&c, (const char *)data, size, "fuzz", err, sizeof(err)) == 0) {
    lp_config_validate(&c, err, sizeof(err));
    char *s = lp_config_dump(&c);
    if (!s) abort();
    free(s);
  } else if (!err[0]) {
    abort(); /* a refusal must say why */
  }
  return 0;
}
