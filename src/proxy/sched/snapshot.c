/* Runs on the scheduler thread: the snapshot the pages of its state are
 * rendered from (by the fronts), taken when page requests are taken from its
 * inbox. Numbers and names are copied; no text is formatted here. */
#include <string.h>

#include "sched/sched.h"
#include "handoff/snapshot.h"

/* What an inference gateway's endpoint picker and an autoscaler read, per
 * model: requests waiting (a sequence of theirs is queued) and running (every
 * sequence sent, no answer yet) -- the Gateway API Inference Extension's
 * TotalQueuedRequests and TotalRunningRequests, counted in requests as a
 * client sees them, not sequences -- and the saturation: mean queue delay over
 * mean device time per batch over the last 30 s. Every admitted request is in
 * its model's live list, so one walk counts them; a scrape costs O(requests
 * held). Waiting: a sequence of it was never sent (one queued again for a retry
 * counts as running). The saturation's window is the model's and moves with
 * each sample: it is sampled here, for /metrics only, as when it was rendered
 * in place. */
static void load_gauges(lp_proxy_t *p, lp_snap_t *s, uint64_t now) {
  for (size_t k = 0; k < p->nmodels; k++) {
    lp_model_t *m = &p->models[k];
    lp_snap_model_t *sm = &s->models[k];
    uint64_t pending = 0;
    double pending_s = 0;
    for (const lp_job_t *job = m->live; job; job = job->live_next) {
      if (job->answered) continue;
      /* not yet in the queue-delay histogram (observed at the answer): counted
       * with the wait it has so far */
      uint64_t wait = 0, backend = 0;
      if (lp__job_waiting(job)) {
        sm->waiting++;
        wait = now > job->arrive_ns ? now - job->arrive_ns : 0;
      } else {
        sm->running++;
        lp__job_times(job, &wait, &backend);
      }
      pending++;
      pending_s += (double)wait / 1e9;
    }
    lp_sat_sums_t cur = {.at_ns = now, .wait_s = m->queue_delay.sum, .waits = m->queue_delay.count,
                         .service_s = m->service.sum, .batches = m->service.count};
    sm->saturation = lp_saturation_update(&m->saturation, &cur, pending_s, pending);
  }
}

/* The datatype answers carry: a v2 backend's own (from its model metadata,
 * then from each answer; FP32 until one of them has been seen); FP64 for a
 * lanepack-JSON backend, whose outputs are JSON numbers (never chosen per value). */
static lp_dtype_t v2_out_dtype(const lp_model_t *m) {
  if (m->cfg->protocol != LP_PROTO_V2) return LP_DT_FP64;
  return m->v2_out_dtype != LP_DT_INVALID ? m->v2_out_dtype : LP_DT_FP32;
}

static void copy_str(char *dst, size_t cap, const char *src) {
  size_t n = strlen(src);
  if (n >= cap) n = cap - 1; /* never: the configuration bounds them by the same sizes */
  memcpy(dst, src, n);
  dst[n] = '\0';
}

static void take_backend(const lp_model_t *m, size_t k, unsigned parts, lp_snap_backend_t *sb) {
  const lp_backend_t *b = &m->backends[k];
  copy_str(sb->url, sizeof(sb->url), b->url);
  sb->healthy = b->healthy;
  sb->inflight = b->inflight;
  sb->batches = b->batches;
  sb->failures = b->failures;
  if (!(parts & LP_SNAP_METRICS)) return;
  const lp_devclock_t *c = lp_disp_clock(m->disp, (uint32_t)k); /* a backend's device clock is the core's */
  if (!c) return;
  sb->devices = c->devices;
  sb->busy_ns = c->busy_ns;
  sb->useful_ns = c->useful_ns;
  sb->lead_ns = c->lead.median;
  for (size_t sh = 0; sh < m->shapes.count; sh++) sb->cost_ns[sh] = lp_devclock_cost(c, (int)sh);
}

static void take_model(const lp_model_t *m, unsigned parts, lp_snap_model_t *sm) {
  copy_str(sm->name, sizeof(sm->name), m->cfg->name);
  copy_str(sm->v2_output, sizeof(sm->v2_output), lp__v2_output_name(m));
  sm->ragged = m->cfg->ragged;
  /* as admission bounds ids (infer.c); the tokenizers are set at start-up */
  const lp_tok_t *tok = m->proxy->shared.tok[m - m->proxy->models];
  sm->vocab = m->cfg->vocab_size ? m->cfg->vocab_size : tok ? lp_tok_vocab(tok) : 0;
  sm->ready = lp__model_ready(m);
  sm->v2_dtype = v2_out_dtype(m);
  sm->queued_seqs = m->st.queued_seqs;
  sm->idle_with_work_ns = m->st.idle_with_work_ns;
  sm->queued_tokens = m->st.queued_tokens;
  sm->shapes = m->shapes;
  for (size_t k = 0; k < m->nbackends; k++) take_backend(m, k, parts, &sm->backends[k]);
  if (!(parts & LP_SNAP_METRICS)) return;
  memcpy(sm->batches_by_shape, m->batches_by_shape, sizeof(sm->batches_by_shape));
  sm->real_tokens = m->real_tokens;
  sm->pad_tokens = m->pad_tokens;
  sm->sequences_done = m->sequences_done;
  sm->fill = m->fill;
  sm->duration = m->duration;
  sm->service = m->service;
  sm->service_error = m->service_error;
  sm->queue_delay = m->queue_delay;
  for (size_t sh = 0; sh < m->shapes.count; sh++) sm->fill_by_shape[sh] = m->fill_by_shape[sh];
}

lp_snap_t *lp__sched_snapshot(lp_proxy_t *p, unsigned parts) {
  size_t nbackends = 0;
  for (size_t i = 0; i < p->nmodels; i++) nbackends += p->models[i].nbackends;
  lp_snap_backend_t *backends;
  lp_snap_t *s = lp__snap_new(p->nmodels, nbackends, &backends);
  if (!s) return NULL;
  if ((parts & LP_SNAP_RECENT) && p->recent && (s->recent = lp_recent_dup(p->recent)) == NULL) {
    lp__snap_unref(s);
    return NULL;
  }
  s->parts = parts;
  s->at_ns = lp__now();
  s->unready = p->unready;
  s->start_time = p->start_time;
  s->retries = p->retries;
  s->stalls = p->stalls;
  s->hedges_won = p->hedges_won;
  s->inflight_batches = p->batches;
  for (size_t i = 0; i < p->nmodels; i++) {
    s->models[i].backends = backends;
    s->models[i].nbackends = p->models[i].nbackends;
    backends += p->models[i].nbackends;
    take_model(&p->models[i], parts, &s->models[i]);
  }
  if (parts & LP_SNAP_METRICS) load_gauges(p, s, s->at_ns);
  return s;
}
