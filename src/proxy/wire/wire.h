/* The backend wire (src/proxy/wire/), called by whichever front sends a
 * batch (and by the scheduler, which may close a batch's answer): it reads
 * and writes the batch only (handoff.h). */
#ifndef LANEPACK_PROXY_WIRE_H
#define LANEPACK_PROXY_WIRE_H

#include "handoff/handoff.h"

/* ---- wire/: the backend wire, on the front that sends a batch: its body
 * written, its transfer run, its answer opened; its caller calls down, answers come
 * up through the on_done it sets in the batch ---- */
/* wire/transfer.c: starts bt's transfer on up (its url, headers, gather list or
 * body, bounds, set); when it ends, its outcome is in bt (a 200 answer opened
 * for slicing: lp__answer_open) and bt->on_done runs on up's loop. 0, or
 * -ENOMEM when it could not start. */
int lp__transfer_start(lp_upstream_t *up, lp_batch_t *bt);
/* wire/v2body.c: bt's Open Inference Protocol request (bt->body, or its gather
 * list for binary INT32 rectangles), url-less: headers set. Reads only the
 * batch (and the jobs it pins). 0 or -ENOMEM. */
int lp__v2_body_write(lp_batch_t *bt);
/* wire/open.c: a 200 answer indexed (JSON: bt->scatter) or decoded and checked
 * (v2: bt->v2msg) against the batch it answers: 0, or -EPROTO/-ENOMEM with
 * bt->open_err. Reads only the batch. */
int lp__answer_open(lp_batch_t *bt);

/* wire/open.c, whichever thread holds the batch (its front, or the scheduler
 * once it is back): frees the batch's decoded v2 answer, if any. */
void lp__v2_close(lp_batch_t *bt);

#endif
