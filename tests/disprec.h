/* The dispatch core's actions recorded in order, for the tests that drive it
 * in virtual time: every action lp_disp_next gives, with the time it was taken
 * at and a copy of a SEND's items (the core reuses its own array). */
#ifndef LANEPACK_TESTS_DISPREC_H
#define LANEPACK_TESTS_DISPREC_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/dispatch.h"

typedef struct rec_act_s {
  lp_disp_action_t a; /* a SEND's a.send.items is it */
  const lp_disp_item_t *it; /* a SEND's items, owned by the recorder; NULL otherwise */
  uint64_t at;        /* the virtual time it was drained at */
} rec_act_t;

/* Actions one recorder holds between rec_clear calls: four times the 4,096
 * the tests' own fixed arrays held (each test fitted in those). */
#define REC_MAX_ACTS 16384

typedef struct rec_s {
  rec_act_t *acts; /* owned, REC_MAX_ACTS allocated once (never moved); n used,
                      in the order the core gave them */
  size_t n;
} rec_t;

/* A configuration for driving the core in virtual time: the defaults, shapes
 * (a bucket set's text) with each one's seed cost in ms from cost_ms, stall
 * timers off, a 10 s request bound (no test waits that long), and the
 * default max_wait (the tests that rely on it set 5 ms themselves). */
void rec_config(lp_disp_config_t *c, const char *shapes, const uint64_t *cost_ms);

/* Forgets every action (their item copies freed); the recorder stays usable. */
void rec_clear(rec_t *r);
/* Frees what the recorder holds; it is then empty, usable again. */
void rec_free(rec_t *r);
/* Takes every action the core has for now; returns how many. */
size_t rec_drain(rec_t *r, lp_disp_t *d, uint64_t now);

/* How many of kind k were recorded. */
int rec_count(const rec_t *r, lp_disp_act_kind_t k);
/* The i-th of kind k (0-based), or NULL. */
const rec_act_t *rec_nth(const rec_t *r, lp_disp_act_kind_t k, int i);
/* The last of kind k, or NULL. */
const rec_act_t *rec_last(const rec_t *r, lp_disp_act_kind_t k);
/* Job's answer, or NULL. */
const rec_act_t *rec_answer_of(const rec_t *r, uint64_t job);
/* The latest SEND holding job at index from or later, or NULL. */
const rec_act_t *rec_send_of(const rec_t *r, uint64_t job, size_t from);
/* Whether SEND s (may be NULL) holds a sequence of job. */
int rec_holds(const rec_act_t *s, uint64_t job);

#endif
