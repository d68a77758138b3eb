/* Memory given back to the system on the quiet ticks: any thread calls it
 * about its own malloc arena (the scheduler's on its tick, each front's when
 * the scheduler marks it due). */
#include <malloc.h>
#include <stdlib.h>

#include "common/common.h"

void lp__trim_arena(void) {
#ifdef __GLIBC__
  /* malloc_trim gives back the free pages inside a thread arena's heap but
   * not its top, where everything freed after a burst ends up merged (tens
   * of MB that 16 streamed answers' requests held stayed resident): a thread
   * arena's top shrinks only in a free of 64 KB or more while the trim
   * threshold is under it. So, for a moment, it is; the threshold goes back
   * to main's (a free on another thread meanwhile may trim too: harmless). */
  mallopt(M_TRIM_THRESHOLD, 128 << 10);
  void *volatile big = malloc(256 << 10); /* volatile: a compiler drops a malloc freed at once */
  free(big);
  mallopt(M_TRIM_THRESHOLD, LP_TRIM_THRESHOLD);
#endif
}
