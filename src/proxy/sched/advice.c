/* /v1/buckets/advice, run on the scheduler's thread: the query checked, the
 * padding answer rendered at once, and the simulated one (?p99_ms=) computed
 * on a worker of libuv's thread pool, so that no page can stall dispatch. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lanepack/log.h"
#include "lanepack/shapeadv.h"
#include "lanepack/sim.h"
#include "sched/sched.h"

/* Computations waiting behind the running one. One takes about 0.2 s of a core
 * (ADV_CPU_BUDGET_S for the search, about as much again to confirm), so the
 * last of them is answered within about a second; past that a client is
 * better told to come back (429) than held. */
#define ADV_QUEUE_MAX 4
/* Requests sharing one computation (equal queries): each is a connection
 * held open, so they are bounded too. */
#define ADV_WAITERS_MAX 64
/* The worker's nice value while it simulates: the advice is background work,
 * and on a machine whose cores the proxy, its clients and its backend share it
 * must take only what they leave. */
#define ADV_NICE 19

#define ADV_CACHE 4
#define ADV_CACHE_NS 30000000000ull /* an answer is reused this long ... */
#define ADV_CACHE_GROWTH 0.10       /* ... while the histogram grew by less than this */
#define ADV_CPU_BUDGET_S 0.10       /* the search; confirming and the device counts come after
                                       (about as much again: ~0.2 s in all) */
#define ADV_JSON_MAX 6144

/* Recent answers. Keyed by the model and its histogram's storage (a model
 * torn down and made anew at the same address has new storage); read and
 * written on the scheduler's thread only. Fixed size: nothing to free. */
static struct adv_cache_s {
  const lp_model_t *m;
  const uint64_t *hist;
  uint32_t k;
  double p99_ms, rate_asked;
  uint64_t at_ns, observed;
  size_t len;
  char json[ADV_JSON_MAX];
} adv_cache[ADV_CACHE];
static size_t adv_cache_next;

/* One simulated advice: its inputs copied on the scheduler's thread when it
 * is queued (the worker reads nothing else), its answer written by the worker,
 * and the page jobs waiting for it. Owned by the proxy's queue (lp_advq_t). */
struct lp_adv_comp_s {
  uv_work_t work;
  lp_proxy_t *p;
  lp_adv_comp_t *next;      /* in the queue */
  /* the query, and the model it was asked of */
  const lp_model_t *m;
  const uint64_t *hist;
  char model[LP_NAME_MAX];
  uint32_t k;
  double p99_ms, rate_asked;
  uint64_t observed;
  lp_sadv_params_t prm;
  uint32_t *lens;           /* owned; prm.lens */
  double *weight;           /* owned; prm.weight */
  /* written by the worker */
  lp_sadv_result_t *r;      /* owned */
  int rc;
  double cpu_ms;
  size_t len;
  char err[160];
  char json[ADV_JSON_MAX];
  /* page jobs answered when it ends, by mq_next */
  lp_job_t *waiters, *waiters_last;
  size_t nwaiters;
};

static double cpu_s(void *arg) {
  (void)arg;
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A query parameter as a finite number: 1 with *out, 0 absent, -1 malformed. */
static int query_double(const char *q, const char *name, double *out) {
  size_t n = strlen(name);
  while (*q) {
    q++; /* '?' or '&' */
    if (strncmp(q, name, n) == 0 && q[n] == '=') {
      char *end;
      errno = 0;
      double v = strtod(q + n + 1, &end);
      if (end == q + n + 1 || (*end && *end != '&') || errno || !isfinite(v)) return -1;
      *out = v;
      return 1;
    }
    q += strcspn(q, "&");
  }
  return 0;
}

static const lp_devclock_t *backend_clock(const lp_model_t *m, size_t i) {
  return lp_disp_clock(m->disp, (uint32_t)i);
}

/* A shape's device time as the backends learned it (the median of those that
 * know it), else its configured cost, else 0 (the advisor fits one). */
static uint64_t shape_cost(const lp_model_t *m, int s) {
  uint64_t v[LP_MAX_BACKENDS];
  size_t n = 0;
  for (size_t i = 0; i < m->nbackends; i++) {
    uint64_t c = m->backends[i].retired ? 0 : lp_devclock_cost(backend_clock(m, i), s);
    if (!c) continue;
    size_t at = n++;
    while (at > 0 && v[at - 1] > c) v[at] = v[at - 1], at--;
    v[at] = c;
  }
  return n ? v[n / 2] : m->shapes.shapes[s].cost_ns;
}

/* ---- answering the page jobs ---- */

static void job_error(lp_job_t *job, int status, const char *code, const char *msg) {
  job->res_status = status;
  snprintf(job->res_code, sizeof(job->res_code), "%s", code);
  snprintf(job->res_msg, sizeof(job->res_msg), "%s", msg);
  if (status == 429) snprintf(job->res_hdr, sizeof(job->res_hdr), "Retry-After: 1\r\n");
}

static void job_done(lp_proxy_t *p, lp_job_t *job) {
  if (!job->res_status) job->res_status = 200;
  job->res_ctype = "application/json";
  lp__job_hand_back(job);
}

/* The advice body: the query's model and how it was made, then the
 * advisor's own JSON object's members. */
static void render(lp_buf_t *b, const char *model, int cached, double age_s, uint64_t observed,
                   const char *rate_from, double cpu_ms, const char *json) {
  lp_buf_puts(b, "{\"model\": ");
  lp_buf_json_str(b, model, strlen(model));
  if (cached)
    lp_buf_printf(b, ", \"cached\": true, \"age_s\": %.3f, \"observed\": %llu, %s\n", age_s,
                  (unsigned long long)observed, json + 1);
  else
    lp_buf_printf(b, ", \"cached\": false, \"observed\": %llu, \"rate_from\": \"%s\", \"cpu_ms\": %.1f, %s\n",
                  (unsigned long long)observed, rate_from, cpu_ms, json + 1);
}

/* ---- the worker ---- */

static void comp_free(lp_adv_comp_t *c) {
  free(c->lens);
  free(c->weight);
  free(c->r);
  free(c);
}

/* On a thread of libuv's pool: the simulation, from the copied inputs only. */
static void adv_work(uv_work_t *w) {
  lp_adv_comp_t *c = container_of(w, lp_adv_comp_t, work);
  /* a pool thread inherits the name of the thread that started the pool (the
   * scheduler's): named for what it runs, top -H tells them apart */
  prctl(PR_SET_NAME, "lp-advice", 0, 0, 0);
  /* background work: what the loops leave (the pool runs nothing else of
   * ours; a pool thread that cannot go back to its old value stays nice) */
  pid_t tid = (pid_t)syscall(SYS_gettid);
  errno = 0;
  int old = getpriority(PRIO_PROCESS, (id_t)tid);
  int niced = !(old == -1 && errno) && setpriority(PRIO_PROCESS, (id_t)tid, ADV_NICE) == 0;
  double t0 = cpu_s(NULL);
  c->rc = lp_sadv_run(&c->prm, c->r, c->err, sizeof(c->err));
  c->cpu_ms = (cpu_s(NULL) - t0) * 1e3;
  if (!c->rc) {
    c->len = lp_sadv_json(&c->prm, c->r, c->json, sizeof(c->json));
    if (c->len >= sizeof(c->json)) {
      snprintf(c->err, sizeof(c->err), "the advice does not fit its buffer");
      c->rc = -E2BIG;
    }
  }
  if (niced) (void)setpriority(PRIO_PROCESS, (id_t)tid, old);
}

static void adv_start_next(lp_proxy_t *p);

/* Back on the scheduler's thread: cached, and every waiter answered. */
static void adv_done(uv_work_t *w, int status) {
  lp_adv_comp_t *c = container_of(w, lp_adv_comp_t, work);
  lp_proxy_t *p = c->p;
  p->advq.running = NULL;
  if (status < 0 && !c->rc) c->rc = status, snprintf(c->err, sizeof(c->err), "%s", uv_strerror(status));
  if (!c->rc) {
    struct adv_cache_s *e = &adv_cache[adv_cache_next++ % ADV_CACHE];
    e->m = c->m;
    e->hist = c->hist;
    e->k = c->k;
    e->p99_ms = c->p99_ms;
    e->rate_asked = c->rate_asked;
    e->at_ns = mono_ns();
    e->observed = c->observed;
    e->len = c->len;
    memcpy(e->json, c->json, c->len + 1);
  }
  const char *rate_from = c->rate_asked > 0 ? "query" : "observed";
  while (c->waiters) {
    lp_job_t *job = c->waiters;
    c->waiters = job->mq_next;
    job->mq_next = NULL;
    if (c->rc == -ENODATA) job_error(job, 409, "no_data", c->err);
    else if (c->rc) job_error(job, c->rc == -ENOMEM ? 500 : 422, "advice_failed", c->err);
    else render(&job->res_body, c->model, 0, 0, c->observed, rate_from, c->cpu_ms, c->json);
    job_done(p, job);
  }
  comp_free(c);
  adv_start_next(p);
}

static void adv_start_next(lp_proxy_t *p) {
  lp_advq_t *q = &p->advq;
  while (!q->running && q->head) {
    lp_adv_comp_t *c = q->head;
    q->head = c->next;
    if (!q->head) q->tail = NULL;
    q->queued--;
    int rc = uv_queue_work(p->loop, &c->work, adv_work, adv_done);
    if (rc == 0) {
      q->running = c;
      return;
    }
    c->rc = rc; /* answered as failed, at once */
    snprintf(c->err, sizeof(c->err), "cannot start the advisor: %s", uv_strerror(rc));
    adv_done(&c->work, 0);
  }
}

/* ---- asking ---- */

static int same_query(const lp_adv_comp_t *c, const lp_model_t *m, uint32_t k, double p99_ms, double rate) {
  return c->m == m && c->k == k && c->p99_ms == p99_ms && c->rate_asked == rate;
}

static int wait_on(lp_adv_comp_t *c, lp_job_t *job) {
  if (c->nwaiters >= ADV_WAITERS_MAX) return -EBUSY;
  job->mq_next = NULL;
  if (c->waiters) c->waiters_last->mq_next = job;
  else c->waiters = job;
  c->waiters_last = job;
  c->nwaiters++;
  return 0;
}

/* The simulated advice of m for job: from the cache, onto an equal
 * computation, or a new one queued; 0 when the job waits, else an error
 * written into the job (answered by the caller). */
static int shape_advice(lp_proxy_t *p, lp_model_t *m, uint32_t k, double p99_ms, double rate_asked,
                        lp_job_t *job) {
  uint64_t now = mono_ns();
  const lp_lenhist_t *h = &m->lengths;
  for (size_t i = 0; i < ADV_CACHE; i++) {
    struct adv_cache_s *e = &adv_cache[i];
    if (e->m == m && e->hist == h->count && e->k == k && e->p99_ms == p99_ms && e->rate_asked == rate_asked &&
        now - e->at_ns < ADV_CACHE_NS && (double)h->total <= (double)e->observed * (1 + ADV_CACHE_GROWTH)) {
      render(&job->res_body, m->cfg->name, 1, (double)(now - e->at_ns) / 1e9, e->observed, NULL, 0, e->json);
      return 1;
    }
  }
  lp_advq_t *q = &p->advq;
  if (q->running && same_query(q->running, m, k, p99_ms, rate_asked))
    return wait_on(q->running, job) ? (job_error(job, 429, "advisor_busy",
                                                 "too many requests wait for this advice: retry"), -EBUSY) : 0;
  for (lp_adv_comp_t *c = q->head; c; c = c->next)
    if (same_query(c, m, k, p99_ms, rate_asked))
      return wait_on(c, job) ? (job_error(job, 429, "advisor_busy",
                                          "too many requests wait for this advice: retry"), -EBUSY) : 0;
  if (q->queued >= ADV_QUEUE_MAX) {
    char msg[128];
    snprintf(msg, sizeof(msg), "the shape advisor is busy (%d computations wait): retry", ADV_QUEUE_MAX);
    job_error(job, 429, "advisor_busy", msg);
    return -EBUSY;
  }
  if (m->cfg->ragged)
    return job_error(job, 409, "no_data", "a ragged model packs one flat lane: no shapes to choose"), -EINVAL;
  lp_adv_comp_t *c = calloc(1, sizeof(*c));
  if (!c) return job_error(job, 500, "out_of_memory", "proxy out of memory"), -ENOMEM;
  lp_sadv_params_t *prm = &c->prm;
  lp_bucket_set_init(&prm->current);
  int any_cost = 0;
  for (size_t s = 0; s < m->shapes.count; s++) {
    const lp_shape_t *sh = &m->shapes.shapes[s];
    if (!sh->lanes) continue;
    int at = lp_bucket_set_add(&prm->current, sh->lanes, sh->bucket);
    if (at < 0) continue;
    prm->current.shapes[at].cost_ns = shape_cost(m, (int)s);
    any_cost |= prm->current.shapes[at].cost_ns != 0;
  }
  const char *why = NULL;
  struct timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  /* the rate over the proxy's life: sequences admitted per second since start */
  double up_s = (double)wall.tv_sec + (double)wall.tv_nsec / 1e9 - p->start_time;
  double rate = rate_asked > 0 ? rate_asked : up_s > 0 ? (double)h->total / up_s : 0;
  size_t n = 0;
  for (uint32_t l = 1; l <= h->max; l++) n += h->count[l] != 0;
  if (!prm->current.count) why = "the model has no shape";
  else if (!any_cost) why = "no shape has a device time yet (learned or configured cost_ms)";
  else if (!(rate > 0)) why = "no request rate observed yet (give ?rate=)";
  else if (!n) why = "no lengths observed yet";
  if (why) {
    comp_free(c);
    return job_error(job, 409, "no_data", why), -ENODATA;
  }
  c->lens = malloc(n * sizeof(*c->lens));
  c->weight = malloc(n * sizeof(*c->weight));
  c->r = calloc(1, sizeof(*c->r));
  if (!c->lens || !c->weight || !c->r) {
    comp_free(c);
    return job_error(job, 500, "out_of_memory", "proxy out of memory"), -ENOMEM;
  }
  n = 0;
  for (uint32_t l = 1; l <= h->max; l++)
    if (h->count[l]) c->lens[n] = l, c->weight[n++] = (double)h->count[l];
  uint32_t devices = 1, backends = 0;
  for (size_t i = 0; i < m->nbackends; i++) {
    if (m->backends[i].retired) continue;
    backends++;
    if (backend_clock(m, i)->devices > devices) devices = (uint32_t)backend_clock(m, i)->devices;
  }
  prm->lens = c->lens;
  prm->weight = c->weight;
  prm->nlens = n;
  prm->k = k;
  prm->p99_ms = p99_ms;
  prm->rate = rate < 1e-3 ? 1e-3 : rate; /* the advisor's least */
  prm->backends = backends ? (backends > SIM_MAX_BACKENDS ? SIM_MAX_BACKENDS : backends) : 1;
  prm->devices = devices;
  prm->seed = 1;
  prm->short_requests = 600;
  prm->long_requests = 2400;
  prm->beam = 2;
  prm->confirm = k <= 3 ? 2 : 1; /* each size's best run long: keep that within the bound */
  prm->max_devices = 16;
  prm->clock = cpu_s;
  prm->budget_s = ADV_CPU_BUDGET_S;
  c->p = p;
  c->m = m;
  c->hist = h->count;
  snprintf(c->model, sizeof(c->model), "%s", m->cfg->name);
  c->k = k;
  c->p99_ms = p99_ms;
  c->rate_asked = rate_asked;
  c->observed = h->total;
  wait_on(c, job);
  if (q->tail) q->tail->next = c;
  else q->head = c;
  q->tail = c;
  q->queued++;
  adv_start_next(p);
  return 0;
}

/* A query parameter as a non-negative integer: def when absent, -1 malformed. */
static long query_uint(const char *url, size_t path_len, const char *name, long def) {
  const char *q = url + path_len;
  size_t n = strlen(name);
  while (*q) {
    q++; /* '?' or '&' */
    if (strncmp(q, name, n) == 0 && q[n] == '=') {
      char *end;
      long v = strtol(q + n + 1, &end, 10);
      if (end == q + n + 1 || (*end && *end != '&') || v < 0) return -1;
      return v;
    }
    q += strcspn(q, "&");
  }
  return def;
}

void lp__advice_page(lp_proxy_t *p, lp_job_t *job) {
  const char *url = job->admin_url, *query = url + job->admin_path_len;
  long k = query_uint(url, job->admin_path_len, "k", 3);
  double p99_ms = 0, rate = 0;
  int lat = query_double(query, "p99_ms", &p99_ms);
  int rated = query_double(query, "rate", &rate);
  lp_model_t *m = p->nmodels == 1 ? &p->models[0] : NULL;
  const char *mq = strstr(query, "model=");
  if (mq) {
    size_t n = strcspn(mq + 6, "&");
    m = NULL;
    for (size_t i = 0; i < p->nmodels; i++)
      if (strlen(p->models[i].cfg->name) == n && strncmp(p->models[i].cfg->name, mq + 6, n) == 0)
        m = &p->models[i];
  }
  char err[160];
  if (k < 1 || k > LP_ADVISE_MAX_K) {
    job_error(job, 400, "bad_parameter", "k must be 1..8");
  } else if (lat < 0 || (lat && !(p99_ms > 0 && p99_ms <= 3600000))) {
    job_error(job, 400, "bad_parameter", "p99_ms must be a number of milliseconds in (0, 3600000]");
  } else if (rated < 0 || (rated && !(rate >= 1e-3 && rate <= 1e9)) || (rated && !lat)) {
    job_error(job, 400, "bad_parameter", "rate must be requests/s in [0.001, 1e9], with p99_ms");
  } else if (!m) {
    job_error(job, 404, "unknown_model", "name a model: ?model=NAME");
  } else if (lat) {
    if (shape_advice(p, m, (uint32_t)k, p99_ms, rate, job) == 0) return; /* answered when computed */
  } else if (lp__render_advice(p, m, (uint32_t)k, &job->res_body, err, sizeof(err))) {
    job_error(job, 409, "no_data", err);
  }
  job_done(p, job);
}

void lp__advice_free(lp_proxy_t *p) {
  /* a computation still running (the drain's last resort) is the pool's: its
   * memory goes with the process */
  lp_advq_t *q = &p->advq;
  while (q->head) {
    lp_adv_comp_t *c = q->head;
    q->head = c->next;
    while (c->waiters) {
      lp_job_t *job = c->waiters;
      c->waiters = job->mq_next;
      lp__job_release(job);
    }
    comp_free(c);
  }
  q->tail = NULL;
  q->queued = 0;
}

/* Query parameter value as an unsigned integer; def when absent. -1 if bad. */
