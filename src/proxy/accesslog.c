/* The access log: one JSON line per answered request (inference always when
 * on, successes sampled), written through a buffer flushed once a second, so
 * that logging costs no system call per request; to a file or, for "-", to
 * standard error (its own buffered stream on a copy of the descriptor). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lanepack/log.h"
#include "proxy.h"

#define ACCESS_BUF (64 * 1024)

int lp__access_log_open(lp_proxy_t *p, const char *path, char *err, size_t errlen) {
  FILE *f = NULL;
  if (!path[0]) {
    /* off */
  } else if (strcmp(path, "-") == 0) {
    /* stderr itself is unbuffered (a write per line): a stream of our own */
    int fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
    if (fd < 0 || (f = fdopen(fd, "a")) == NULL) {
      int e = errno;
      if (fd >= 0) close(fd);
      snprintf(err, errlen, "access_log: cannot write to standard error: %s", strerror(e));
      return -e;
    }
  } else if ((f = fopen(path, "ae")) == NULL) {
    snprintf(err, errlen, "access_log: cannot open '%s': %s", path, strerror(errno));
    return -errno;
  }
  if (f) setvbuf(f, NULL, _IOFBF, ACCESS_BUF);
  lp__access_log_close(p);
  p->access = f;
  return 0;
}

void lp__access_log_close(lp_proxy_t *p) {
  lp_buf_free(&p->access_line);
  if (!p->access) return;
  fclose(p->access); /* flushes */
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

static void put_str(lp_buf_t *b, const char *s, size_t n) { lp_buf_json_str(b, s, n); }

void lp__access_log(lp_proxy_t *p, const lp_http_req_t *req, int status, const lp_job_t *job) {
  if (!p->access || !req) return;
  if (status < 400 && !sampled(p)) return;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char when[48], peer[80];
  size_t wl = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(when + wl, sizeof(when) - wl, ".%03ldZ", ts.tv_nsec / 1000000);
  lp_http_peer(req, peer, sizeof(peer));
  static const char *const methods[] = {"DELETE", "GET", "HEAD", "POST", "PUT"};
  /* -1: refused by the server before the method was read */
  const char *method = req->method < 0 ? "-" : req->method <= 4 ? methods[req->method] : "OTHER";
  lp_buf_t *b = &p->access_line;
  lp_buf_reset(b);
  lp_buf_puts(b, "{\"time\": ");
  put_str(b, when, strlen(when));
  lp_buf_puts(b, ", \"client\": ");
  put_str(b, peer, strlen(peer));
  lp_buf_puts(b, ", \"method\": ");
  put_str(b, method, strlen(method));
  lp_buf_puts(b, ", \"path\": ");
  put_str(b, req->url, req->path_len);
  lp_buf_puts(b, ", \"status\": ");
  lp_buf_u64(b, (uint64_t)status);
  lp_buf_puts(b, ", \"request_id\": ");
  put_str(b, req->request_id, strlen(req->request_id));
  if (job) {
    uint64_t tokens = 0, queue_ns, backend_ns;
    for (uint32_t i = 0; i < job->nseq; i++) tokens += job->seqs[i].len;
    lp__job_times(job, &queue_ns, &backend_ns);
    lp_buf_puts(b, ", \"model\": ");
    put_str(b, job->model->cfg->name, strlen(job->model->cfg->name));
    lp_buf_puts(b, ", \"sequences\": ");
    lp_buf_u64(b, job->nseq);
    lp_buf_puts(b, ", \"tokens\": ");
    lp_buf_u64(b, tokens);
    lp_buf_puts(b, ", \"batches\": [");
    uint64_t last = 0;
    int n = 0;
    for (uint32_t i = 0; i < job->nseq && n < 16; i++) {
      uint64_t id = job->seqs[i].batch_id;
      if (!id || id == last) continue;
      if (n++) lp_buf_puts(b, ", ");
      lp_buf_u64(b, id);
      last = id;
    }
    lp_buf_puts(b, "], \"queue_ms\": ");
    lp__put_ms(b, queue_ns);
    lp_buf_puts(b, ", \"backend_ms\": ");
    lp__put_ms(b, backend_ns);
  }
  lp_buf_puts(b, ", \"total_ms\": ");
  lp__put_ms(b, uv_hrtime() - req->start_ns);
  lp_buf_puts(b, "}\n");
  if (b->oom) return;
  /* a line that would not fit flushes the buffer first, so that every write
   * holds whole lines (standard error is shared with the process log) */
  if (__fpending(p->access) + b->len > ACCESS_BUF) fflush(p->access);
  fwrite(b->data, 1, b->len, p->access);
}
