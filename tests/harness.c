/* Integration-test harness (see harness.h). */
#define _GNU_SOURCE
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lanepack/buf.h"
#include "lanepack/emu.h"
#include "lanepack/jscan.h"

const char *h_bin(const char *env) {
  const char *v = getenv(env);
  return v ? v : "";
}

int h_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t l = sizeof(a);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) || getsockname(fd, (struct sockaddr *)&a, &l)) {
    if (fd >= 0) close(fd);
    return -1;
  }
  int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

pid_t h_spawn(char *const argv[], const char *log_path) {
  pid_t pid = fork();
  if (pid == 0) {
    /* dies with the test process, even when an assertion ends it early */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 2);
      dup2(fd, 1);
      close(fd);
    }
    execv(argv[0], argv);
    _exit(127);
  }
  return pid;
}

int h_run(char *const argv[], const char *log_path) {
  pid_t p = h_spawn(argv, log_path);
  int st;
  if (p < 0 || waitpid(p, &st, 0) != p) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static uint64_t ms_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int h_wait_http(int port, const char *path, int any, int timeout_ms) {
  uint64_t end = ms_now() + (uint64_t)timeout_ms;
  while (ms_now() < end) {
    h_resp_t r;
    if (h_call(port, "GET", path, "", NULL, &r) == 0) {
      int ok = any || r.status == 200;
      h_resp_free(&r);
      if (ok) return 0;
    }
    usleep(20000);
  }
  return -1;
}

int h_stop(pid_t pid, int timeout_ms) {
  if (pid <= 0) return -1;
  kill(pid, SIGTERM);
  uint64_t end = ms_now() + (uint64_t)timeout_ms;
  int st;
  while (ms_now() < end) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return -1;
}

int h_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

int h_send_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
    if (k <= 0) return -1;
    c += k;
    n -= (size_t)k;
  }
  return 0;
}

/* Reads into a per-fd carry buffer so pipelined answers can be split. Tests
 * call from several threads (each on its own descriptors): the table is locked. */
static struct {
  int fd;
  char *data;
  size_t len;
} carry[64];
static pthread_mutex_t carry_lock = PTHREAD_MUTEX_INITIALIZER;

static char **carry_for(int fd, size_t **len) {
  char **out = NULL;
  pthread_mutex_lock(&carry_lock);
  for (int i = 0; i < 64 && !out; i++)
    if (carry[i].fd == fd && carry[i].data) {
      *len = &carry[i].len;
      out = &carry[i].data;
    }
  for (int i = 0; i < 64 && !out; i++)
    if (!carry[i].data) {
      carry[i].fd = fd;
      carry[i].data = malloc(1);
      carry[i].len = 0;
      *len = &carry[i].len;
      out = &carry[i].data;
    }
  pthread_mutex_unlock(&carry_lock);
  return out;
}

static void carry_drop(int fd) {
  pthread_mutex_lock(&carry_lock);
  for (int i = 0; i < 64; i++)
    if (carry[i].fd == fd && carry[i].data) {
      free(carry[i].data);
      carry[i].data = NULL;
    }
  pthread_mutex_unlock(&carry_lock);
}

int h_read_response(int fd, h_resp_t *r, int timeout_ms) {
  memset(r, 0, sizeof(*r));
  size_t *len;
  char **buf = carry_for(fd, &len);
  if (!buf) return -1;
  uint64_t end = ms_now() + (uint64_t)timeout_ms;
  for (;;) {
    /* a complete response in the buffer? */
    char *hend = *len ? memmem(*buf, *len, "\r\n\r\n", 4) : NULL;
    if (hend) {
      size_t hlen = (size_t)(hend - *buf) + 4;
      if (strncmp(*buf, "HTTP/1.1 100", 12) == 0) { /* interim answer: skip */
        memmove(*buf, *buf + hlen, *len - hlen);
        *len -= hlen;
        continue;
      }
      size_t cl = 0;
      char *h = strcasestr(*buf, "\r\ncontent-length:");
      if (h && h < hend) cl = strtoul(h + 17, NULL, 10);
      if (*len >= hlen + cl) {
        r->status = atoi(*buf + 9);
        size_t hc = hlen < sizeof(r->headers) - 1 ? hlen : sizeof(r->headers) - 1;
        memcpy(r->headers, *buf, hc);
        r->headers[hc] = 0;
        r->body = malloc(cl + 1);
        memcpy(r->body, *buf + hlen, cl);
        r->body[cl] = 0;
        r->body_len = cl;
        memmove(*buf, *buf + hlen + cl, *len - hlen - cl);
        *len -= hlen + cl;
        return 0;
      }
    }
    int left = (int)(end > ms_now() ? end - ms_now() : 0);
    struct pollfd p = {fd, POLLIN, 0};
    if (left == 0 || poll(&p, 1, left) <= 0) return -1;
    char tmp[65536];
    ssize_t k = recv(fd, tmp, sizeof(tmp), 0);
    if (k <= 0) {
      carry_drop(fd);
      return -1;
    }
    char *nb = realloc(*buf, *len + (size_t)k + 1);
    if (!nb) return -1;
    *buf = nb;
    memcpy(*buf + *len, tmp, (size_t)k);
    *len += (size_t)k;
    (*buf)[*len] = 0;
  }
}

void h_resp_free(h_resp_t *r) {
  free(r->body);
  r->body = NULL;
}

int h_call(int port, const char *method, const char *path, const char *headers, const char *body,
           h_resp_t *r) {
  memset(r, 0, sizeof(*r));
  int fd = h_connect(port);
  if (fd < 0) return -1;
  lp_buf_t b;
  lp_buf_init(&b);
  lp_buf_printf(&b, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s", method, path, headers);
  if (body) lp_buf_printf(&b, "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
  else lp_buf_puts(&b, "\r\n");
  int rc = h_send_all(fd, b.data, b.len);
  lp_buf_free(&b);
  if (rc == 0) rc = h_read_response(fd, r, 10000);
  carry_drop(fd);
  close(fd);
  return rc;
}

char *h_ids_body(const int32_t *tokens, size_t n, const char *extra) {
  lp_buf_t b;
  lp_buf_init(&b);
  lp_buf_puts(&b, "{\"input_ids\": ");
  lp_buf_i32_array(&b, tokens, n);
  if (extra) lp_buf_puts(&b, extra);
  lp_buf_puts(&b, "}");
  lp_buf_cstr(&b);
  return b.data;
}

int h_check_output(const char *body, const int32_t *tokens, size_t n) {
  const char *o = strstr(body, "\"output\": ");
  if (!o) return 0;
  o += 10;
  int32_t *got = malloc((n + 1) * sizeof(int32_t)), *want = malloc((n + 1) * sizeof(int32_t));
  size_t k;
  int err;
  const char *e = lp_jscan_int_array(o, body + strlen(body), got, n + 1, INT32_MIN, INT32_MAX, &k, &err);
  lp_emu_outputs(tokens, n, want);
  int ok = e && k == n && memcmp(got, want, n * sizeof(int32_t)) == 0;
  free(got);
  free(want);
  return ok;
}

double h_metric(int port, const char *prefix) {
  h_resp_t r;
  if (h_call(port, "GET", "/metrics", "", NULL, &r)) return -1;
  double sum = 0;
  size_t pl = strlen(prefix);
  for (char *line = r.body; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
    if (strncmp(line, prefix, pl) == 0) {
      char *nl = strchr(line, '\n');
      char *sp = memrchr(line, ' ', nl ? (size_t)(nl - line) : strlen(line));
      if (sp) sum += strtod(sp + 1, NULL);
    }
  h_resp_free(&r);
  return sum;
}

long h_rss_kb(pid_t pid, const char *field) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long v = -1;
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, field, strlen(field)) == 0) v = atol(line + strlen(field));
  fclose(f);
  return v;
}

pid_t h_start_emulator(const char *args, int *port) {
  *port = h_free_port();
  char listen[64], log[96], buf[1024];
  snprintf(listen, sizeof(listen), "127.0.0.1:%d", *port);
  snprintf(log, sizeof(log), "/tmp/lp-emu-%d.log", *port);
  snprintf(buf, sizeof(buf), "%s", args);
  char *argv[40] = {(char *)h_bin("LP_EMULATOR"), "--listen", listen};
  int ac = 3;
  for (char *sv, *t = strtok_r(buf, " ", &sv); t && ac < 38; t = strtok_r(NULL, " ", &sv)) argv[ac++] = t;
  argv[ac] = NULL;
  pid_t pid = h_spawn(argv, log);
  if (h_wait_http(*port, "/healthz", 0, 5000)) return -1;
  return pid;
}

pid_t h_start_proxy(const char *rest, const char *ready_path, int *port) {
  *port = h_free_port();
  char cfg[96], log[96];
  snprintf(cfg, sizeof(cfg), "/tmp/lp-proxy-%d.json", *port);
  snprintf(log, sizeof(log), "/tmp/lp-proxy-%d.log", *port);
  FILE *f = fopen(cfg, "w");
  if (!f) return -1;
  fprintf(f, "{\"listen\": \"127.0.0.1:%d\", \"health_interval_ms\": 100, %s}\n", *port, rest);
  fclose(f);
  char *argv[] = {(char *)h_bin("LP_PROXY"), "--config", cfg, NULL};
  pid_t pid = h_spawn(argv, log);
  int any = ready_path[0] == '~';
  if (h_wait_http(*port, ready_path + any, any, 8000)) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
  }
  return pid;
}

char *h_read_for(int fd, int ms, size_t *n) {
  size_t cap = 65536, len = 0;
  char *b = malloc(cap + 1);
  uint64_t end = ms_now() + (uint64_t)ms;
  while (b && ms_now() < end) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, (int)(end - ms_now())) <= 0) break;
    if (len == cap) {
      char *nb = realloc(b, 2 * cap + 1);
      if (!nb) break;
      b = nb;
      cap *= 2;
    }
    ssize_t k = recv(fd, b + len, cap - len, 0);
    if (k <= 0) break;
    len += (size_t)k;
  }
  if (b) b[len] = 0;
  *n = len;
  return b;
}

int h_stack_start(h_stack_t *s, const char *emu_args, const char *top, const char *model_keys) {
  return h_stack_start_at(s, emu_args, top, model_keys, "/readyz");
}

int h_stack_start_at(h_stack_t *s, const char *emu_args, const char *top, const char *model_keys,
                     const char *probe) {
  memset(s, 0, sizeof(*s));
  s->emu = h_start_emulator(emu_args, &s->emu_port);
  if (s->emu <= 0) return -1;
  char rest[2048];
  snprintf(rest, sizeof(rest), "%s \"models\": {\"m\": {\"backends\": [\"http://127.0.0.1:%d\"], %s}}",
           top, s->emu_port, model_keys);
  s->proxy = h_start_proxy(rest, probe, &s->port);
  if (s->proxy <= 0) {
    h_stop(s->emu, 5000);
    return -1;
  }
  return 0;
}

int h_stack_stop(h_stack_t *s) {
  int rc = h_stop(s->proxy, 15000); /* its drain may wait out a batch in flight */
  h_stop(s->emu, 5000);
  return rc;
}
