/* Integration-test harness: starts the real binaries on free loopback ports,
 * speaks raw HTTP to them over blocking sockets, and stops them. */
#ifndef LANEPACK_TEST_HARNESS_H
#define LANEPACK_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
  int status;
  char headers[4096];
  char *body;     /* malloc'd, NUL-terminated */
  size_t body_len;
} h_resp_t;

int h_free_port(void);
/* Starts argv (NULL-terminated) with stderr to log_path; returns the pid. */
pid_t h_spawn(char *const argv[], const char *log_path);
/* Runs argv to its end with stdout and stderr to log_path; returns its exit
 * status, or 128 + the signal that ended it. */
int h_run(char *const argv[], const char *log_path);
/* Waits until GET path on port answers 200 (or any answer if any != 0). */
int h_wait_http(int port, const char *path, int any, int timeout_ms);
/* SIGTERM, then SIGKILL after timeout_ms; returns the exit status or -1. */
int h_stop(pid_t pid, int timeout_ms);
int h_connect(int port);
int h_send_all(int fd, const void *p, size_t n);
/* Reads one HTTP response from fd (Content-Length framing). 0 or -1. */
int h_read_response(int fd, h_resp_t *r, int timeout_ms);
void h_resp_free(h_resp_t *r);
/* One request on a new connection: method, path, extra headers ("" or lines
 * ending \r\n), body (NULL for none). Returns 0 or -1. */
int h_call(int port, const char *method, const char *path, const char *headers, const char *body,
           h_resp_t *r);
/* A JSON body {"input_ids": [...]} for tokens. malloc'd. */
char *h_ids_body(const int32_t *tokens, size_t n, const char *extra);
/* Checks "output" of a 200 answer against the emulator formula. 1 if right. */
int h_check_output(const char *body, const int32_t *tokens, size_t n);
/* Reads a counter from /metrics: sum of lines starting with prefix. */
double h_metric(int port, const char *prefix);
const char *h_bin(const char *env);
/* A process's memory line from /proc (e.g. "VmRSS:") in kB, or -1. */
long h_rss_kb(pid_t pid, const char *field);
/* Starts the emulator on a free port with args (space-separated) and waits
 * for it; *port gets the port. Log in /tmp/lp-emu-PORT.log. */
pid_t h_start_emulator(const char *args, int *port);
/* Writes a proxy config {"listen": ..., "health_interval_ms": 100, <rest>} and
 * starts the proxy, waiting until ready_path answers 200 (any answer if
 * ready_path starts with '~'). *port gets its port. Log in /tmp/lp-proxy-PORT.log. */
pid_t h_start_proxy(const char *rest, const char *ready_path, int *port);
/* An emulator and a proxy serving model "m" from it: emu_args for the
 * emulator (space-separated), top for more top-level keys (each ending with a
 * comma, or ""), model_keys for more keys of the model. 0, or -1 when either
 * did not start (then nothing is left running). */
typedef struct {
  pid_t emu, proxy;
  int emu_port, port;
} h_stack_t;
int h_stack_start(h_stack_t *s, const char *emu_args, const char *top, const char *model_keys);
/* The same, waiting for probe (a path that answers 200) instead of /readyz:
 * for a stack that is meant never to be ready. */
int h_stack_start_at(h_stack_t *s, const char *emu_args, const char *top, const char *model_keys,
                     const char *probe);
/* Stops both; returns the proxy's exit status (0 when it drained cleanly). */
int h_stack_stop(h_stack_t *s);

/* Reads whatever arrives on fd for up to ms into a malloc'd NUL-terminated
 * buffer (*n bytes); stops early at EOF. */
char *h_read_for(int fd, int ms, size_t *n);

#endif
