/* Logs as JSON lines on stderr: {"ts": ..., "level": ..., "msg": ..., more}. */
#ifndef LANEPACK_LOG_H
#define LANEPACK_LOG_H

enum { LP_LOG_DEBUG = 0, LP_LOG_INFO, LP_LOG_WARN, LP_LOG_ERROR };

extern int lp_log_level;

/* Returns the level named s ("debug", "info", "warn", "error"), or -1. */
int lp_log_parse_level(const char *s);
const char *lp_log_level_name(int level);

/* fields: more JSON members, "\"key\": value, ..." in printf form, or NULL. */
void lp_log(int level, const char *msg, const char *fields, ...)
    __attribute__((format(printf, 3, 4)));

/* Held around every write to standard error (lp_log's lines) and to the
 * access log: with several threads, a large write a pipe takes in pieces
 * must not be cut into by another thread's. Not held while calling lp_log. */
void lp_log_lock(void);
void lp_log_unlock(void);

#endif
