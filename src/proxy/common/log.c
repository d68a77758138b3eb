/* JSON-lines logging on stderr, one write per line so lines never interleave. */
#include "lanepack/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lanepack/buf.h"

int lp_log_level = LP_LOG_INFO;

static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;
void lp_log_lock(void) { pthread_mutex_lock(&write_lock); }
void lp_log_unlock(void) { pthread_mutex_unlock(&write_lock); }

static const char *names[] = {"debug", "info", "warn", "error"};

int lp_log_parse_level(const char *s) {
  for (int i = 0; i < 4; i++)
    if (strcmp(s, names[i]) == 0) return i;
  return -1;
}

const char *lp_log_level_name(int level) {
  return level >= 0 && level < 4 ? names[level] : "info";
}

void lp_log(int level, const char *msg, const char *fields, ...) {
  /* relaxed: a reload (the scheduler's thread) sets it while fronts log */
  if (level < __atomic_load_n(&lp_log_level, __ATOMIC_RELAXED)) return;
  char line[2048];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  int n = snprintf(line, sizeof(line),
                   "{\"ts\": \"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\", \"level\": \"%s\", \"msg\": ",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                   tm.tm_sec, ts.tv_nsec / 1000000, lp_log_level_name(level));
  lp_buf_t b = {line, (size_t)n, sizeof(line), 0};
  /* the msg is ours and plain, but escape it anyway; stop at the fixed buffer */
  size_t ml = strlen(msg);
  if (ml > 200) ml = 200;
  char esc[1300];
  lp_buf_t e = {esc, 0, sizeof(esc), 0};
  lp_buf_json_str(&e, msg, ml);
  if (b.len + e.len + 8 < sizeof(line)) {
    memcpy(line + b.len, esc, e.len);
    b.len += e.len;
  }
  if (fields) {
    va_list ap;
    va_start(ap, fields);
    if (b.len + 2 < sizeof(line)) {
      memcpy(line + b.len, ", ", 2);
      b.len += 2;
      int k = vsnprintf(line + b.len, sizeof(line) - b.len - 3, fields, ap);
      if (k > 0) b.len += (size_t)k < sizeof(line) - b.len - 3 ? (size_t)k : sizeof(line) - b.len - 4;
    }
    va_end(ap);
  }
  line[b.len++] = '}';
  line[b.len++] = '\n';
  lp_log_lock();
  ssize_t w = write(2, line, b.len);
  lp_log_unlock();
  (void)w;
}
