/* Runs on a front thread: GET / where /metrics is served, the live view's
 * static page (view.html, embedded at build time by embed-page.py). */
#include "front/front.h"
#include "view-page.h"

/* The page holds no data, so a browser may keep it, but asks again each time
 * (a new binary may bring a new page); it may not be framed, sniffed as
 * another type or name its address to anyone. */
#define LP_VIEW_HEADERS                                                                            \
  LP_VIEW_CSP "Cache-Control: no-cache\r\nX-Content-Type-Options: nosniff\r\n"                   \
              "X-Frame-Options: DENY\r\nReferrer-Policy: no-referrer\r\n"

void lp__view_page(lp_front_t *f, lp_http_req_t *req) {
  lp_proxy_count(f, LP_ROUTE_VIEW, 200);
  lp_http_respond(req, 200, LP_VIEW_HEADERS, "text/html; charset=utf-8", lp_view_html, sizeof(lp_view_html));
}
