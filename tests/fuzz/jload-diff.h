/* For the fuzz targets of the text routes' codecs: lp_jload held to
 * json_loadb on the same bytes (the same tree or the same error), with every
 * string of the top level through its scan. */
#ifndef LANEPACK_FUZZ_JLOAD_DIFF_H
#define LANEPACK_FUZZ_JLOAD_DIFF_H

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/jload.h"

static inline void fuzz_jload_vs_jansson(const uint8_t *data, size_t size) {
  lp_jload_set_min(1); /* the codecs called next go through the scan too */
  json_error_t e1, e2;
  json_t *x = lp_jload((const char *)data, size, JSON_REJECT_DUPLICATES, &e1);
  json_t *y = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &e2);
  if (!x != !y || (x ? !json_equal(x, y) : strcmp(e1.text, e2.text) != 0)) abort();
  json_decref(x);
  json_decref(y);
}

#endif
