/* The process (src/proxy/process/): making the proxy, reloading it, freeing
 * it. lp_proxy_s itself is in sched/sched.h (the scheduler's context). */
#ifndef LANEPACK_PROXY_PROCESS_H
#define LANEPACK_PROXY_PROCESS_H

#include "sched/sched.h"

/* process/reload.c: applies a new configuration to a running proxy, or refuses it
 * (err says why) leaving everything as it was. */
int lp__proxy_reload(lp_proxy_t *p, const lp_config_t *next, char *err, size_t errlen);

/* process/proxy.c */
int lp_proxy_init(lp_proxy_t *p, uv_loop_t *loop, const lp_config_t *cfg, int *port);
/* After the loop stopped: stops and joins the front threads, frees everything. */
void lp_proxy_free(lp_proxy_t *p);

#endif
