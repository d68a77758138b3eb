/* The dispatch core's bottom layer, shared by its events (dispatch.c) and its
 * plan (dispatch-plan.c), calling neither: the id maps, the action queue, the
 * device clocks as the policy reads them, a sequence leaving the queue, the
 * batch pool, and what a configuration derives. */
#include "dispatch-internal.h"

#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Batch records kept for reuse: enough for the batches in flight on a few
 * devices at once; past that a finished batch is freed, so a burst's peak
 * does not stay allocated. */
#define BATCH_SPARE_MAX 16

/* ---- configuration ---- */

void lp__disp_derive(lp_disp_t *d) {
  const lp_disp_config_t *c = &d->cfg;
  d->max_copies = c->max_copies ? c->max_copies : DISP_DEFAULT_MAX_COPIES;
  d->unhealthy_after = c->unhealthy_after ? c->unhealthy_after : DISP_DEFAULT_UNHEALTHY_AFTER;
  d->max_queued = c->max_queued_at_device ? c->max_queued_at_device : DISP_DEFAULT_QUEUED_AT_DEVICE;
  d->max_window = c->max_window ? c->max_window : DISP_DEFAULT_MAX_WINDOW;
  d->bound_ns = c->request_bound_ns; /* for jobs admitted from now on */
  if (d->bound_ns == 0) {
    /* every copy may take the whole transfer timeout and its backoff, after
     * the longest wait in the queue */
    uint64_t b = c->retry_backoff_ns, per = 0;
    for (uint32_t i = 0; i < d->max_copies; i++) {
      per += c->backend_timeout_ns + b;
      b = b * 2 < DISP_MAX_BACKOFF_NS ? b * 2 : DISP_MAX_BACKOFF_NS;
    }
    d->bound_ns = c->max_wait_ns + per + DISP_BOUND_SLACK_NS;
  }
}

void lp__disp_backend_init(lp_disp_t *d, uint32_t b, uint32_t devices) {
  disp_backend_t *be = &d->be[b];
  memset(be, 0, sizeof(*be));
  be->up = 1;
  lp_devclock_init(&be->clock, devices);
  for (size_t s = 0; s < d->shapes.count; s++) {
    be->state[s] = d->shapes.shapes[s].state;
    uint64_t seed = d->cfg.seed_cost_ns[s] ? d->cfg.seed_cost_ns[s] : d->shapes.shapes[s].cost_ns;
    lp_devclock_seed(&be->clock, (int)s, seed);
  }
}

/* How long a batch expected to take span may run before it is presumed
 * stalled (and hedged): stall_factor times it, and at least stall_min more. */
uint64_t lp__disp_stall_wait(const lp_disp_t *d, uint64_t span) {
  uint64_t wait = (uint64_t)(d->cfg.stall_factor * (double)span);
  return wait < span + d->cfg.stall_min_ns ? span + d->cfg.stall_min_ns : wait;
}

/* ---- the id maps ---- */

static uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return k;
}

void *lp__disp_map_get(const disp_map_t *m, uint64_t key) {
  if (m->cap == 0 || key == 0) return NULL;
  for (size_t i = mix(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (m->keys[i] == key) return m->vals[i];
    if (m->keys[i] == 0) return NULL;
  }
}

int lp__disp_map_put(disp_map_t *m, uint64_t key, void *val) {
  if ((m->n + 1) * 2 > m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 64;
    uint64_t *k = calloc(cap, sizeof(*k));
    void **v = calloc(cap, sizeof(*v));
    if (!k || !v) {
      free(k);
      free(v);
      return -ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
      if (!m->keys[i]) continue;
      size_t j = mix(m->keys[i]) & (cap - 1);
      while (k[j]) j = (j + 1) & (cap - 1);
      k[j] = m->keys[i];
      v[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = k;
    m->vals = v;
    m->cap = cap;
  }
  size_t i = mix(key) & (m->cap - 1);
  while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
  if (!m->keys[i]) m->n++;
  m->keys[i] = key;
  m->vals[i] = val;
  return 0;
}

void lp__disp_map_del(disp_map_t *m, uint64_t key) {
  if (m->cap == 0) return;
  size_t mask = m->cap - 1, i = mix(key) & mask;
  while (m->keys[i] != key) {
    if (m->keys[i] == 0) return;
    i = (i + 1) & mask;
  }
  m->n--;
  /* backward shift: move later entries of the run into the hole when their home
   * is not between the hole and them */
  for (size_t j = (i + 1) & mask;; j = (j + 1) & mask) {
    if (m->keys[j] == 0) break;
    size_t h = mix(m->keys[j]) & mask;
    if (((j - h) & mask) >= ((j - i) & mask)) {
      m->keys[i] = m->keys[j];
      m->vals[i] = m->vals[j];
      i = j;
    }
  }
  m->keys[i] = 0;
  m->vals[i] = NULL;
}

int lp__disp_push(lp_disp_t *d, const lp_disp_action_t *a, const lp_disp_item_t *items, size_t n) {
  if (lp__grow((void **)&d->acts, &d->acts_cap, d->nacts + 1, sizeof(*d->acts))) return -ENOMEM;
  if (n && lp__grow((void **)&d->items, &d->items_cap, d->nitems + n, sizeof(*d->items))) return -ENOMEM;
  disp_act_t *x = &d->acts[d->nacts++];
  x->a = *a;
  x->items_at = d->nitems;
  if (n) memcpy(d->items + d->nitems, items, n * sizeof(*items));
  d->nitems += n;
  return 0;
}

/* Expected device time of a shape on backend b: learned, else seeded, else
 * what another backend learned of it (the same model on like hardware), else
 * scaled from the known shapes by slots, else the slots (a unit for comparing). */
uint64_t lp__disp_cost(const lp_disp_t *d, uint32_t b, int shape) {
  const lp_devclock_t *c = &d->be[b].clock;
  uint64_t v = lp_devclock_cost(c, shape);
  if (v) return v;
  if ((v = lp__disp_prior(d, b, shape))) return v;
  double per = 0;
  for (size_t s = 0; s < d->shapes.count; s++) {
    uint64_t k = lp_devclock_cost(c, (int)s);
    double slots = (double)d->shapes.shapes[s].lanes * d->shapes.shapes[s].bucket;
    if (k && (per == 0 || (double)k / slots < per)) per = (double)k / slots;
  }
  double slots = (double)d->shapes.shapes[shape].lanes * d->shapes.shapes[shape].bucket;
  v = per > 0 ? (uint64_t)(per * slots) : (uint64_t)slots;
  return v ? v : 1;
}

/* The largest cost another backend knows for a shape, or 0. */
uint64_t lp__disp_prior(const lp_disp_t *d, uint32_t b, int shape) {
  uint64_t v = 0;
  for (uint32_t o = 0; o < d->cfg.nbackends; o++) {
    uint64_t k = o == b ? 0 : lp_devclock_cost(&d->be[o].clock, shape);
    if (k > v) v = k;
  }
  return v;
}

/* Some shape's time is known on backend b (the rest are scaled from it). */
int lp__disp_clock_knows(const lp_disp_t *d, uint32_t b) {
  for (size_t s = 0; s < d->shapes.count; s++)
    if (lp_devclock_cost(&d->be[b].clock, (int)s)) return 1;
  return 0;
}

void lp__disp_seq_leave_backoff(lp_disp_t *d, disp_seq_t *s) {
  if (s->state == SEQ_BACKOFF) lp_theap_remove(&d->retries, &s->retry);
}

void lp__disp_unqueue(lp_disp_t *d, disp_seq_t *s, int state) {
  if (s->state == SEQ_QUEUED) {
    disp_job_t *j = s->job;
    lp_queue_remove(&d->queue, &s->q);
    d->st.queued_seqs--;
    d->st.queued_tokens -= s->len;
    if (--j->queued == 0) lp_theap_remove(&d->deadlines, &j->dl);
  }
  lp__disp_seq_leave_backoff(d, s);
  s->state = (uint8_t)state;
}

void lp__disp_batch_destroy(disp_batch_t *bt) {
  free(bt->seqs);
  free(bt);
}

disp_batch_t *lp__disp_batch_get(lp_disp_t *d, size_t n) {
  disp_batch_t *bt = d->spare;
  if (bt) {
    d->spare = bt->dnext;
    d->nspare--;
  } else {
    bt = calloc(1, sizeof(*bt));
    if (!bt) return NULL;
  }
  if (n > bt->cap) {
    disp_seq_t **s = realloc(bt->seqs, n * sizeof(*s));
    if (!s) {
      lp__disp_batch_destroy(bt);
      return NULL;
    }
    bt->seqs = s;
    bt->cap = (uint32_t)n;
  }
  disp_seq_t **seqs = bt->seqs;
  uint32_t cap = bt->cap;
  memset(bt, 0, sizeof(*bt));
  bt->seqs = seqs;
  bt->cap = cap;
  lp_theap_node_init(&bt->stall);
  return bt;
}

void lp__disp_batch_put(lp_disp_t *d, disp_batch_t *bt) {
  if (d->nspare >= BATCH_SPARE_MAX) {
    lp__disp_batch_destroy(bt);
    return;
  }
  bt->dnext = d->spare;
  d->spare = bt;
  d->nspare++;
}
