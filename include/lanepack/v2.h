/* The Open Inference Protocol (KServe v2) message codec, with Triton's binary
 * tensor extension: a JSON header, then raw little-endian tensors in header
 * order, the header's length given by Inference-Header-Content-Length. Decodes
 * requests and answers into tensors that point into the body (binary) or hold
 * decoded numbers (JSON), and writes either form. No I/O. */
#ifndef LANEPACK_V2_H
#define LANEPACK_V2_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/buf.h"
#include "lanepack/tensor.h"

#define LP_V2_MAX_TENSORS 16
#define LP_V2_MAX_ELEMENTS (1ull << 32)

typedef struct lp_v2_msg_s {
  char id[128];
  int has_id;
  char model_name[128];
  /* a request's inputs or an answer's outputs; tensors borrow the body */
  lp_tensor_t t[LP_V2_MAX_TENSORS];
  int n;
  /* a request's "outputs": which are asked for, and which in binary */
  char want[LP_V2_MAX_TENSORS][64];
  int want_binary[LP_V2_MAX_TENSORS];
  int nwant;
  /* request parameters (Triton's binary and schedule-policy extensions) */
  int binary_data_output;
  int has_priority;
  int64_t priority;
  int has_timeout;
  int64_t timeout_us;
} lp_v2_msg_t;

/* Decodes body[0..len): header_len < 0 means the whole body is JSON, else the
 * JSON header is body[0..header_len) and binary tensors follow. request: read
 * "inputs" (and the outputs asked for, parameters), else "outputs". Returns 0,
 * or -EPROTO with a message naming what was wrong in err, or -ENOMEM. Free
 * with lp_v2_msg_free whatever it returns. */
int lp_v2_decode(lp_v2_msg_t *m, const char *body, size_t len, int64_t header_len, int request,
                 char *err, size_t errlen);
void lp_v2_msg_free(lp_v2_msg_t *m);
/* The tensor named name, or NULL. */
const lp_tensor_t *lp_v2_find(const lp_v2_msg_t *m, const char *name);

/* The v2 routes a path names (the part before any '?'). */
typedef enum {
  LP_V2_NOT_V2 = 0,     /* not under /v2 */
  LP_V2_SERVER,         /* /v2 */
  LP_V2_LIVE,           /* /v2/health/live */
  LP_V2_READY,          /* /v2/health/ready */
  LP_V2_MODEL,          /* /v2/models/NAME */
  LP_V2_MODEL_READY,    /* /v2/models/NAME/ready */
  LP_V2_INFER,          /* /v2/models/NAME/infer */
  LP_V2_UNKNOWN         /* under /v2, no such route */
} lp_v2_route_t;

/* Parses path[0..n); name and name_len get the model's name for the model routes
 * (a /versions/V part is accepted and ignored). */
lp_v2_route_t lp_v2_route(const char *path, size_t n, const char **name, size_t *name_len);

/* One tensor to write: count elements of dtype at data in host order; with
 * widen_i32, data holds int32 values written as INT64. With binary, data NULL
 * writes the tensor's header only: its bytes are the caller's to append. */
typedef struct lp_v2_out_s {
  const char *name;
  lp_dtype_t dtype;
  int ndim;
  int64_t shape[LP_TENSOR_MAX_DIMS];
  const void *data;
  size_t count;
  int widen_i32;
} lp_v2_out_t;

/* Appends a message to out: {<members>, "<list_key>": [tensors]} (members: JSON
 * members without braces, e.g. "\"id\": \"7\"", may be NULL), the tensors' data
 * inline as JSON, or, with binary, as raw bytes after the header. *header_len
 * gets the JSON header's length. Returns 0 or -ENOMEM. */
int lp_v2_write(lp_buf_t *out, const char *members, const char *list_key, const lp_v2_out_t *t,
                int n, int binary, size_t *header_len);

#endif
