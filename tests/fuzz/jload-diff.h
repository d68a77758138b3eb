/* For the fuzz targets of the text routes' codecs and test-jload: lp_jload
 * and lp_jload_inplace held to json_loadb on the same bytes (the same tree or
 * the same error), with every string of the top level through its scan. */
#ifndef LANEPACK_FUZZ_JLOAD_DIFF_H
#define LANEPACK_FUZZ_JLOAD_DIFF_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/jload.h"

/* lp_jload_inplace's references (strings of the top level and of its
 * arrays) made into strings, so that json_equal can compare the tree. */
static inline void jload_diff_resolve_one(json_t *v) {
  size_t len;
  const char *s = lp_jload_str(v, &len);
  if (s && s != json_string_value(v)) json_string_setn_nocheck(v, s, len);
}

static inline void jload_diff_resolve(json_t *root) {
  const char *key;
  json_t *v;
  if (!json_is_object(root)) return;
  json_object_foreach(root, key, v) {
    if (json_is_array(v))
      for (size_t i = 0; i < json_array_size(v); i++) jload_diff_resolve_one(json_array_get(v, i));
    else jload_diff_resolve_one(v);
  }
}

/* Whether lp_jload, lp_jload_inplace (on a copy, which a refused body leaves
 * as it came) and json_loadb agree on b[0..n): 1, or 0 with why in msg. */
static inline int jload_diff_agree(const char *b, size_t n, char *msg, size_t msglen) {
  json_error_t e1, e2, e3;
  char *own = malloc(n ? n : 1); /* owned here */
  if (!own) return 1;
  memcpy(own, b, n);
  json_t *x = lp_jload(b, n, JSON_REJECT_DUPLICATES, &e1);
  json_t *y = json_loadb(b, n, JSON_REJECT_DUPLICATES, &e2);
  json_t *z = lp_jload_inplace(own, n, JSON_REJECT_DUPLICATES, &e3);
  jload_diff_resolve(z);
  const char *why = NULL;
  if (!x != !y || (x ? !json_equal(x, y) : strcmp(e1.text, e2.text) != 0)) why = "jload";
  else if (!z != !y || (z ? !json_equal(z, y) : strcmp(e3.text, e2.text) != 0)) why = "in place";
  else if (!z && memcmp(own, b, n) != 0) why = "a refused body changed in place";
  /* the return value used: a message cut short is fine */
  if (why && snprintf(msg, msglen, "%s: jload %s, in place %s, jansson %s on: %.*s", why, x ? "tree" : e1.text,
             z ? "tree" : e3.text, y ? "tree" : e2.text, (int)(n > 300 ? 300 : n), b) < 0)
    msg[0] = '\0';
  json_decref(x);
  json_decref(y);
  json_decref(z);
  free(own);
  return why == NULL;
}

static inline void fuzz_jload_vs_jansson(const uint8_t *data, size_t size) {
  lp_jload_set_min(1); /* the codecs called next go through the scan too */
  char msg[512];
  if (!jload_diff_agree((const char *)data, size, msg, sizeof(msg))) {
    fprintf(stderr, "%s\n", msg);
    abort();
  }
}

#endif
