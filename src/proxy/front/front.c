/* The front loops: each accepts, reads, parses and answers on its own loop
 * (its own listener on the shared port, SO_REUSEPORT), and hands parsed jobs
 * to the one scheduler (the proxy's loop: models, device clocks, upstream).
 * With one thread the front is on the scheduler's loop and calls it directly;
 * with several, jobs go over and come back through mailboxes, one wake-up per
 * burst, and nothing of a connection is touched off its front's thread. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lanepack/log.h"
#include "lanepack/v2.h"
#include "front/front.h"

/* Pages (/metrics and the rest) rendered in one loop turn of a front. A page
 * costs far more than an inference's answer (/metrics: hundreds of
 * microseconds); a client pipelining max_pipeline of them got them all back in
 * one hand-back, and rendering them in one turn held every other connection of
 * the front, and every batch it sends, for that long (test page-flood: an
 * inference beside the flood went from 20 ms to 170 ms). A few a turn keeps a
 * turn short; the flood waits on itself. */
#define LP_FRONT_PAGES_PER_TURN 4

/* The ceiling of any answer a front's upstream reads: the scheduler's (1 GiB,
 * proxy.c); each batch's own max_answer is the real bound. */
#define LP_FRONT_ANSWER_MAX (1ull << 30)


/* A job (or page) back from the scheduler: its client answered if still there. */
static void front_job_back(lp_front_t *f, lp_job_t *job) {
  lp_http_req_t *req = job->front_req;
  if (req) {
    req->app = NULL;
    job->front_req = NULL;
    if (job->admin_route) lp__front_page_back(f, job, req);
    else if (lp__job_deliver(f, job, req)) return; /* written a slice a turn: the reference is the answer's */
  }
  lp__job_release(job); /* without a cancel sent, the only reference: freed at once */
}

static void on_pages_soon(uv_idle_t *h);

/* Renders at most LP_FRONT_PAGES_PER_TURN of the pages waiting (all of them
 * when all is set: the front is stopping), in the order they came back. */
static void render_pages_back(lp_front_t *f, int all) {
  for (unsigned n = 0; f->pages_back && (all || n < LP_FRONT_PAGES_PER_TURN); n++) {
    lp_job_t *job = f->pages_back;
    f->pages_back = job->mq_next;
    front_job_back(f, job);
  }
  if (!f->pages_back) {
    f->pages_back_last = NULL;
    uv_idle_stop(&f->pages_soon);
  } else {
    uv_idle_start(&f->pages_soon, on_pages_soon);
  }
}

static void on_pages_soon(uv_idle_t *h) { render_pages_back(container_of(h, lp_front_t, pages_soon), 0); }

static void on_front_tick(uv_timer_t *t) {
  lp_front_t *f = container_of(t, lp_front_t, tick);
  lp__alog_flush(&f->alog);
  lp__front_publish(f);
  if (__atomic_exchange_n(&f->trim_due, 0, __ATOMIC_RELAXED)) lp__trim_arena();
}

/* One of the front's servers is closed and freed: its pointer goes at once,
 * not when the other one is done too (the tick, a reload and /metrics would
 * touch the freed server while the other drains). The last one ends the
 * front's drain: with one thread, the proxy's. */
static void front_servers_closed(lp_front_t *f);

static void server_gone(lp_front_t *f) {
  if (--f->open_servers > 0) return;
  front_servers_closed(f);
}

static void on_httpd_closed(void *arg) {
  lp_front_t *f = arg;
  f->httpd = NULL;
  server_gone(f);
}

static void on_admin_closed(void *arg) {
  lp_front_t *f = arg;
  f->admin = NULL;
  server_gone(f);
}

static void front_servers_closed(lp_front_t *f) {
  lp__front_publish(f);
  lp__alog_flush(&f->alog);
  lp_ctl_t *c = calloc(1, sizeof(*c));
  if (!c) {
    lp_log(LP_LOG_ERROR, "front: out of memory telling its drain", NULL);
    return;
  }
  c->kind = LP_CTL_CLOSED;
  c->front = f;
  lp__mbox_push_ctl(f->shared->sched_inbox, c);
}

static void front_close_servers(lp_front_t *f) {
  if (f->closing) return;
  f->closing = 1;
  f->open_servers = (f->httpd != NULL) + (f->admin != NULL);
  if (!f->open_servers) {
    front_servers_closed(f);
    return;
  }
  if (f->httpd) lp_httpd_close(f->httpd, on_httpd_closed, f);
  if (f->admin) lp_httpd_close(f->admin, on_admin_closed, f);
}

static void front_reconf(lp_front_t *f, lp_ctl_t *c) {
  if (c->cfg) {
    lp_httpd_config_t hc;
    lp__httpd_limits(c->cfg, &hc);
    if (f->httpd) lp_httpd_set_limits(f->httpd, &hc);
    if (f->admin) lp_httpd_set_limits(f->admin, &hc);
    free((void *)f->cfg);
    f->cfg = c->cfg;
    c->cfg = NULL;
  }
  if (c->set_tokens) {
    lp_config_free_tokens(f->tokens, f->ntokens);
    f->tokens = c->tokens;
    f->ntokens = c->ntokens;
    c->tokens = NULL;
    c->ntokens = 0;
  }
  if (c->access_fd != -2) lp__alog_set_fd(&f->alog, c->access_fd);
}

static void on_front_inbox(lp_wake_t *w) {
  lp_front_t *f = w->data;
  lp_job_t *jobs, *cancels;
  lp_ctl_t *ctls;
  lp_batch_t *batches;
  lp__mbox_take(&f->inbox, &jobs, &cancels, &ctls, &batches);
  lp__front_send_batches(f, batches);
  while (jobs) {
    lp_job_t *job = jobs;
    jobs = job->mq_next; /* before: the job may be freed */
    if (!job->admin_route || !job->front_req) {
      front_job_back(f, job);
      continue;
    }
    job->mq_next = NULL; /* a page to render: in turn, with the others waiting */
    if (f->pages_back) f->pages_back_last->mq_next = job;
    else f->pages_back = job;
    f->pages_back_last = job;
  }
  if (f->pages_back && !uv_is_active((uv_handle_t *)&f->pages_soon)) render_pages_back(f, 0);
  while (ctls) {
    lp_ctl_t *c = ctls;
    ctls = c->next;
    if (c->kind == LP_CTL_RECONF) {
      front_reconf(f, c);
    } else if (c->kind == LP_CTL_DRAIN) {
      front_close_servers(f);
    } else if (c->kind == LP_CTL_CANCEL) {
      if (f->up) lp_upstream_cancel_all(f->up); /* each batch comes back cancelled */
    } else if (c->kind == LP_CTL_STOP) {
      /* the listeners are closed (drained) or the process gives up on them;
       * transfers still running end cancelled, their batches pushed back for
       * the scheduler to free (lp__fronts_stop) */
      if (f->up) lp_upstream_close(f->up);
      f->up = NULL;
      render_pages_back(f, 1); /* every page waiting is answered (or dropped: its client left) */
      lp__front_write_answers(f, 1); /* and every answer being written, whole */
      lp__front_flush(f);
      uv_timer_stop(&f->tick);
      uv_close((uv_handle_t *)&f->tick, NULL);
      uv_close((uv_handle_t *)&f->flush, NULL);
      uv_close((uv_handle_t *)&f->flush_soon, NULL);
      uv_close((uv_handle_t *)&f->pages_soon, NULL);
      uv_close((uv_handle_t *)&f->answers_soon, NULL);
      lp__mbox_close(&f->inbox, NULL);
      lp__tokbox_close(&f->tokbox);
      if (f->httpd || f->admin) uv_stop(f->loop); /* last resort: connections left open */
    }
    free(c->cfg);
    lp_config_free_tokens(c->tokens, c->ntokens);
    free(c);
  }
}

static void front_main(void *arg) {
  lp_front_t *f = arg;
  char name[16]; /* the kernel's limit, with its NUL */
  snprintf(name, sizeof(name), "lp-front-%u", f->index);
  prctl(PR_SET_NAME, name, 0, 0, 0); /* top -H and /proc/PID/task/TID/comm show it */
  uv_run(f->loop, UV_RUN_DEFAULT);
}

static lp_ctl_t *reconf_msg(lp_proxy_t *p) {
  lp_ctl_t *c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->kind = LP_CTL_RECONF;
  c->access_fd = -2;
  c->cfg = malloc(sizeof(*c->cfg));
  c->set_tokens = 1;
  if (c->cfg) *c->cfg = p->cfg;
  if (c->cfg && p->ntokens && (c->tokens = calloc(p->ntokens, sizeof(char *))) != NULL) {
    c->ntokens = p->ntokens;
    for (size_t i = 0; i < p->ntokens && c->tokens; i++)
      if ((c->tokens[i] = strdup(p->tokens[i])) == NULL) {
        lp_config_free_tokens(c->tokens, c->ntokens);
        c->tokens = NULL;
      }
  }
  if (!c->cfg || (p->ntokens && !c->tokens)) {
    free(c->cfg);
    free(c);
    return NULL;
  }
  return c;
}

void lp__fronts_reconfigure(lp_proxy_t *p) {
  for (unsigned i = 0; i < p->shared.nfronts; i++) {
    lp_ctl_t *c = reconf_msg(p);
    if (!c) {
      lp_log(LP_LOG_ERROR, "reload: out of memory: a front keeps its old configuration", "\"thread\": %u", i);
      continue;
    }
    lp__mbox_push_ctl(&p->shared.fronts[i].inbox, c);
  }
}

void lp__fronts_drain(lp_proxy_t *p) {
  for (unsigned i = 0; i < p->shared.nfronts; i++) {
    lp_ctl_t *c = calloc(1, sizeof(*c));
    if (!c) continue; /* that front closes at the stop */
    c->kind = LP_CTL_DRAIN;
    lp__mbox_push_ctl(&p->shared.fronts[i].inbox, c);
  }
}

void lp__fronts_cancel_transfers(lp_proxy_t *p) {
  for (unsigned i = 0; i < p->shared.nfronts; i++) {
    lp_ctl_t *c = calloc(1, sizeof(*c));
    if (!c) continue; /* that front's transfers end at the stop */
    c->kind = LP_CTL_CANCEL;
    lp__mbox_push_ctl(&p->shared.fronts[i].inbox, c);
  }
}

/* ---- life ---- */

static void front_init(lp_front_t *f, lp_proxy_t *p, unsigned i) {
  size_t nb;
  const double *bounds = lp__latency_bounds(&nb);
  f->shared = &p->shared;
  f->index = i;
  f->cfg = &p->cfg;
  lp_buf_init(&f->scratch);
  lp_buf_init(&f->vec_text);
  lp_hist_init(&f->t_queue, bounds, nb);
  lp_hist_init(&f->t_backend, bounds, nb);
  lp_hist_init(&f->t_total, bounds, nb);
  f->alog.fd = -1;
}

/* The address of the front's listener: the configured one, with the port the
 * first front was given when it asked for any (":0"). */
static void listen_addr(const char *cfg_addr, int port, char *out, size_t n) {
  const char *colon = strrchr(cfg_addr, ':');
  if (!colon || port <= 0) {
    snprintf(out, n, "%s", cfg_addr);
    return;
  }
  snprintf(out, n, "%.*s:%d", (int)(colon - cfg_addr), cfg_addr, port);
}

static int front_listen(lp_front_t *f, unsigned n, uint64_t id_base, int *port) {
  const lp_config_t *cfg = f->cfg; /* its own copy, taken before */
  lp_httpd_config_t hc;
  lp__httpd_limits(cfg, &hc);
  hc.shared = &f->shared->client_counts; /* the limits are the process's, not a front's share */
  hc.on_request = lp__on_request;
  hc.on_cancel = lp__on_cancel;
  hc.on_reject = lp__on_reject;
  hc.ud = f;
  hc.reuseport = n > 1;
  hc.id_base = id_base;
  hc.id_shard = f->index;
  hc.id_shards = n;
  f->httpd = lp_httpd_new(f->loop, &hc);
  if (!f->httpd) return -ENOMEM;
  char addr[LP_URL_MAX + 16];
  listen_addr(cfg->listen, n > 1 ? *port : 0, addr, sizeof(addr));
  int rc = lp_httpd_listen(f->httpd, addr, n > 1 ? NULL : port);
  if (rc) return rc;
  if (f->index == 0 && cfg->admin_listen[0]) {
    hc.on_request = lp__on_admin_request;
    hc.shared = NULL; /* its own: operators get in when clients fill the limit */
    hc.reuseport = 0;
    hc.id_base = 0; /* its own random base: not the fronts' shared sequence */
    hc.id_shard = hc.id_shards = 0;
    f->admin = lp_httpd_new(f->loop, &hc);
    if (!f->admin) return -ENOMEM;
    int aport;
    if ((rc = lp_httpd_listen(f->admin, cfg->admin_listen, &aport))) return rc;
    lp_log(LP_LOG_INFO, "admin listening", "\"port\": %d", aport);
  }
  return 0;
}

/* Listeners bound with SO_REUSEPORT join any group already on the port (an
 * old lanepack left running, under the same user): first a plain bind, as one
 * thread's listener makes, must find the port free; it also picks the port
 * when any was asked for. 0 with *port, or a negative libuv error. */
static int claim_port(const char *addr, int *port) {
  struct sockaddr_storage ss;
  int rc = lp_parse_hostport(addr, &ss);
  if (rc) return rc;
  socklen_t len = ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  if (fd < 0) return uv_translate_sys_error(errno);
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
      bind(fd, (struct sockaddr *)&ss, len) < 0 || getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
    rc = uv_translate_sys_error(errno);
    close(fd);
    return rc;
  }
  close(fd);
  *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                         : ((struct sockaddr_in *)&ss)->sin_port);
  return 0;
}

int lp__fronts_start(lp_proxy_t *p, int *port) {
  unsigned n = lp_config_threads(&p->cfg);
  p->shared.fronts = calloc(n, sizeof(lp_front_t));
  p->sfronts = calloc(n, sizeof(lp_sched_front_t));
  if (!p->shared.fronts || !p->sfronts) return -ENOMEM;
  p->shared.nfronts = n;
  p->shared.sched_inbox = &p->inbox;
  p->shared.models = p->models;
  for (unsigned i = 0; i < n; i++) front_init(&p->shared.fronts[i], p, i);
  int afd = -1, rc;
  if (p->cfg.access_log[0]) {
    char err[300];
    if (lp__alog_open_path(p->cfg.access_log, &afd, err, sizeof(err))) {
      lp_log(LP_LOG_ERROR, "access log", "\"error\": \"%s\"", err);
      return -EINVAL;
    }
  }
  uint64_t id_base = (uv_hrtime() * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)uv_os_getpid() << 32);
  if ((rc = lp__mbox_init(&p->inbox, p->loop, lp__sched_on_inbox, p)) != 0) return rc;
  uv_check_init(p->loop, &p->flush);
  uv_check_start(&p->flush, lp__sched_on_flush);
  uv_unref((uv_handle_t *)&p->flush);
  uv_idle_init(p->loop, &p->flush_soon);
  int bound = 0;
  if ((rc = claim_port(p->cfg.listen, &bound)) != 0) return rc;
  for (unsigned i = 0; i < n; i++) {
    lp_front_t *f = &p->shared.fronts[i];
    f->cfg = NULL; /* its own copy, from the message */
    lp_ctl_t *c = reconf_msg(p); /* its own configuration and tokens, taken at once */
    if (!c) return -ENOMEM;
    front_reconf(f, c);
    free(c);
    int d = -1; /* as a reload gives it */
    if ((rc = lp__alog_front_fd(p->cfg.access_log, afd, &d)) != 0) {
      lp_log(LP_LOG_ERROR, "access log", "\"error\": \"%s\"", strerror(-rc));
      return rc;
    }
    lp__alog_set_fd(&f->alog, d);
    if ((rc = uv_loop_init(&f->own_loop)) != 0) return rc;
    f->loop = &f->own_loop;
    if ((rc = lp__mbox_init(&f->inbox, f->loop, on_front_inbox, f)) != 0) return rc;
    p->sfronts[i].inbox = &f->inbox; /* where the scheduler's hand-backs go */
    if ((rc = lp__front_tok_init(f)) != 0) return rc;
    /* its batches' answers are bounded by each batch's own max_answer */
    if (!(f->up = lp_upstream_new(f->loop, LP_FRONT_ANSWER_MAX))) return -ENOMEM;
    uv_timer_init(f->loop, &f->tick);
    uv_timer_start(&f->tick, on_front_tick, 250, 250);
    uv_check_init(f->loop, &f->flush);
    uv_check_start(&f->flush, lp__front_on_flush);
    uv_idle_init(f->loop, &f->flush_soon);
    uv_idle_init(f->loop, &f->pages_soon);
    uv_idle_init(f->loop, &f->answers_soon);
    if ((rc = front_listen(f, n, id_base, &bound)) != 0) return rc;
  }
  if (afd >= 0 && afd != STDERR_FILENO) close(afd);
  *port = bound;
  p->fronts_open = n;
  for (unsigned i = 0; i < n; i++)
    if ((rc = uv_thread_create(&p->shared.fronts[i].thread, front_main, &p->shared.fronts[i])) != 0) return rc;
  lp_log(LP_LOG_INFO, "front threads", "\"threads\": %u", n);
  return 0;
}

static void front_free(lp_front_t *f) {
  lp_buf_free(&f->scratch);
  lp_buf_free(&f->vec_text);
  free(f->vec);
  free(f->enc);
  free(f->tok_scratch);
  free(f->len_scratch);
  lp__tokbox_destroy(&f->tokbox); /* the workers are stopped: jobs left in it are nobody's */
  lp__alog_close(&f->alog);
  free((void *)f->cfg);
  lp_config_free_tokens(f->tokens, f->ntokens);
}

void lp__fronts_stop(lp_proxy_t *p) {
  if (!p->shared.fronts) return;
  for (unsigned i = 0; i < p->shared.nfronts; i++) {
    lp_ctl_t *c = calloc(1, sizeof(*c));
    if (!c) abort(); /* no way left to stop the thread */
    c->kind = LP_CTL_STOP;
    lp__mbox_push_ctl(&p->shared.fronts[i].inbox, c);
  }
  int stranded = 0;
  for (unsigned i = 0; i < p->shared.nfronts; i++) {
    lp_front_t *f = &p->shared.fronts[i];
    uv_thread_join(&f->thread);
    if (!f->httpd && !f->admin) { /* drained: every handle is closed */
      uv_loop_close(f->loop);
      lp__mbox_destroy(&f->inbox);
    } else {
      stranded = 1;
    }
  }
  /* batches the fronts handed back since the scheduler's loop last ran
   * (the stop cancelled their transfers), and any the scheduler handed out
   * after its last flush: their jobs' references go */
  for (lp_batch_t *b = lp__mbox_take_batches(&p->inbox), *n; b; b = n) {
    n = b->hand_next;
    lp__batch_drop(b);
  }
  for (unsigned i = 0; p->sfronts && i < p->shared.nfronts; i++) {
    for (lp_batch_t *b = p->sfronts[i].out, *n; b; b = n) {
      n = b->hand_next;
      lp__batch_drop(b);
    }
  }
  free(p->sfronts); /* the scheduler's loop has stopped: nothing hands back any more */
  p->sfronts = NULL;
  lp__mbox_close(&p->inbox, NULL);
  lp__mbox_destroy(&p->inbox); /* the fronts, its only senders, are joined */
  /* the last resort left connections open on a front's loop, which lives in
   * the front: the process is ending, so the fronts stay (reachable, as one
   * thread's connections on the default loop are) rather than freed under
   * them */
  if (stranded) {
    for (unsigned i = 0; i < p->shared.nfronts; i++) lp__alog_flush(&p->shared.fronts[i].alog);
    return;
  }
  for (unsigned i = 0; i < p->shared.nfronts; i++) front_free(&p->shared.fronts[i]);
  free(p->shared.fronts);
  p->shared.fronts = NULL;
}

/* fine around typical batch times (a few ms to tens of ms), coarse past */
static const double latency_bounds[] = {0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008,
                                        0.01, 0.012, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
                                        0.1, 0.15, 0.2, 0.3, 0.5, 1, 2, 5, 10, 30};

void lp__httpd_limits(const lp_config_t *cfg, lp_httpd_config_t *hc) {
  lp_httpd_config_default(hc);
  hc->max_header_bytes = cfg->max_header_bytes;
  hc->max_body_bytes = cfg->max_body_bytes;
  hc->max_connections = cfg->max_connections;
  hc->max_pipeline = cfg->max_pipeline;
  hc->max_unsent_bytes = cfg->max_unsent_bytes;
  hc->max_unsent_bytes_total = cfg->max_unsent_bytes_total;
  hc->max_body_bytes_in_flight = lp_config_body_budget(cfg);
  hc->idle_timeout_ms = cfg->idle_timeout_ms;
  hc->max_requests_per_connection = cfg->max_requests_per_connection;
  hc->request_timeout_ms = cfg->request_timeout_ms;
}

/* The latency histograms' bounds, for the fronts. */
const double *lp__latency_bounds(size_t *n) {
  *n = sizeof(latency_bounds) / sizeof(latency_bounds[0]);
  return latency_bounds;
}
