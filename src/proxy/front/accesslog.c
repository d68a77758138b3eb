/* The access log: one JSON line per answered request (inference always when
 * on, successes sampled). Whole lines gather in a buffer written once a second
 * (or when 64 KiB have gathered), so that logging costs no system call per
 * request, to a file or, for "-", to standard error (shared with the process
 * log: every write holds whole lines). A line is written whole or
 * not at all: when the disk fills, the part of a line that got out is cut back
 * and the lines lost are counted (lanepack_access_log_dropped_lines_total).
 * SIGHUP reopens the file (logrotate's postrotate). */
#include <errno.h>
#include <stdlib.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lanepack/log.h"
#include "front/front.h"

#define LP_ACCESS_BUF (64 * 1024)
/* At exit or a change of file, lines still owed to a full pipe get this long
 * (polled in these steps) for the reader to take them: long enough for a
 * collector that is merely busy, short enough not to hold a drain up. */
#define LP_ACCESS_LAST_WAIT_MS 1000
#define LP_ACCESS_LAST_POLL_MS 50

int lp__alog_open_path(const char *path, int *out, char *err, size_t errlen) {
  int fd = -1;
  if (!path[0]) {
    /* off */
  } else if (strcmp(path, "-") == 0) {
    fd = STDERR_FILENO;
  } else if ((fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666)) < 0) {
    int e = errno;
    snprintf(err, errlen, "access_log: cannot open '%s': %s", path, strerror(e));
    return -e;
  }
  *out = fd;
  return 0;
}

void lp__alog_set_fd(lp_alog_t *a, int fd) {
  struct stat was, now;
  if (a->on && fd >= 0 && lp__alog_flush(a) && fstat(a->fd, &was) == 0 && fstat(fd, &now) == 0 &&
      was.st_dev == now.st_dev && was.st_ino == now.st_ino) {
    /* "-" again, on a pipe that is behind: what it is owed follows on the new
     * descriptor, without a wait on the front's loop */
    if (a->fd != fd && a->fd != STDERR_FILENO) close(a->fd);
    a->fd = fd;
    return;
  }
  lp__alog_close(a); /* what the old file was owed goes there (before a rotation) */
  a->fd = fd;
  a->on = fd >= 0;
}

int lp__alog_front_fd(const char *path, int checked, int *out) {
  /* Opened anew, not duplicated: every descriptor a front closes is then made
   * by a call ThreadSanitizer follows (fcntl's F_DUPFD is not, and libuv closes
   * sockets by a raw system call: a number reused by a duplicate looked like
   * another front's socket, and its close a race). "-" is standard error
   * itself, which no front closes. */
  *out = checked;
  if (checked < 0 || checked == STDERR_FILENO) return 0;
  if ((*out = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666)) < 0) return -errno;
  return 0;
}

int lp__access_log_open(lp_proxy_t *p, const char *path, char *err, size_t errlen) {
  int fd = -1;
  int rc = lp__alog_open_path(path, &fd, err, errlen);
  if (rc) return rc;
  /* each front writes whole lines to its own descriptor of the file */
  for (unsigned i = 0; i < p->shared.nfronts; i++) {
    lp_ctl_t *c = calloc(1, sizeof(*c));
    int d = -1;
    int e = c ? lp__alog_front_fd(path, fd, &d) : -ENOMEM;
    if (e) {
      free(c);
      lp_log(LP_LOG_ERROR, "access log: a front keeps its old file", "\"thread\": %u, \"error\": \"%s\"", i,
             strerror(-e));
      continue;
    }
    c->kind = LP_CTL_RECONF;
    c->access_fd = d;
    lp__mbox_push_ctl(&p->shared.fronts[i].inbox, c);
  }
  if (fd >= 0 && fd != STDERR_FILENO) close(fd);
  return 0;
}

/* Writes len bytes of whole lines. A pipe or socket that is full for now
 * (EAGAIN: a log collector behind) loses nothing: what did not go out, the
 * rest of a line cut in the middle first, is returned as owed (its length,
 * from *rest) and written next time. On any other failure the part of a line
 * that got out is taken back (the file is cut to the last whole line), and
 * every line not written is counted as dropped: a full disk loses lines,
 * never leaves half of one. Where nothing can be cut back, the rest of that
 * line is still owed, so that it is never glued to the next one. */
static size_t write_lines(lp_alog_t *p, const char *data, size_t len, size_t *rest) {
  size_t off = 0, whole = 0, owed = 0;
  int e = 0;
  /* one writer at a time: the fronts' descriptors of the file share its offset
   * (the cut-back below must not take another's lines), and on a pipe ("-"
   * behind a collector) a write taken in pieces must not be cut into */
  lp_log_lock();
  while (off < len) {
    ssize_t n = write(p->fd, data + off, len - off);
    if (n > 0) {
      off += (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      e = n < 0 ? errno : EIO;
      break;
    }
  }
  if (off < len && (e == EAGAIN || e == EWOULDBLOCK)) {
    lp_log_unlock();
    *rest = off;
    return len - off; /* the lines stay, in order, for the next write */
  }
  if (off < len) {
    whole = off;
    while (whole > 0 && data[whole - 1] != '\n') whole--;
    if (whole < off) {
      off_t at = lseek(p->fd, 0, SEEK_CUR); /* O_APPEND: just past what went out */
      if (at < (off_t)(off - whole) || ftruncate(p->fd, at - (off_t)(off - whole)) != 0) {
        /* cannot cut it back (a pipe, say): the rest of it follows in the next write */
        const char *nl = memchr(data + off, '\n', len - off);
        owed = nl ? (size_t)(nl + 1 - data) - off : len - off;
        *rest = off;
        whole = off + owed;
      }
    }
  }
  lp_log_unlock();
  if (off == len) {
    if (p->failing) lp_log(LP_LOG_INFO, "access log written again", NULL);
    p->failing = 0;
    return 0;
  }
  uint64_t lost = 0;
  for (size_t i = whole; i < len; i++) lost += data[i] == '\n';
  LP_RELAXED_ADD(p->dropped, lost);
  if (!p->failing)
    lp_log(LP_LOG_WARN, "access log write failed: lines dropped", "\"error\": \"%s\", \"lines\": %llu",
           strerror(e), (unsigned long long)lost);
  p->failing = 1;
  return owed;
}

size_t lp__alog_flush(lp_alog_t *a) {
  size_t rest = 0, owed = 0;
  if (a->on && a->buf.len) owed = write_lines(a, a->buf.data, a->buf.len, &rest);
  lp_buf_reset(&a->buf);
  if (owed) { /* what is owed goes first next time */
    memmove(a->buf.data, a->buf.data + rest, owed);
    a->buf.len = owed;
  }
  return owed;
}

void lp__alog_close(lp_alog_t *a) {
  /* the last lines to a collector that is behind: it is given a bounded while
   * to take them (the process is ending or the file changing), no more */
  for (int waited = 0; lp__alog_flush(a) && a->on && waited < LP_ACCESS_LAST_WAIT_MS;
       waited += LP_ACCESS_LAST_POLL_MS) {
    struct pollfd pfd = {.fd = a->fd, .events = POLLOUT};
    if (poll(&pfd, 1, LP_ACCESS_LAST_POLL_MS) < 0 && errno != EINTR) break;
  }
  if (a->buf.len) { /* still owed: lost, and counted */
    uint64_t lost = 0;
    for (size_t i = 0; i < a->buf.len; i++) lost += a->buf.data[i] == '\n';
    LP_RELAXED_ADD(a->dropped, lost);
    lp_buf_reset(&a->buf);
  }
  lp_buf_free(&a->line);
  lp_buf_free(&a->buf);
  if (a->on && a->fd != STDERR_FILENO) close(a->fd);
  a->on = 0;
  a->fd = -1;
}

/* One whole line, in the buffer. */
static void put_line(lp_alog_t *a, const lp_buf_t *line) {
  if (line->oom) {
    LP_RELAXED_INC(a->dropped);
    return;
  }
  if (a->buf.len + line->len > LP_ACCESS_BUF && lp__alog_flush(a) + line->len > LP_ACCESS_BUF) {
    LP_RELAXED_INC(a->dropped); /* the collector is a whole buffer behind: memory stays bounded */
    return;
  }
  lp_buf_append(&a->buf, line->data, line->len);
  if (a->buf.oom) { /* what was gathered cannot be trusted whole: it goes */
    uint64_t lost = 1;
    for (size_t i = 0; i < a->buf.len; i++) lost += a->buf.data[i] == '\n';
    LP_RELAXED_ADD(a->dropped, lost);
    lp_buf_reset(&a->buf);
  }
}

/* Successes are kept at the configured share, evenly: the n-th is logged when
 * the running share crosses a whole number. */
static int sampled(lp_front_t *f) {
  double r = f->cfg->access_log_sample;
  if (r >= 1) return 1;
  if (r <= 0) return 0;
  f->alog.seen++;
  uint64_t before = (uint64_t)((double)(f->alog.seen - 1) * r);
  uint64_t after = (uint64_t)((double)f->alog.seen * r);
  return after > before;
}

static void put_str(lp_buf_t *b, const char *s, size_t n) { lp_buf_json_str(b, s, n); }

/* The line of an answer, or of a refusal with its error code (code NULL for
 * an answer): what the client was told, so that a log names why. */
static void log_line(lp_front_t *f, const lp_http_req_t *req, int status, const char *code,
                     const lp_job_t *job) {
  if (!f->alog.on || !req) return;
  if (status < 400 && !sampled(f)) return;
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
  lp_buf_t *b = &f->alog.line;
  lp_buf_reset(b);
  lp_buf_puts(b, "{\"time\": ");
  put_str(b, when, strlen(when));
  lp_buf_puts(b, ", \"client\": ");
  put_str(b, peer, strlen(peer));
  lp_buf_puts(b, ", \"thread\": "); /* the front that served it: the metrics' thread label */
  lp_buf_u64(b, f->index);
  lp_buf_puts(b, ", \"method\": ");
  put_str(b, method, strlen(method));
  lp_buf_puts(b, ", \"path\": ");
  put_str(b, req->url, req->path_len);
  lp_buf_puts(b, ", \"status\": ");
  lp_buf_u64(b, (uint64_t)status);
  lp_buf_puts(b, ", \"request_id\": ");
  put_str(b, req->request_id, strlen(req->request_id));
  if (req->traceparent[0]) { /* the W3C trace-id (collectors join on it) and this request's span */
    lp_buf_puts(b, ", \"trace_id\": ");
    put_str(b, req->traceparent + 3, 32);
    lp_buf_puts(b, ", \"span_id\": ");
    put_str(b, req->traceparent + 36, 16);
  }
  if (code) {
    lp_buf_puts(b, ", \"error\": ");
    put_str(b, code, strlen(code));
  }
  if (job) {
    uint64_t tokens = 0, queue_ns, backend_ns;
    for (uint32_t i = 0; i < job->nseq; i++) tokens += job->seqs[i].len;
    lp__job_times(job, &queue_ns, &backend_ns);
    lp_buf_puts(b, ", \"model\": ");
    /* the front's copy of the configuration: the scheduler's changes on reload */
    const char *name = f->cfg->models[job->model - f->shared->models].name;
    put_str(b, name, strlen(name));
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
  put_line(&f->alog, b);
}

void lp__access_log(lp_front_t *f, const lp_http_req_t *req, int status, const lp_job_t *job) {
  log_line(f, req, status, NULL, job);
}

void lp__access_log_refused(lp_front_t *f, const lp_http_req_t *req, int status, const char *code,
                            const lp_job_t *job) {
  log_line(f, req, status, code, job);
}
