/* lanepack --probe URL: one blocking HTTP GET for container health checks, so
 * that the runtime image needs no curl. Exit status 0 for a 2xx answer. */
#include "probe.h"

#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

static long long ms_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Waits for fd to be ready for `events` until the deadline; 1 ready, 0 not. */
static int wait_fd(int fd, short events, long long deadline) {
  long long left = deadline - ms_now();
  if (left <= 0) return 0;
  struct pollfd p = {.fd = fd, .events = events};
  return poll(&p, 1, (int)left) == 1;
}

int lp_probe(const char *url, int timeout_ms, char *err, size_t errlen) {
  char host[256], port[16] = "80";
  const char *path = "/";
  if (strncmp(url, "http://", 7) != 0) {
    snprintf(err, errlen, "'%s' is not an http:// URL", url);
    return 2;
  }
  const char *h = url + 7, *slash = strchr(h, '/');
  size_t hl = slash ? (size_t)(slash - h) : strlen(h);
  if (slash) path = slash;
  if (hl == 0 || hl >= sizeof(host)) {
    snprintf(err, errlen, "bad host in '%s'", url);
    return 2;
  }
  memcpy(host, h, hl);
  host[hl] = '\0';
  char *colon = strrchr(host, ':');
  if (host[0] == '[') { /* [v6]:port */
    char *rb = strchr(host, ']');
    if (!rb) {
      snprintf(err, errlen, "bad host in '%s'", url);
      return 2;
    }
    *rb = '\0';
    if (rb[1] == ':') snprintf(port, sizeof(port), "%s", rb + 2);
    memmove(host, host + 1, strlen(host + 1) + 1);
  } else if (colon) {
    *colon = '\0';
    snprintf(port, sizeof(port), "%s", colon + 1);
  }
  long long deadline = ms_now() + timeout_ms;
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
  int rc = getaddrinfo(host, port, &hints, &ai);
  if (rc) {
    snprintf(err, errlen, "%s: %s", host, gai_strerror(rc));
    return 1;
  }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(ai);
    snprintf(err, errlen, "socket failed");
    return 1;
  }
  int status = -1;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 || wait_fd(fd, POLLOUT, deadline)) {
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    char req[512];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
                     path, host);
    if (!soerr && n > 0 && (size_t)n < sizeof(req) && send(fd, req, (size_t)n, MSG_NOSIGNAL) == n &&
        wait_fd(fd, POLLIN, deadline)) {
      char buf[64];
      ssize_t got = recv(fd, buf, sizeof(buf) - 1, 0);
      if (got >= 12) {
        buf[got] = '\0';
        if (strncmp(buf, "HTTP/1.", 7) == 0) status = atoi(buf + 9);
      }
    }
  }
  close(fd);
  freeaddrinfo(ai);
  if (status < 0) {
    snprintf(err, errlen, "no HTTP answer from %s within %d ms", url, timeout_ms);
    return 1;
  }
  if (status < 200 || status > 299) {
    snprintf(err, errlen, "%s answered %d", url, status);
    return 1;
  }
  return 0;
}
