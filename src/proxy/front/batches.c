/* Runs on a front thread (several threads): the batches the scheduler hands
 * this front are sent, and their answers read and opened, on its loop with
 * its own upstream connections; each goes back to the scheduler with the
 * jobs of the turn its transfer ended in. */
#include "front/front.h"

/* bt's transfer ended (its outcome is in it): back with this turn's jobs */
static void batch_sent(lp_batch_t *bt, void *ud) {
  lp_front_t *f = ud;
  bt->hand_next = NULL;
  if (f->sent) f->sent_last->hand_next = bt;
  else f->sent = bt;
  f->sent_last = bt;
  lp__front_flush_due(f);
}

void lp__front_send_batches(lp_front_t *f, lp_batch_t *list) {
  while (list) {
    lp_batch_t *bt = list;
    list = bt->hand_next; /* before: a transfer that cannot start hands it back */
    bt->on_done = batch_sent;
    bt->on_done_ud = f;
    if (!f->up || lp__transfer_start(f->up, bt) != 0) {
      bt->unstarted = 1; /* the scheduler retries it, or fails it when its body could not be written */
      batch_sent(bt, f);
    }
  }
}
