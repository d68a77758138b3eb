/* The Open Inference Protocol's names of the models: the model a v2 path
 * names, its output tensor (its pages are rendered by front/pages.c). */
#include <stdio.h>
#include <string.h>

#include "lanepack/v2.h"
#include "sched/sched.h"

/* Model i of a configuration is the proxy's model i. */
lp_model_t *lp__v2_find_model(lp_model_t *models, const lp_config_t *c, const char *name, size_t n) {
  for (size_t i = 0; i < c->nmodels; i++)
    if (strlen(c->models[i].name) == n && memcmp(c->models[i].name, name, n) == 0) return &models[i];
  return NULL;
}

/* The output's name as clients see it: the backend's. */
const char *lp__v2_output_name_of(const lp_model_config_t *c) {
  return c->protocol == LP_PROTO_V2 && c->v2.output[0] ? c->v2.output : "output";
}

const char *lp__v2_output_name(const lp_model_t *m) { return lp__v2_output_name_of(m->cfg); }
