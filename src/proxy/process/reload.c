/* Reload (SIGHUP): a new configuration applied to the running proxy without
 * dropping a connection or a queued request. Limits, tokens, log level, the
 * access log (reopened, for logrotate), devices and every model's scheduling,
 * retry and deadline settings change in place; backends may be added and
 * removed (a removed one gets no new batches and ends those in flight; its
 * shapes admit nothing more). What needs new sockets or a new shape index
 * (listen addresses, front threads, the set of models, a model's shapes,
 * protocol or wire form) is refused, naming it: a rolling restart applies those without loss.
 * A refused reload changes nothing. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/log.h"
#include "process/process.h"
#include "front/front.h"

static int refuse(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -EINVAL;
}


static lp_backend_t *find_backend(lp_model_t *m, const char *url) {
  for (size_t k = 0; k < m->nbackends; k++)
    if (strcmp(m->backends[k].url, url) == 0) return &m->backends[k];
  return NULL;
}

/* Slots the new backend list needs beyond the model's (retired ones stay). */
static size_t backends_needed(lp_model_t *m, const lp_model_config_t *c) {
  size_t n = 0;
  for (size_t i = 0; i < c->nbackends; i++) n += find_backend(m, c->backends[i]) == NULL;
  return n;
}

/* Everything that cannot change in place; 0 or -EINVAL with err. The keys
 * that apply only at restart are the configuration table's (config.c):
 * listen addresses, threads, the set of models, a model's shapes, wire and
 * tokenizer (the fronts read the tokenizer loaded at start, without a lock). */
static int check(lp_proxy_t *p, const lp_config_t *n, char *err, size_t errlen) {
  char what[400];
  if (lp_config_restart_diff(&p->cfg, n, what, sizeof(what)))
    return refuse(err, errlen, "%s: restart to apply", what);
  for (size_t i = 0; i < p->nmodels; i++) {
    lp_model_t *m = &p->models[i];
    const lp_model_config_t *c = lp_config_model(n, m->cfg->name);
    if (m->nbackends + backends_needed(m, c) > LP_MAX_BACKENDS)
      return refuse(err, errlen, "models.%s: too many backends over time (retired ones keep their "
                    "slots): restart to apply", m->cfg->name);
  }
  return 0;
}

/* The model's backends as the new list says: new ones added, dropped ones
 * retired, returning ones back. */
static void apply_backends(lp_model_t *m) {
  const lp_model_config_t *c = m->cfg;
  /* new and returning ones first: retiring the last healthy backend before its
   * successor is up would fail the queue with no_healthy_backend */
  for (size_t i = 0; i < c->nbackends; i++) {
    if (find_backend(m, c->backends[i])) continue;
    lp__backend_init(m, &m->backends[m->nbackends++], c->backends[i]);
    lp_log(LP_LOG_INFO, "backend added", "\"model\": \"%s\", \"backend\": \"%s\"", c->name, c->backends[i]);
  }
  for (int pass = 0; pass < 2; pass++)
    for (size_t k = 0; k < m->nbackends; k++) {
      lp_backend_t *b = &m->backends[k];
      int listed = 0;
      for (size_t i = 0; i < c->nbackends && !listed; i++) listed = strcmp(c->backends[i], b->url) == 0;
      if (pass == 1 && !listed && !b->retired) {
        b->retired = 1;
        b->healthy = 0;
        lp__model_backend_health(m, b, 0);
        lp_log(LP_LOG_INFO, "backend removed", "\"model\": \"%s\", \"backend\": \"%s\", \"in_flight\": %u",
               c->name, b->url, b->inflight);
      } else if (pass == 0 && listed && b->retired) {
        b->retired = 0;
        b->healthy = 1;
        b->probed_ok = 0;
        b->probe_fails = 0;
        lp__model_backend_health(m, b, 1);
        lp_log(LP_LOG_INFO, "backend back", "\"model\": \"%s\", \"backend\": \"%s\"", c->name, b->url);
      }
    }
}

int lp__proxy_reload(lp_proxy_t *p, const lp_config_t *n, char *err, size_t errlen) {
  int rc = check(p, n, err, errlen);
  if (rc) return rc;
  /* what can still fail is done before anything changes */
  char **tokens = NULL;
  size_t ntokens = 0;
  if (n->auth_tokens_file[0] &&
      lp_config_read_tokens(n->auth_tokens_file, lp_config_token_max(n), &tokens, &ntokens, err, errlen))
    return -EINVAL;
  /* the access log is opened anew even under the same name: after logrotate
   * renamed it, the new file is the one written (postrotate sends SIGHUP) */
  if ((n->access_log[0] || p->cfg.access_log[0]) &&
      (rc = lp__access_log_open(p, n->access_log, err, errlen)) != 0) {
    lp_config_free_tokens(tokens, ntokens);
    return rc;
  }

  /* the new configuration, each model in its old slot (models point there) */
  static lp_config_t next;
  next = *n;
  for (size_t i = 0; i < p->nmodels; i++) next.models[i] = *lp_config_model(n, p->models[i].cfg->name);
  p->cfg = next;
  lp_config_free_tokens(p->tokens, p->ntokens);
  p->tokens = tokens;
  p->ntokens = ntokens;
  __atomic_store_n(&lp_log_level, p->cfg.log_level, __ATOMIC_RELAXED); /* fronts read it */
  lp__fronts_reconfigure(p); /* limits, tokens and the configuration every front reads */
  for (size_t i = 0; i < p->nmodels; i++) {
    lp_model_t *m = &p->models[i];
    lp__model_reconfigured(m);
    apply_backends(m);
    lp__model_shapes_changed(m);
  }
  uv_timer_set_repeat(&p->health, p->cfg.health_interval_ms);
  lp_proxy_kick(p);
  return 0;
}
