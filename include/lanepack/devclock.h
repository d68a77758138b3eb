/* The device clock of one backend: how many devices it runs batches on, when
 * each is expected to be free, and how long each shape takes there, learned
 * from the batches it has run (the median of a window, which one stall cannot
 * ruin), seeded by a configured cost. Also the lead time: what it takes to
 * encode and deliver a batch before the device starts. No I/O, no clock of its
 * own: the caller passes the time. */
#ifndef LANEPACK_DEVCLOCK_H
#define LANEPACK_DEVCLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/bucket.h"

#define LP_CLOCK_MAX_DEVICES 64
#define LP_CLOCK_WINDOW 31

typedef struct lp_window_s {
  uint64_t v[LP_CLOCK_WINDOW];
  uint32_t n, next;
  uint64_t median;         /* of what is in the window; 0 while empty */
} lp_window_t;

typedef struct lp_device_s {
  uint32_t batches;        /* batches sent to it and not yet answered */
  uint64_t free_ns;        /* when it is expected to be free (0: idle) */
} lp_device_t;

typedef struct lp_devclock_s {
  uint32_t devices;
  lp_device_t dev[LP_CLOCK_MAX_DEVICES];
  lp_window_t svc[LP_BUCKET_MAX_SHAPES];  /* service time per shape */
  uint64_t seed_ns[LP_BUCKET_MAX_SHAPES]; /* configured cost, until learned */
  lp_window_t lead;                       /* dispatch to device start */
  /* utilization: device-busy time and its fill-weighted part, summed */
  uint64_t busy_ns, useful_ns;
} lp_devclock_t;

void lp_devclock_init(lp_devclock_t *c, uint32_t devices);
/* Changes the device count (a backend reported it); in-flight state is kept. */
void lp_devclock_set_devices(lp_devclock_t *c, uint32_t devices);
void lp_devclock_seed(lp_devclock_t *c, int shape, uint64_t cost_ns);
/* Expected service time of a shape: learned, else seeded, else 0 (unknown). */
uint64_t lp_devclock_cost(const lp_devclock_t *c, int shape);
/* Shape index `shape` left the set: what was learned and seeded of it goes,
 * so that a shape that takes the slot next starts from nothing. */
void lp_devclock_forget_shape(lp_devclock_t *c, int shape);
uint64_t lp_devclock_lead(const lp_devclock_t *c);
/* A device with no batch, or -1. */
int lp_devclock_idle_device(const lp_devclock_t *c);
/* When the first device is expected to be free (UINT64_MAX when unknown:
 * a busy device whose batch has no expected time). */
uint64_t lp_devclock_next_free(const lp_devclock_t *c);
/* The same, skipping devices overdue at now by more than slack_ns: a device
 * late past its expected finish (a stall, a recompile) counts as busy until it
 * answers, so nothing more is sent to wait behind it. */
uint64_t lp_devclock_next_free_at(const lp_devclock_t *c, uint64_t now, uint64_t slack_ns);
/* A batch of shape leaves now: the device it will run on (the one free
 * earliest) and when it is expected to finish (*finish_ns; 0 when unknown). */
int lp_devclock_start(lp_devclock_t *c, int shape, uint64_t now, uint64_t *finish_ns);
/* Its answer came at now, dispatched at sent_ns and expected at expect_ns (0:
 * unknown), its device time device_ns when the backend reported one (else 0),
 * filled to fill (0..1). Learns the shape's service time and the lead time,
 * frees the device's slot and moves what waits behind it by the difference. */
void lp_devclock_finish(lp_devclock_t *c, int device, int shape, uint64_t sent_ns, uint64_t expect_ns,
                        uint64_t now, uint64_t device_ns, double fill);
/* The batch failed or was given up: its slot is freed, nothing is learned. */
void lp_devclock_abandon(lp_devclock_t *c, int device, uint64_t expect_ns, uint64_t now);

void lp_window_add(lp_window_t *w, uint64_t v);

#endif
