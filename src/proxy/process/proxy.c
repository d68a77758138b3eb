/* The process: the proxy started and stopped, signals, reloads, and a
 * graceful shutdown that stops accepting, finishes
 * what was accepted, then exits. */
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lanepack/log.h"
#include "process/process.h"
#include "front/front.h"

/* ---- shutdown ---- */

/* Every front has written every answer and closed every connection: done. */
static void proxy_drained(lp_proxy_t *p) {
  lp_log(LP_LOG_INFO, "drained", "\"batches_in_flight\": %zu", p->batches);
  uv_stop(p->loop);
}

static void on_last_resort(uv_timer_t *t) {
  lp_proxy_t *p = t->data;
  lp_log(LP_LOG_ERROR, "drain did not finish: stopping", NULL);
  uv_stop(p->loop);
}

/* Past the drain timeout: whatever is still queued, in flight or waiting to
 * be retried gets 503 shutting_down, so every accepted request is answered
 * before the process goes. */
static void on_drain_timeout(uv_timer_t *t) {
  lp_proxy_t *p = t->data;
  lp_log(LP_LOG_WARN, "drain timeout: failing what is left", "\"batches\": %zu", p->batches);
  p->hard_stop = 1;
  for (size_t i = 0; i < p->nmodels; i++)
    lp__model_fail_all(&p->models[i], LP_DISP_ST_SHUTDOWN);
  lp_upstream_cancel_all(p->up); /* their batches fail with shutting_down */
  lp__fronts_cancel_transfers(p); /* the same, once each comes back */
  uv_timer_start(&p->drain, on_last_resort, 2000, 0);
}

/* Stops accepting and drains: connections close once their last answer is
 * written; then the loop stops. */
static void start_drain(lp_proxy_t *p) {
  if (p->draining) return;
  p->draining = 1;
  lp_log(LP_LOG_INFO, "draining", "\"jobs\": %zu, \"batches\": %zu", p->jobs, p->batches);
  lp__fronts_drain(p);
  uv_timer_start(&p->drain, on_drain_timeout, p->cfg.drain_timeout_ms, 0);
  lp_proxy_kick(p);
}

static void on_drain_delay(uv_timer_t *t) { start_drain(t->data); }

/* SIGTERM: first not ready (so that load balancers and Kubernetes endpoints
 * stop sending here) while still accepting and serving, for drain_delay_ms;
 * then the drain. A second signal drains at once. */
static void on_signal(uv_signal_t *s, int signum) {
  lp_proxy_t *p = s->data;
  if (p->unready) {
    if (!p->draining) {
      uv_timer_stop(&p->drain);
      start_drain(p); /* a second signal: no more delay */
    } else if (!p->hard_stop) {
      /* one during the drain: what is left is failed now, as at its timeout
       * (an operator's second Ctrl-C should not wait out a hung backend);
       * past that, the last resort's timer runs on as it was */
      lp_log(LP_LOG_INFO, "second signal: ending the drain", "\"signal\": %d", signum);
      uv_timer_stop(&p->drain);
      on_drain_timeout(&p->drain);
    }
    return;
  }
  p->unready = 1;
  lp_log(LP_LOG_INFO, "shutting down", "\"signal\": %d, \"drain_delay_ms\": %llu", signum,
         (unsigned long long)p->cfg.drain_delay_ms);
  if (p->cfg.drain_delay_ms == 0) start_drain(p);
  else uv_timer_start(&p->drain, on_drain_delay, p->cfg.drain_delay_ms, 0);
}

/* SIGHUP: a new configuration, validated and applied without dropping a
 * connection or a queued request; a bad one is refused and the old kept. */
static void on_sighup(uv_signal_t *s, int signum) {
  lp_proxy_t *p = s->data;
  (void)signum;
  static lp_config_t next; /* large: not on the stack */
  char err[512] = "";
  if (!p->reload) return;
  if (p->reload(&next, err, sizeof(err)) == 0 && lp__proxy_reload(p, &next, err, sizeof(err)) == 0) {
    lp_log(LP_LOG_INFO, "reloaded", "\"models\": %zu", p->nmodels);
    return;
  }
  lp_buf_t e;
  lp_buf_init(&e);
  lp_buf_json_str(&e, err, strlen(err));
  lp_buf_append(&e, "", 1);
  lp_log(LP_LOG_ERROR, "reload refused: the running configuration stays", "\"error\": %s",
         e.oom ? "\"\"" : e.data);
  lp_buf_free(&e);
  /* the access log is reopened all the same: logrotate may have renamed it, and
   * would compress the old file under us */
  if (p->cfg.access_log[0] && lp__access_log_open(p, p->cfg.access_log, err, sizeof(err)))
    lp_log(LP_LOG_ERROR, "access log not reopened: writing on to the old file", NULL);
}

/* After a burst the allocator keeps what it freed; once nothing is in flight,
 * give it back, so that resident memory follows live connections and queues
 * (what an operator watches), not the last peak. At most once a second, and
 * only after traffic. */
static void on_trim(uv_timer_t *t) {
  lp_proxy_t *p = t->data;
  uint64_t served = 0;
  for (unsigned i = 0; i < p->shared.nfronts; i++) served += LP_RELAXED_LOAD(p->shared.fronts[i].served);
  /* answers held for clients that do not read (streamed ones, their
   * requests' texts) go when they read or leave, long after they were served */
  if (__atomic_load_n(&p->shared.client_counts.unsent_bytes, __ATOMIC_RELAXED)) p->unsent_seen = 1;
  if (p->jobs || p->batches || __atomic_load_n(&p->shared.client_counts.unsent_bytes, __ATOMIC_RELAXED)) return;
  /* twice, on two quiet ticks: an answer still being written when the first
   * ran (its buffer freed just after) goes back at the second */
  if (served != p->trimmed_at || p->unsent_seen) p->trims_left = 2;
  p->unsent_seen = 0;
  if (!p->trims_left) return;
  p->trims_left--;
  p->trimmed_at = served;
  /* the models' spare batches go too: each kept its body, gather and answer
   * index (up to LP_XFER_KEEP_BYTES), as many as a burst had in flight, so
   * what stayed resident after a burst followed that burst's luck (0.2-2 MB
   * after 5,000 requests), not the live connections; the next burst makes
   * its first few batches again */
  for (size_t i = 0; i < p->nmodels; i++) lp__batches_free(&p->models[i]);
  malloc_trim(0);
  lp__trim_arena();
  for (unsigned i = 0; i < p->shared.nfronts; i++)
    __atomic_store_n(&p->shared.fronts[i].trim_due, 1, __ATOMIC_RELAXED);
}

int lp_proxy_init(lp_proxy_t *p, uv_loop_t *loop, const lp_config_t *cfg, int *port) {
  memset(p, 0, sizeof(*p));
  struct timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  p->start_time = (double)wall.tv_sec + (double)wall.tv_nsec / 1e9;
  p->loop = loop;
  p->cfg = *cfg;
  lp_log_level = cfg->log_level;
  lp_buf_init(&p->scratch);
  p->up = lp_upstream_new(loop, 1ull << 30);
  if (!p->up) return -ENOMEM;
  p->recent = lp_recent_new();
  if (!p->recent) return -ENOMEM;
  for (size_t i = 0; i < p->cfg.nmodels; i++) {
    int rc = lp__model_init(&p->models[i], p, &p->cfg.models[i]);
    if (rc) return rc;
    p->nmodels++;
    const lp_model_config_t *mc = &p->cfg.models[i];
    if (mc->sentencepiece[0] || mc->huggingface[0]) {
      char err[256];
      if (!(p->shared.tok[i] = lp_config_tok_load(mc, err, sizeof(err)))) {
        lp_log(LP_LOG_ERROR, "tokenizer", "\"model\": \"%s\", \"file\": \"%s\", \"error\": \"%s\"", mc->name,
               mc->huggingface[0] ? mc->huggingface : mc->sentencepiece, err);
        return -EINVAL;
      }
      const char *why = "";
      const char *engine = lp_tok_engine(p->shared.tok[i], &why);
      lp_log(LP_LOG_INFO, "tokenizer", "\"model\": \"%s\", \"engine\": \"%s\"%s%s%s", mc->name, engine,
             why[0] ? ", \"why\": \"" : "", why, why[0] ? "\"" : "");
      /* checked by the configuration's validation: it loads here too */
      if (mc->pair_template[0] &&
          lp_tei_template_load(mc->pair_template, lp_config_piece_id, p->shared.tok[i], &p->shared.pair[i], err, sizeof(err))) {
        lp_log(LP_LOG_ERROR, "tokenizer", "\"model\": \"%s\", \"pair_template\": \"%s\"", mc->name, err);
        return -EINVAL;
      }
      /* none configured: a tokenizer.json's own pair layout, where it has one
         that a template can say (else /rerank answers 400 naming the key) */
      char own[sizeof(mc->pair_template)];
      if (!mc->pair_template[0] && lp_tok_pair_template(p->shared.tok[i], own, sizeof(own)) == 0 &&
          lp_tei_template_load(own, lp_config_piece_id, p->shared.tok[i], &p->shared.pair[i], err, sizeof(err)))
        memset(&p->shared.pair[i], 0, sizeof(p->shared.pair[i]));
    }
  }
  for (size_t i = 0; i < p->nmodels && !p->shared.tokpool; i++)
    if (p->shared.tok[i] && !(p->shared.tokpool = lp__tokpool_start(lp_config_tokenizer_threads(cfg), cfg->tokenizer_nice,
                                                                   lp__front_tok_finished)))
      return -ENOMEM;
  uv_idle_init(loop, &p->kick);
  uv_timer_init(loop, &p->health);
  uv_timer_init(loop, &p->drain);
  p->drain.data = p;
  uv_timer_init(loop, &p->trim);
  p->trim.data = p;
  uv_timer_start(&p->trim, on_trim, 1000, 1000);
  uv_unref((uv_handle_t *)&p->trim);
  if (cfg->auth_tokens_file[0]) {
    char err[300];
    if (lp_config_read_tokens(cfg->auth_tokens_file, lp_config_token_max(cfg), &p->tokens,
                              &p->ntokens, err, sizeof(err))) {
      lp_log(LP_LOG_ERROR, "auth tokens", "\"error\": \"%s\"", err);
      return -EINVAL;
    }
  }
  p->drained = proxy_drained;
  /* the fronts: their listeners, access log and (several) threads */
  int rc = lp__fronts_start(p, port);
  if (rc) return rc;
  uv_signal_init(loop, &p->sigterm);
  uv_signal_init(loop, &p->sigint);
  p->sigterm.data = p->sigint.data = p;
  uv_signal_start(&p->sigterm, on_signal, SIGTERM);
  uv_signal_start(&p->sigint, on_signal, SIGINT);
  uv_signal_init(loop, &p->sighup);
  p->sighup.data = p;
  uv_signal_start(&p->sighup, on_sighup, SIGHUP);
  lp__backends_start(p);
  return 0;
}

void lp_proxy_free(lp_proxy_t *p) {
  lp__advice_free(p);
  /* the workers first: none pushes to a front's box once it is freed */
  lp__tokpool_stop(p->shared.tokpool);
  lp__fronts_stop(p); /* joins the threads and frees what the fronts own */
  lp__tokpool_free(p->shared.tokpool); /* after: a front can no longer cancel a job */
  p->shared.tokpool = NULL;
  /* after: a front left running (stranded) until its join could still tokenize */
  for (size_t i = 0; i < LP_MAX_MODELS; i++) lp_tok_free(p->shared.tok[i]);
  lp_recent_free(p->recent);
  p->recent = NULL;
}
