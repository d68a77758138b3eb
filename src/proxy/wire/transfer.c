/* Runs on the front a batch was handed to: the request read out of the batch's gather list or body, the
 * answer kept in the batch with how it ended, a 200 answer opened for slicing
 * there, then the batch handed on (bt->on_done). */
#include <errno.h>
#include <string.h>

#include "wire/wire.h"

static void on_xfer_done(lp_xfer_t *x, void *ud) {
  lp_batch_t *bt = ud;
  bt->xfer = NULL;
  bt->result = x->result;
  bt->status = x->status;
  memcpy(bt->error, x->error, sizeof(bt->error));
  bt->sent_ns = x->start_ns;
  bt->device_ns = x->result == LP_XFER_OK ? x->device_ns : 0;
  bt->inference_header_len = x->inference_header_len;
  lp_buf_free(&bt->answer);
  bt->answer = x->body; /* moved: its bytes stay where they are for the spans */
  lp_buf_init(&x->body);
  /* the transfer's next answer gets the room this one needed at once, not by
   * doubling from empty (each doubling a copy of what came so far) */
  if (bt->answer.len <= LP_XFER_KEEP_BYTES) (void)lp_buf_reserve(&x->body, bt->answer.len);
  bt->opened = x->result == LP_XFER_OK && x->status == 200 && lp__answer_open(bt) == 0;
  bt->on_done(bt, bt->on_done_ud);
}

/* A JSON batch's body, as a gather list: the envelope written here, the
 * members' text or tokens and the writer's runs borrowed. Written on the
 * thread that starts the transfer so the scheduler's touches none of its
 * bytes; what it reads is the batch's and its pinned jobs'. */
static int write_json_body(lp_batch_t *bt) {
  bt->body_pending = LP_BODY_NONE;
  lp_batchjson_gather(bt->writer, &bt->gather, &bt->layout, bt->id, bt->model_name, bt->ids, bt->traces);
  bt->layout.texts = NULL; /* read only while the body is written */
  bt->layout.seqs = NULL;
  return bt->gather.oom ? -ENOMEM : 0;
}

int lp__transfer_start(lp_upstream_t *up, lp_batch_t *bt) {
  bt->unstarted = 0;
  bt->unbuilt = 0;
  bt->opened = 0;
  int rc = bt->body_pending == LP_BODY_JSON ? write_json_body(bt)
           : bt->body_pending == LP_BODY_V2 ? lp__v2_body_write(bt) : 0;
  if (rc) {
    bt->unbuilt = 1;
    return rc;
  }
  if (bt->layout.segs_only || !bt->v2)
    bt->xfer = lp_upstream_request_g(up, bt->url, &bt->gather, bt->headers, bt->timeout_ms, bt->max_answer,
                                     on_xfer_done, bt);
  else
    bt->xfer = lp_upstream_request_h(up, bt->url, bt->body.data, bt->body.len, bt->headers, bt->timeout_ms,
                                     bt->max_answer, on_xfer_done, bt);
  return bt->xfer ? 0 : -ENOMEM;
}
