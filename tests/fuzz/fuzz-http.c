/* libFuzzer: the whole HTTP request path of the proxy. Each input is written
 * to a real connection to an in-process lanepack (its backend is unreachable,
 * so admitted requests end in 503 or are cancelled), then the client half-closes
 * and the loop runs until the proxy closes the connection: every input must end
 * in answers or a close, never a crash, hang or leak. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <poll.h>
#include <unistd.h>

#include "process/process.h"
#include "lanepack/log.h"

/* How long a finished client may wait for the proxy to close: past the
 * longest any input can make it wait (request_timeout_ms 1000 below, a
 * backend timeout of 200 ms), with room for a sanitizer build's slowness. */
#define WAIT_NS 5000000000ull

static lp_proxy_t proxy;
static int port;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  static lp_config_t cfg;
  lp_config_default(&cfg);
  const char *text =
      "{\"listen\": \"127.0.0.1:0\", \"log_level\": \"error\", \"max_body_bytes\": 65536, "
      "\"max_header_bytes\": 4096, \"request_timeout_ms\": 1000, \"unhealthy_after\": 1, "
      "\"models\": {\"default\": {\"shapes\": \"4x64,8x16\", \"backends\": [\"http://127.0.0.1:1\"], "
      "\"max_wait_ms\": 0, \"backend_timeout_ms\": 200, \"vocab_size\": 1000}}}";
  char err[256];
  if (lp_config_load_text(&cfg, text, strlen(text), "fuzz", err, sizeof(err))) abort();
  signal(SIGPIPE, SIG_IGN);
  if (lp_proxy_init(&proxy, uv_default_loop(), &cfg, &port)) abort();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* Hundreds of thousands of connections to one port use up the ephemeral
   * ports of one source address (TIME_WAIT): each input comes from its own
   * address in 127.0.0.0/8. Only a refused connection (the proxy gone) fails. */
  static uint32_t source = 0;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int fd = -1;
  for (int tries = 0; tries < 16 && fd < 0; tries++) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) abort();
    source = source % 0xfffffd + 1;
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000000u | source)};
    if (bind(fd, (struct sockaddr *)&from, sizeof(from)) == 0 &&
        connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
      break;
    if (errno == ECONNREFUSED) abort();
    close(fd);
    fd = -1;
  }
  if (fd < 0) abort();
  fcntl(fd, F_SETFL, O_NONBLOCK);
  size_t off = 0;
  char buf[65536];
  int closed = 0;
  /* the front answers on a thread of its own (the harness runs the
   * scheduler's loop): wait in time, not in turns of one loop; a poll of a
   * millisecond keeps it from spinning */
  uint64_t end = uv_hrtime() + WAIT_NS;
  for (int first = 1; !closed && uv_hrtime() < end; first = 0) {
    if (off < size) {
      ssize_t k = send(fd, data + off, size - off, MSG_NOSIGNAL);
      if (k > 0) off += (size_t)k;
      if (off == size) shutdown(fd, SHUT_WR);
    } else if (size == 0 && first) {
      shutdown(fd, SHUT_WR);
    }
    uv_run(proxy.loop, UV_RUN_NOWAIT);
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    poll(&pfd, 1, 1);
    ssize_t r;
    while ((r = recv(fd, buf, sizeof(buf), 0)) > 0) {
    }
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) closed = 1;
  }
  close(fd);
  if (!closed) abort(); /* the proxy kept a finished client waiting */
  return 0;
}
