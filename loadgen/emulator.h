/* The emulator's state, shared by its HTTP front (emulator.c) and its Open
 * Inference Protocol side (emulator_v2.c). Private to lanepack-emulator. */
#ifndef LANEPACK_EMULATOR_H
#define LANEPACK_EMULATOR_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "lanepack/bucket.h"
#include "lanepack/httpd.h"
#include "lanepack/rng.h"

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

typedef struct emu_s emu_t;

/* One batch from parse to answer; owns its arrays. */
typedef struct job_s {
  emu_t *emu;
  lp_http_req_t *req;     /* NULL once the client went away */
  struct job_s *next;     /* device queue */
  uint64_t recv_ns;       /* when its request had arrived whole (uv_hrtime) */
  uint64_t start_ns, done_ns; /* on its device's clock: when it starts and ends */
  int64_t batch_id;
  int shape;              /* index in the shape set, -1 for ragged */
  uint32_t lanes, bucket;
  int32_t *ids, *sids, *pos;  /* lanes * bucket each */
  int32_t *cu;            /* ragged: nsegs + 1 */
  size_t ncu;
  int fault;              /* 0 none, else which fault to act out */
  int stalled;            /* held without an answer until the client leaves */
  uint64_t device_us;     /* what it cost on its device, reported to the client */
  int poisoned;           /* holds the poison token: fails */
  /* v2 jobs */
  int v2;
  int v2_binary;          /* answer with binary tensors */
  char v2_id[128];        /* the request's id, echoed */
  char v2_model[160];
} job_t;

struct emu_s {
  uv_loop_t *loop;
  lp_httpd_t *httpd;
  lp_bucket_set_t shapes;
  uint64_t cost_ms[LP_BUCKET_MAX_SHAPES];
  int used[LP_BUCKET_MAX_SHAPES];  /* compiled on first use when compile_ms > 0 */
  uint64_t default_cost_ms;
  uint64_t compile_ms;
  int per_segment;
  int ragged_ok;
  int hide_shapes;        /* no /v1/shapes route, like a backend that lacks one */
  int log_batches;        /* a JSON line per batch on stderr: its id and request ids */
  unsigned devices;
  job_t *qhead, *qtail;   /* waiting for a device, in arrival order */
  /* The devices' clock: device d runs running[d] from its start_ns to its
   * done_ns; the next one there starts at max(its arrival, that done_ns), so
   * the time the emulator itself takes (parsing, writing answers, a late
   * wake-up on a loaded host) is never added to a device's time. One timerfd
   * on CLOCK_MONOTONIC (uv_hrtime's clock), armed at the earliest done_ns,
   * wakes the loop to the microsecond. */
  job_t **running;        /* devices entries, NULL = idle */
  uint64_t *free_ns;      /* devices entries: when each is done with what it was given */
  int tfd;
  uv_poll_t tpoll;
  uint64_t armed_ns;      /* what tfd is armed for; 0 = disarmed */
  uint64_t arrived_ns;    /* when the request being handled arrived whole */
  /* how late answers left past their device's done_ns (the host's share) */
  uint64_t late_ns_sum, late_ns_max, busy_ns;
  /* faults */
  double fail_rate, reset_rate, stall_rate, garbage_rate;
  uint64_t delay_ms;
  lp_rng_t rng;
  uint64_t batches, rejected;
  uv_signal_t sigterm, sigint;
  /* Open Inference Protocol */
  int protocols;          /* EMU_PROTO_* bits */
  char v2_model[128];     /* model name template per shape */
  char v2_output[64];
  unsigned v2_dims;       /* 0: INT32 outputs; K: FP32 outputs with a trailing dimension K */
  double cost_jitter;     /* each batch costs up to this fraction more or less */
  double slow_rate;       /* a batch is slow (a recompile, say) at this rate ... */
  uint64_t slow_ms;       /* ... costing this much more */
  int64_t poison_token;   /* a batch holding this token id fails (500); -1: none */
  const char *missing_file; /* while this file exists, every shape is missing (a
                               model reloading): batches get shape mismatch (v1) or
                               404 (v2); NULL: never */
};

enum { FAULT_NONE, FAULT_FAIL, FAULT_RESET, FAULT_STALL, FAULT_GARBAGE };
enum { EMU_PROTO_LANEPACK = 1, EMU_PROTO_V2 = 2 };

void emu_job_free(job_t *j);
/* --missing-file: the shapes are missing right now. */
int emu_shapes_missing(const emu_t *emu);
/* Queues a parsed job on the devices (faults drawn here). */
void emu_enqueue(emu_t *emu, job_t *j, lp_http_req_t *req);

/* emulator_v2.c: routes under /v2; returns 1 when it answered req. */
int emu_v2_route(emu_t *emu, lp_http_req_t *req);
/* Writes a v2 job's answer. */
void emu_v2_answer(job_t *j);

/* --log-batches: one JSON line (stderr) per batch received: the client
 * request ids and traceparents lanepack passed on (the text after ids_key and
 * traces_key in body, up to close) and the batch's own traceparent and
 * tracestate headers. */
void emu_log_batch(const char *batch_id, const char *body, size_t len, const char *ids_key,
                   const char *traces_key, char close, const char *traceparent, const char *tracestate);

#endif
