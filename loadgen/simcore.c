/* The "core" policy for lanepack-sim: the dispatch core (lanepack/dispatch.h)
 * driven through the simulator's policy interface, events in, actions out. */
#include <errno.h>

#include "sim.h"

#if defined(__has_include)
#if __has_include("lanepack/dispatch.h")
#define SIM_HAVE_CORE 1
#endif
#endif

#ifndef SIM_HAVE_CORE
int sim_core_available(void) { return 0; }

int sim_core_new(sim_policy_t *p, const sim_model_t *m, const sim_req_t *reqs) {
  (void)p, (void)m, (void)reqs;
  return -ENOSYS;
}
#endif
