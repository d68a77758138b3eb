/* The access log: one JSON line per answered request (inference always when
 * on, successes sampled), written through a buffer flushed once a second, so
 * that logging costs no system call per request. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "lanepack/log.h"
#include "proxy.h"

int lp__access_log_open(lp_proxy_t *p, const char *path, char *err, size_t errlen) {
  FILE *f = NULL;
  if (!path[0]) {
    /* off */
  } else if (strcmp(path, "-") == 0) {
    f = stderr;
  } else if ((f = fopen(path, "ae")) == NULL) {
    snprintf(err, errlen, "access_log: cannot open '%s': %s", path, strerror(errno));
    return -errno;
  } else {
    setvbuf(f, NULL, _IOFBF, 64 * 1024);
  }
  lp__access_log_close(p);
  p->access = f;
  return 0;
}

void lp__access_log_close(lp_proxy_t *p) {
  if (!p->access) return;
  fflush(p->access);
  if (p->access != stderr) fclose(p->access);
  p->access = NULL;
}

void lp__access_log_flush(lp_proxy_t *p) {
  if (p->access) fflush(p->access);
}

/* Successes are kept at the configured share, evenly: the n-th is logged when
 * the running share crosses a whole number. */
static int sampled(lp_proxy_t *p) {
  double r = p->cfg.access_log_sample;
  if (r >= 1) return 1;
  if (r <= 0) return 0;
  p->access_seen++;
  uint64_t before = (uint64_t)((double)(p->access_seen - 1) * r);
  uint64_t after = (uint64_t)((double)p->access_seen * r);
  return after > before;
}

void lp__access_log(lp_proxy_t *p, const lp_http_req_t *req, int status, const lp_job_t *job) {
  if (!p->access || !req) return;
  if (status < 400 && !sampled(p)) return;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char when[40], peer[80], path[160];
  strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
  lp_http_peer(req, peer, sizeof(peer));
  /* the path as JSON: control characters, quotes and backslashes escaped */
  size_t k = 0;
  for (size_t i = 0; i < req->path_len && k + 7 < sizeof(path); i++) {
    unsigned char ch = (unsigned char)req->url[i];
    if (ch == '"' || ch == '\\') {
      path[k++] = '\\';
      path[k++] = (char)ch;
    } else if (ch < 0x20 || ch >= 0x7f) {
      k += (size_t)snprintf(path + k, sizeof(path) - k, "\\u%04x", ch);
    } else {
      path[k++] = (char)ch;
    }
  }
  path[k] = '\0';
  static const char *const methods[] = {"DELETE", "GET", "HEAD", "POST", "PUT"};
  const char *method = req->method >= 0 && req->method <= 4 ? methods[req->method] : "OTHER";
  FILE *f = p->access;
  fprintf(f, "{\"time\": \"%s.%03ldZ\", \"client\": \"%s\", \"method\": \"%s\", \"path\": \"%s\", "
             "\"status\": %d, \"request_id\": \"%s\"",
          when, ts.tv_nsec / 1000000, peer, method, path, status, req->request_id);
  uint64_t now = uv_hrtime();
  double total_ms = (double)(now - req->start_ns) / 1e6;
  if (job) {
    uint64_t tokens = 0, queue_ns = 0, backend_ns = 0;
    for (uint32_t i = 0; i < job->nseq; i++) {
      const lp_seq_t *s = &job->seqs[i];
      tokens += s->len;
      if (s->dispatch_ns) {
        if (s->dispatch_ns - job->arrive_ns > queue_ns) queue_ns = s->dispatch_ns - job->arrive_ns;
        if (s->done_ns > s->dispatch_ns && s->done_ns - s->dispatch_ns > backend_ns)
          backend_ns = s->done_ns - s->dispatch_ns;
      }
    }
    fprintf(f, ", \"model\": \"%s\", \"sequences\": %u, \"tokens\": %llu, \"batches\": [", job->model->cfg->name,
            job->nseq, (unsigned long long)tokens);
    uint64_t last = 0;
    int n = 0;
    for (uint32_t i = 0; i < job->nseq && n < 16; i++) {
      uint64_t b = job->seqs[i].batch_id;
      if (!b || b == last) continue;
      fprintf(f, "%s%llu", n++ ? ", " : "", (unsigned long long)b);
      last = b;
    }
    fprintf(f, "], \"queue_ms\": %.3f, \"backend_ms\": %.3f", (double)queue_ns / 1e6,
            (double)backend_ns / 1e6);
  }
  fprintf(f, ", \"total_ms\": %.3f}\n", total_ms);
}
