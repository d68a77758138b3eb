/* Configuration: JSON file + flags, every key checked, errors naming the key.
 * Each key is declared once, in the tables below (as nginx's ngx_command_t):
 * its name, type, field, default, range, when it applies and its doc line;
 * loading, defaults, the dump and the listing the doc test reads all walk them. */
#include "lanepack/config.h"
#include "lanepack/openai.h"
#include "lanepack/tei.h"
#include "lanepack/tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "lanepack/buf.h"
#include "lanepack/log.h"

typedef struct {
  char *err;
  size_t errlen;
  const char *file;
} ctx_t;

static int fail(ctx_t *x, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(ctx_t *x, const char *path, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (x->err) snprintf(x->err, x->errlen, "%s: %s: %s", x->file, path, msg);
  return -EINVAL;
}

/* ---- the table's shape ---- */

/* How a key's JSON value is read, stored and printed. */
typedef enum {
  KEY_UINT,  /* an unsigned integer field of 4 or 8 bytes, in [min, max] */
  KEY_INT32, /* an int32_t, any 32-bit value */
  KEY_REAL,  /* a double in [min, max] */
  KEY_BOOL,  /* an int, 0 or 1 */
  KEY_STR,   /* a char[size] */
  KEY_ENUM,  /* an int (or enum): the index of its value in names[] */
  KEY_OBJ,   /* an object whose keys are the table sub[], over the field at off */
  KEY_OWN,   /* read, printed and reset by its own hooks only */
  KEY_DEAD,  /* read by an older release: refused, with doc saying what decides instead */
} key_type_t;

/* When a new value takes effect (the listing's "applies" column). */
typedef enum {
  APPLY_AT_ONCE,   /* a reload applies it to everything, queued work included */
  APPLY_ON_RELOAD, /* a reload applies it to the requests and connections after it */
  APPLY_AT_RESTART /* a reload that changes it is refused; a restart applies it */
} key_apply_t;

enum {
  KF_EMPTY_OK = 1,    /* KEY_STR: "" is a value (else it must be non-empty) */
  KF_OMIT_EMPTY = 2,  /* the dump leaves the key out when its value is 0 or "" */
  KF_NULL_EMPTY = 4,  /* KEY_STR: the dump prints "" as null */
};

typedef struct keydef_s keydef_t;
struct keydef_s {
  const char *name;
  key_type_t type;
  size_t off, size;         /* the field, from the table's struct (FIELD) */
  unsigned flags;           /* KF_* */
  double min, max;          /* KEY_UINT, KEY_REAL: the range */
  double def;               /* numbers, booleans, enums (an index): the default */
  const char *sdef;         /* KEY_STR: the default; NULL = "" */
  const char *const *names; /* KEY_ENUM: each value's name by index, NULL-terminated */
  const char *example;      /* KEY_STR with KF_EMPTY_OK: named in its error */
  const keydef_t *sub;      /* KEY_OBJ: its keys, ended by a row without a name */
  /* Hooks, each in place of the type's own way where set. base is the
   * table's struct; top the whole configuration. */
  int (*parse)(ctx_t *x, void *base, json_t *v, const char *path);
  json_t *(*dump)(const void *base, const lp_config_t *top); /* NULL: the key is left out */
  void (*reset)(void *base);
  int (*check)(ctx_t *x, const void *base, const char *path); /* KEY_OBJ: once its keys are read */
  int (*present)(const void *base);                          /* KEY_OBJ: dumped only when true */
  int (*same)(const void *a, const void *b);                 /* KEY_OWN: whether two bases hold one value */
  key_apply_t applies;
  /* The listing's words where the type and range above do not say it all. */
  const char *type_doc, *def_doc, *range_doc;
  const char *doc; /* what it does, one line */
};

#define FIELD(st, f) .off = offsetof(st, f), .size = sizeof(((st *)0)->f)
typedef lp_config_t TOP;
typedef lp_model_config_t MODEL;
typedef lp_v2_config_t V2;

static void *at(void *base, const keydef_t *k) { return (char *)base + k->off; }
static const void *at_c(const void *base, const keydef_t *k) { return (const char *)base + k->off; }

static uint64_t get_uint(const void *p, size_t size) {
  if (size == sizeof(uint32_t)) return *(const uint32_t *)p;
  return *(const uint64_t *)p;
}

static void set_uint(void *p, size_t size, uint64_t v) {
  if (size == sizeof(uint32_t)) *(uint32_t *)p = (uint32_t)v;
  else *(uint64_t *)p = v;
}

/* ---- the keys' own hooks ---- */

static int get_str(ctx_t *x, json_t *v, const char *path, char *out, size_t cap) {
  if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) >= cap)
    return fail(x, path, "must be a non-empty string of at most %zu bytes", cap - 1);
  memcpy(out, json_string_value(v), json_string_length(v) + 1);
  return 0;
}

static int parse_shapes(ctx_t *x, void *base, json_t *v, const char *path) {
  MODEL *m = base;
  char err[160];
  lp_bucket_set_init(&m->shapes);
  if (json_is_string(v)) {
    if (lp_bucket_set_parse(&m->shapes, json_string_value(v), err, sizeof(err))) return fail(x, path, "%s", err);
  } else if (json_is_array(v) && json_array_size(v) > 0) {
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
      if (json_is_string(s)) {
        if (lp_bucket_set_parse(&m->shapes, json_string_value(s), err, sizeof(err)))
          return fail(x, path, "%s", err);
      } else if (json_is_array(s) && json_array_size(s) == 2 && json_is_integer(json_array_get(s, 0)) &&
                 json_is_integer(json_array_get(s, 1))) {
        json_int_t l = json_integer_value(json_array_get(s, 0));
        json_int_t b = json_integer_value(json_array_get(s, 1));
        if (l < 1 || l > 65536 || b < 1 || b > (1 << 24) || lp_bucket_set_add(&m->shapes, (uint32_t)l, (uint32_t)b) < 0)
          return fail(x, path, "bad shape [%lld, %lld]", (long long)l, (long long)b);
      } else {
        return fail(x, path, "each shape is \"LANESxBUCKET\" or [lanes, bucket]");
      }
    }
  } else {
    return fail(x, path, "must be \"4x8192,8x2048\" or a non-empty list of shapes");
  }
  return 0;
}

static json_t *dump_shapes(const void *base, const lp_config_t *top) {
  const MODEL *m = base;
  (void)top;
  json_t *shapes = json_array();
  for (size_t s = 0; s < m->shapes.count; s++) {
    char spec[40];
    snprintf(spec, sizeof(spec), "%ux%u", m->shapes.shapes[s].lanes, m->shapes.shapes[s].bucket);
    json_array_append_new(shapes, json_string(spec));
  }
  return shapes;
}

static void reset_shapes(void *base) { lp_bucket_set_init(&((MODEL *)base)->shapes); }

static int same_shapes(const void *a, const void *b) {
  const lp_bucket_set_t *x = &((const MODEL *)a)->shapes, *y = &((const MODEL *)b)->shapes;
  if (x->count != y->count) return 0;
  for (size_t i = 0; i < x->count; i++)
    if (x->shapes[i].lanes != y->shapes[i].lanes || x->shapes[i].bucket != y->shapes[i].bucket) return 0;
  return 1;
}

static int parse_backends(ctx_t *x, void *base, json_t *v, const char *path) {
  MODEL *m = base;
  if (json_is_string(v)) v = json_pack("[O]", v);
  else json_incref(v);
  if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > LP_MAX_BACKENDS) {
    json_decref(v);
    return fail(x, path, "must be a list of 1 to %d backend URLs", LP_MAX_BACKENDS);
  }
  m->nbackends = 0;
  size_t i;
  json_t *s;
  json_array_foreach(v, i, s) {
    char bp[300];
    snprintf(bp, sizeof(bp), "%s[%zu]", path, i);
    char *u = m->backends[m->nbackends];
    if (get_str(x, s, bp, u, LP_URL_MAX)) {
      json_decref(v);
      return -EINVAL;
    }
    if (strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0) {
      json_decref(v);
      return fail(x, bp, "must start with http:// or https://");
    }
    /* no trailing slash: paths are appended */
    size_t n = strlen(u);
    while (n > 8 && u[n - 1] == '/') u[--n] = 0;
    m->nbackends++;
  }
  json_decref(v);
  return 0;
}

static json_t *dump_backends(const void *base, const lp_config_t *top) {
  const MODEL *m = base;
  (void)top;
  json_t *bk = json_array();
  for (size_t b = 0; b < m->nbackends; b++) json_array_append_new(bk, json_string(m->backends[b]));
  return bk;
}

/* {"4x8192": 20, ...}: matched to the shapes by lp_config_validate */
static int parse_cost_ms(ctx_t *x, void *base, json_t *v, const char *path) {
  MODEL *m = base;
  if (!json_is_object(v)) return fail(x, path, "must be an object of \"LANESxBUCKET\": ms");
  const char *sk;
  json_t *sv;
  json_object_foreach(v, sk, sv) {
    char cpath[320], err[160];
    snprintf(cpath, sizeof(cpath), "%s.%s", path, sk);
    lp_bucket_set_t one;
    lp_bucket_set_init(&one);
    if (lp_bucket_set_parse(&one, sk, err, sizeof(err)) || one.count != 1)
      return fail(x, cpath, "is not a shape LANESxBUCKET");
    if (!json_is_integer(sv) || json_integer_value(sv) < 0 || json_integer_value(sv) > 3600000)
      return fail(x, cpath, "must be an integer number of ms in [0, 3600000]");
    if (m->ncosts == sizeof(m->cost_spec) / sizeof(m->cost_spec[0])) return fail(x, cpath, "too many shapes");
    m->cost_spec[m->ncosts].lanes = one.shapes[0].lanes;
    m->cost_spec[m->ncosts].bucket = one.shapes[0].bucket;
    m->cost_spec[m->ncosts++].ms = (uint64_t)json_integer_value(sv);
  }
  return 0;
}

static json_t *dump_cost_ms(const void *base, const lp_config_t *top) {
  const MODEL *m = base;
  (void)top;
  json_t *costs = json_object();
  for (size_t k = 0; k < m->ncosts; k++) {
    char spec[48];
    snprintf(spec, sizeof(spec), "%ux%u", m->cost_spec[k].lanes, m->cost_spec[k].bucket);
    json_object_set_new(costs, spec, json_integer((json_int_t)m->cost_spec[k].ms));
  }
  return costs;
}

static int parse_stall_factor(ctx_t *x, void *base, json_t *v, const char *path) {
  double f = json_is_number(v) ? json_number_value(v) : -1;
  if (!(f == 0 || (f >= 1.5 && f <= 1000))) return fail(x, path, "must be 0 (never hedge) or a number in [1.5, 1000]");
  ((MODEL *)base)->stall_factor = f;
  return 0;
}

static const char *const v2_input_keys[3] = {"input_ids", "segment_ids", "position_ids"};

static int parse_v2_inputs(ctx_t *x, void *base, json_t *v, const char *path) {
  V2 *c = base;
  const char *ik;
  json_t *iv;
  if (!json_is_object(v)) return fail(x, path, "must be an object of input names");
  json_object_foreach(v, ik, iv) {
    char ipath[360];
    snprintf(ipath, sizeof(ipath), "%s.%s", path, ik);
    int k = 0;
    while (k < 3 && strcmp(ik, v2_input_keys[k]) != 0) k++;
    if (k == 3) return fail(x, ipath, "unknown input (input_ids, segment_ids, position_ids)");
    if (json_is_null(iv)) {
      if (k == 0) return fail(x, ipath, "input_ids is always sent");
      c->inputs[k][0] = '\0';
    } else if (get_str(x, iv, ipath, c->inputs[k], sizeof(c->inputs[k]))) {
      return -EINVAL;
    }
  }
  return 0;
}

static json_t *dump_v2_inputs(const void *base, const lp_config_t *top) {
  const V2 *c = base;
  (void)top;
  json_t *in = json_object();
  for (int k = 0; k < 3; k++)
    json_object_set_new(in, v2_input_keys[k], c->inputs[k][0] ? json_string(c->inputs[k]) : json_null());
  return in;
}

static int same_v2_inputs(const void *a, const void *b) {
  for (int k = 0; k < 3; k++)
    if (strcmp(((const V2 *)a)->inputs[k], ((const V2 *)b)->inputs[k])) return 0;
  return 1;
}

static void reset_v2_inputs(void *base) {
  V2 *c = base;
  for (int k = 0; k < 3; k++) snprintf(c->inputs[k], sizeof(c->inputs[k]), "%s", v2_input_keys[k]);
}

/* v2.model prints the name the backends are asked for: the model's own when not given */
static json_t *dump_v2_model(const void *base, const lp_config_t *top) {
  const V2 *c = base;
  (void)top;
  const MODEL *m = (const MODEL *)((const char *)base - offsetof(MODEL, v2));
  return json_string(c->model[0] ? c->model : m->name);
}

static int v2_present(const void *base) { return ((const MODEL *)base)->protocol == LP_PROTO_V2; }

/* {"sentencepiece": PATH, "extra_options": "bos:eos"} (the library's own
 * encode options) or {"huggingface": PATH} (a tokenizer.json, whose
 * post-processor adds the special tokens); "pair_template" with either. */
static int tokenizer_check(ctx_t *x, const void *base, const char *path) {
  const MODEL *m = base;
  if (m->sentencepiece[0] && m->huggingface[0])
    return fail(x, path, "takes one of \"sentencepiece\" and \"huggingface\", not both");
  if (m->huggingface[0] && m->sentencepiece_options[0])
    return fail(x, path, "extra_options is SentencePiece's: a tokenizer.json's post-processor adds its special tokens");
  if (!m->sentencepiece[0] && !m->huggingface[0])
    return fail(x, path, "needs \"sentencepiece\" (a model file's path) or \"huggingface\" (a tokenizer.json's)");
  return 0;
}

static int tokenizer_present(const void *base) {
  const MODEL *m = base;
  return m->sentencepiece[0] || m->huggingface[0];
}

static int embedding_present(const void *base) {
  const MODEL *m = base;
  return m->embed_normalize || m->embed_dimensions;
}

static json_t *dump_body_budget(const void *base, const lp_config_t *top) {
  (void)base;
  return json_integer((json_int_t)lp_config_body_budget(top));
}

static int parse_models(ctx_t *x, void *base, json_t *v, const char *path);
static json_t *dump_models(const void *base, const lp_config_t *top);

static const char *const outputs_names[] = {"any", "per_token", "per_segment", "score", NULL}; /* lp_outputs_t */

const char *lp_outputs_name(lp_outputs_t o) {
  return (unsigned)o < sizeof(outputs_names) / sizeof(outputs_names[0]) - 1 ? outputs_names[o] : "any";
}

/* v2.output_kind, remembered as given: the model's "outputs" decides it where
 * it is not (settle_outputs). */
static int parse_output_kind(ctx_t *x, void *base, json_t *v, const char *path) {
  V2 *c = base;
  const char *s = json_is_string(v) ? json_string_value(v) : "";
  if (strcmp(s, "per_token") == 0) c->per_segment = 0;
  else if (strcmp(s, "per_segment") == 0) c->per_segment = 1;
  else return fail(x, path, "must be \"per_token\" or \"per_segment\"");
  c->kind_set = 1;
  return 0;
}

/* "labels": a classifier's label per score, in id order (TEI's id2label). */
static int parse_labels(ctx_t *x, void *base, json_t *v, const char *path) {
  MODEL *m = base;
  if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > LP_MAX_LABELS)
    return fail(x, path, "must be a list of 1 to %d label names, in the order of the backend's scores", LP_MAX_LABELS);
  size_t i;
  json_t *s;
  json_array_foreach(v, i, s) {
    if (!json_is_string(s) || json_string_length(s) == 0 || json_string_length(s) >= LP_LABEL_MAX)
      return fail(x, path, "label %zu must be a name of 1 to %d bytes", i, LP_LABEL_MAX - 1);
    memcpy(m->labels[i], json_string_value(s), json_string_length(s) + 1);
  }
  m->nlabels = json_array_size(v);
  return 0;
}

static json_t *dump_labels(const void *base, const lp_config_t *top) {
  const MODEL *m = base;
  (void)top;
  if (!m->nlabels) return NULL;
  json_t *ls = json_array();
  for (size_t k = 0; k < m->nlabels; k++) json_array_append_new(ls, json_string(m->labels[k]));
  return ls;
}

static int same_labels(const void *a, const void *b) {
  const MODEL *ma = a, *mb = b;
  if (ma->nlabels != mb->nlabels) return 0;
  for (size_t k = 0; k < ma->nlabels; k++)
    if (strcmp(ma->labels[k], mb->labels[k])) return 0;
  return 1;
}

/* The model's "outputs" and its v2 output_kind agree: a given kind decides
 * the other where it was not given. */
static int settle_outputs(ctx_t *x, MODEL *m, const char *mpath) {
  if (m->outputs == LP_OUTPUTS_ANY) return 0;
  int per_segment = m->outputs != LP_OUTPUTS_PER_TOKEN;
  if (!m->v2.kind_set) m->v2.per_segment = per_segment;
  else if (m->v2.per_segment != per_segment)
    return fail(x, mpath, "outputs \"%s\" and v2.output_kind \"%s\" disagree (leave output_kind out: outputs "
                "decides it)", lp_outputs_name(m->outputs), m->v2.per_segment ? "per_segment" : "per_token");
  return 0;
}

/* ---- the keys ---- */

static const char *const log_levels[] = {"debug", "info", "warn", "error", NULL}; /* LP_LOG_* */
static const char *const packers[] = {"ffd", "bfd", "spfhp", NULL};               /* lp_algo_t */
static const char *const protocols[] = {"lanepack", "v2", NULL};                  /* lp_protocol_t */
static const char *const output_kinds[] = {"per_token", "per_segment", NULL};    /* v2.per_segment */
static const char *const datatypes[] = {"INT32", "INT64", NULL};                  /* v2.int64 */

/* Inside a model's "v2": how its backends are spoken to (Open Inference Protocol). */
static const keydef_t v2_keys[] = {
    {"model", KEY_STR, FIELD(V2, model), .dump = dump_v2_model, .applies = APPLY_AT_RESTART,
     .def_doc = "the model's name", .doc = "the backend's model name; `{lanes}`, `{bucket}` and `{model}` replaced"},
    {"binary", KEY_BOOL, FIELD(V2, binary), .def = 1, .applies = APPLY_AT_RESTART,
     .doc = "binary tensor data both ways (else JSON data)"},
    {"output", KEY_STR, FIELD(V2, output), .flags = KF_NULL_EMPTY, .applies = APPLY_AT_RESTART,
     .def_doc = "the answer's first", .doc = "the output tensor to read"},
    {"output_kind", KEY_ENUM, FIELD(V2, per_segment), .names = output_kinds, .parse = parse_output_kind,
     .applies = APPLY_AT_RESTART, .def_doc = "as `outputs` says, else `per_token`",
     .doc = "a value per token, or one per sequence"},
    {"datatype", KEY_ENUM, FIELD(V2, int64), .names = datatypes, .applies = APPLY_AT_RESTART,
     .doc = "the token tensors' type"},
    {"inputs", KEY_OWN, .parse = parse_v2_inputs, .dump = dump_v2_inputs, .reset = reset_v2_inputs,
     .same = same_v2_inputs,
     .applies = APPLY_AT_RESTART, .type_doc = "object", .def_doc = "the same names",
     .range_doc = "`input_ids`, `segment_ids`, `position_ids`",
     .doc = "the backend's names for the three inputs (`null` leaves one out; never `input_ids`)"},
    {0},
};

/* A model's "tokenizer": text inputs become token ids on the front that reads them. */
static const keydef_t tokenizer_keys[] = {
    {"sentencepiece", KEY_STR, FIELD(MODEL, sentencepiece), .flags = KF_OMIT_EMPTY, .applies = APPLY_AT_RESTART,
     .def_doc = "none",
     .range_doc = "a SentencePiece `.model` file, loaded at start and by `--check-config`",
     .doc = "the model file; without one, text is refused with 400 naming `tokenizer`"},
    {"huggingface", KEY_STR, FIELD(MODEL, huggingface), .flags = KF_OMIT_EMPTY, .applies = APPLY_AT_RESTART,
     .def_doc = "none", .range_doc = "a Hugging Face `tokenizer.json`, loaded at start and by `--check-config`",
     .doc = "the file (instead of `sentencepiece`): the same ids as Hugging Face's own library; its own "
            "`truncation` and `padding` are not lanepack's rules"},
    {"extra_options", KEY_STR, FIELD(MODEL, sentencepiece_options), .flags = KF_EMPTY_OK, .example = "\"bos:eos\"",
     .applies = APPLY_AT_RESTART, .def_doc = "none", .doc = "the library's encode options, e.g. `bos:eos`"},
    {"pair_template", KEY_STR, FIELD(MODEL, pair_template), .flags = KF_EMPTY_OK | KF_OMIT_EMPTY,
     .example = "\"<s> $A </s></s> $B </s>\"", .applies = APPLY_AT_RESTART, .def_doc = "none (`/rerank` answers 400 naming it)",
     .range_doc = "at most 16 parts; each but `$A`, `$B` a piece of the vocabulary, checked at load",
     .doc = "how TEI's `/rerank` lays out a (query, text) pair, e.g. `<s> $A </s></s> $B </s>`: `$A` the query, `$B` the text"},
    {0},
};

/* A model's "embedding": what /v1/embeddings does with the backend's vectors. */
static const keydef_t embedding_keys[] = {
    {"normalize", KEY_BOOL, FIELD(MODEL, embed_normalize), .applies = APPLY_ON_RELOAD,
     .doc = "scales each vector to unit length (L2, as OpenAI's are)"},
    {"dimensions", KEY_UINT, FIELD(MODEL, embed_dimensions), .flags = KF_OMIT_EMPTY, .min = 1,
     .max = LP_OPENAI_MAX_DIMS, .applies = APPLY_ON_RELOAD, .def_doc = "none (a request's `dimensions` refused)",
     .doc = "the model's vectors have N values and stay meaningful cut to their first ones (Matryoshka): a request "
            "may ask for `dimensions` <= N; a backend vector shorter than N is a bad backend answer"},
    {0},
};

/* A model: "models": {"NAME": {...}}. The dump prints them in this order. */
static const keydef_t model_keys[] = {
    {"shapes", KEY_OWN, .parse = parse_shapes, .dump = dump_shapes, .reset = reset_shapes, .same = same_shapes,
     .applies = APPLY_AT_RESTART, .type_doc = "`\"4x8192,8x2048\"` or a list of `\"LxB\"` / `[lanes, bucket]`",
     .def_doc = "required", .range_doc = "lanes x bucket <= `max_batch_tokens`",
     .doc = "the batch shapes (lanes x bucket) the backends run"},
    {"backends", KEY_OWN, .parse = parse_backends, .dump = dump_backends, .applies = APPLY_AT_ONCE,
     .type_doc = "list of `http://` or `https://` URLs", .def_doc = "required", .range_doc = "1 to 16",
     .doc = "base URLs; a reload adds new ones, and removed ones finish what is in flight and keep their slot until "
            "a restart (a reload that would need more than 16 over the process's life is refused)"},
    {"pad_id", KEY_INT32, FIELD(MODEL, pad_id), .applies = APPLY_AT_RESTART,
     .doc = "the token id written into padding"},
    {"vocab_size", KEY_UINT, FIELD(MODEL, vocab_size), .max = 2147483648.0, .applies = APPLY_ON_RELOAD,
     .doc = "token ids must be below it (0: below the `tokenizer`'s vocabulary size, else any id in [0, 2^31)); "
            "with a `tokenizer`, below its vocabulary size is refused"},
    {"packer", KEY_ENUM, FIELD(MODEL, packer), .def = LP_ALGO_BFD, .names = packers, .applies = APPLY_AT_ONCE,
     .doc = "how a shape's lanes are filled: first-fit, best-fit decreasing, or shortest-pack-first histogram"},
    {"max_segments_per_lane", KEY_UINT, FIELD(MODEL, max_segments_per_lane), .max = 1u << 24,
     .applies = APPLY_AT_ONCE, .doc = "a cap on sequences per lane (0: none)"},
    {"max_wait_ms", KEY_UINT, FIELD(MODEL, max_wait_ms), .max = 3600000, .def = 5, .applies = APPLY_AT_ONCE,
     .doc = "age: a request older than this goes first in the next batch whatever its priority"},
    {"max_queue_requests", KEY_UINT, FIELD(MODEL, max_queue_requests), .min = 1, .max = 10000000, .def = 10000,
     .applies = APPLY_AT_ONCE, .doc = "requests admitted and not yet answered, those in flight included; past it: 429"},
    {"max_queue_tokens", KEY_UINT, FIELD(MODEL, max_queue_tokens), .min = 1, .max = 1ull << 40,
     .def = 16u * 1024 * 1024, .applies = APPLY_AT_ONCE, .doc = "their tokens; past it: 429"},
    {"max_inflight", KEY_UINT, FIELD(MODEL, max_inflight), .min = 1, .max = 1024, .applies = APPLY_AT_ONCE,
     .def_doc = "0 (at most 2 x `devices`)",
     .doc = "a cap on batches in flight per backend, applied per device: `max_inflight` / `devices` - 1 may wait "
            "at a device behind the running one (0: one may, so at most 2 x `devices` in flight)"},
    {"devices", KEY_UINT, FIELD(MODEL, devices), .min = 1, .max = 64, .def = 1, .applies = APPLY_AT_ONCE,
     .doc = "devices per backend, each running one batch at a time (a backend's `/v1/shapes` may say its own)"},
    {"stall_factor", KEY_REAL, FIELD(MODEL, stall_factor), .min = 0, .max = 1000, .def = 3,
     .parse = parse_stall_factor, .applies = APPLY_AT_ONCE, .range_doc = "0 or [1.5, 1000]",
     .doc = "a batch past this many times its expected time is hedged (0: never)"},
    {"stall_min_ms", KEY_UINT, FIELD(MODEL, stall_min_ms), .max = 3600000, .def = 100, .applies = APPLY_AT_ONCE,
     .doc = "... and only once at least this far past its expected time"},
    {"cost_ms", KEY_OWN, .parse = parse_cost_ms, .dump = dump_cost_ms, .applies = APPLY_AT_ONCE,
     .type_doc = "object `{\"LxB\": ms}`", .def_doc = "none (learned)", .range_doc = "each in [0, 3600000]",
     .doc = "expected device time per shape, to start the device clock with"},
    {"backend_timeout_ms", KEY_UINT, FIELD(MODEL, backend_timeout_ms), .min = 1, .max = 3600000, .def = 30000,
     .applies = APPLY_AT_ONCE, .doc = "per batch; then a retry, or 504"},
    {"default_deadline_ms", KEY_UINT, FIELD(MODEL, default_deadline_ms), .max = 3600000,
     .applies = APPLY_ON_RELOAD, .doc = "the deadline of requests that give none (0: none)"},
    {"max_retries", KEY_UINT, FIELD(MODEL, max_retries), .max = 100, .def = 2, .applies = APPLY_AT_ONCE,
     .doc = "copies of a sequence after its first send, retries and hedges together"},
    {"retry_backoff_ms", KEY_UINT, FIELD(MODEL, retry_backoff_ms), .max = 60000, .def = 20,
     .applies = APPLY_AT_ONCE, .doc = "wait before the first retry; doubles for each further one, at most 1 s"},
    {"max_request_ms", KEY_UINT, FIELD(MODEL, max_request_ms), .max = 86400000, .applies = APPLY_AT_ONCE,
     .doc = "a request's longest stay (0: `max_wait_ms` + (`max_retries` + 1) x (`backend_timeout_ms` + backoff) + 1 s)"},
    {"max_queue_bytes", KEY_UINT, FIELD(MODEL, max_queue_bytes), .min = 1 << 20, .max = 1ull << 40,
     .def = 256ull << 20, .applies = APPLY_AT_ONCE, .doc = "memory queued requests hold; past it: 429"},
    {"max_batch_tokens", KEY_UINT, FIELD(MODEL, max_batch_tokens), .min = 1, .max = 1u << 26, .def = 1u << 21,
     .applies = APPLY_AT_ONCE, .doc = "bound on lanes x bucket of any shape, configured or reported by a backend"},
    {"max_output_value_bytes", KEY_UINT, FIELD(MODEL, max_output_value_bytes), .min = 16, .max = 16u << 20,
     .def = 4096, .applies = APPLY_AT_ONCE,
     .doc = "bound on an answer: this many bytes per token slot plus 64 KiB; past it, 502 `bad_backend_answer`"},
    {"protocol", KEY_ENUM, FIELD(MODEL, protocol), .names = protocols, .applies = APPLY_AT_RESTART,
     .doc = "how the backends are spoken to: lanepack's own, or the Open Inference Protocol"},
    {"v2", KEY_OBJ, FIELD(MODEL, v2), .sub = v2_keys, .present = v2_present, .applies = APPLY_AT_RESTART,
     .def_doc = "as below",
     .doc = "the v2 settings (below)"},
    {"tokenizer", KEY_OBJ, .sub = tokenizer_keys, .example = "{\"sentencepiece\": \"PATH.model\"} or {\"huggingface\": \"PATH/tokenizer.json\"}", .check = tokenizer_check, .present = tokenizer_present,
     .applies = APPLY_AT_RESTART, .def_doc = "none (token ids only)", .doc = "text inputs (below)"},
    {"embedding", KEY_OBJ, .sub = embedding_keys, .example = "{\"normalize\": true, \"dimensions\": N}", .present = embedding_present, .applies = APPLY_ON_RELOAD,
     .def_doc = "none", .doc = "what `POST /v1/embeddings` does with the backend's vectors (below)"},
    {"outputs", KEY_ENUM, FIELD(MODEL, outputs), .names = outputs_names, .applies = APPLY_ON_RELOAD,
     .doc = "what the backend returns per sequence: `any` (what each answer says), `per_token`, `per_segment` "
            "(a vector: embeddings) or `score` (a cross-encoder or classifier); every answer is checked against it"},
    {"labels", KEY_OWN, .parse = parse_labels, .dump = dump_labels, .same = same_labels, .applies = APPLY_ON_RELOAD,
     .type_doc = "list of strings", .def_doc = "none (`LABEL_k`)", .range_doc = "1 to 64 names of 1 to 47 bytes",
     .doc = "a classifier's label for each score, in id order (TEI's `id2label`): `/predict` names its scores by them"},
    {"ragged", KEY_BOOL, FIELD(MODEL, ragged), .applies = APPLY_AT_RESTART,
     .doc = "GPU backend: one flat token budget with `cu_seqlens`"},
    {"ragged_max_tokens", KEY_UINT, FIELD(MODEL, ragged_max_tokens), .min = 1, .max = 1u << 24, .def = 32768,
     .applies = APPLY_AT_RESTART, .doc = "the token budget of one ragged batch"},
    {"fill_target", KEY_DEAD,
     .doc = "the device clock decides when a batch leaves (when its device is expected free, less the lead time); "
            "max_wait_ms bounds how long a request waits"},
    {"max_bypass", KEY_DEAD,
     .doc = "max_wait_ms bounds how long a request may be passed over (past it, the oldest goes in the next "
            "rectangle); priority orders the rest"},
    {"balance", KEY_DEAD,
     .doc = "each batch goes to the backend whose device is expected free first (the device clocks), healthy "
            "backends only"},
    {0},
};

/* The top level. The dump prints it in this order. */
static const keydef_t top_keys[] = {
    {"listen", KEY_STR, FIELD(TOP, listen), .sdef = "127.0.0.1:8080", .applies = APPLY_AT_RESTART,
     .type_doc = "string `HOST:PORT`", .doc = "the address clients connect to"},
    {"admin_listen", KEY_STR, FIELD(TOP, admin_listen), .applies = APPLY_AT_RESTART, .type_doc = "string `HOST:PORT`",
     .def_doc = "none (admin routes on `listen`)", .doc = "a second address for the admin routes"},
    {"auth_tokens_file", KEY_STR, FIELD(TOP, auth_tokens_file), .applies = APPLY_ON_RELOAD,
     .type_doc = "string path", .def_doc = "none (no authentication)",
     .doc = "bearer tokens clients must send, one per line (read again on every reload)"},
    {"access_log", KEY_STR, FIELD(TOP, access_log), .applies = APPLY_AT_ONCE,
     .type_doc = "string path, or `\"-\"` (stderr)", .def_doc = "none",
     .doc = "JSON lines, one per request (reopened on every reload)"},
    {"access_log_sample", KEY_REAL, FIELD(TOP, access_log_sample), .min = 0, .max = 1, .def = 1,
     .applies = APPLY_AT_ONCE, .doc = "the share of successful requests logged; errors always are"},
    {"log_level", KEY_ENUM, FIELD(TOP, log_level), .def = LP_LOG_INFO, .names = log_levels,
     .applies = APPLY_AT_ONCE, .doc = "the least severe log line written"},
    {"max_header_bytes", KEY_UINT, FIELD(TOP, max_header_bytes), .min = 256, .max = 1u << 20, .def = 16 * 1024,
     .applies = APPLY_ON_RELOAD, .doc = "a request's headers, chunk extensions included"},
    {"max_body_bytes", KEY_UINT, FIELD(TOP, max_body_bytes), .min = 64, .max = 1ull << 32, .def = 8 * 1024 * 1024,
     .applies = APPLY_ON_RELOAD, .doc = "a request's body"},
    {"max_connections", KEY_UINT, FIELD(TOP, max_connections), .min = 1, .max = 1000000, .def = 10000,
     .applies = APPLY_ON_RELOAD, .doc = "open client connections, the whole process"},
    {"max_pipeline", KEY_UINT, FIELD(TOP, max_pipeline), .min = 1, .max = 100000, .def = 64,
     .applies = APPLY_ON_RELOAD, .doc = "requests read ahead of their answers per connection"},
    {"max_unsent_bytes", KEY_UINT, FIELD(TOP, max_unsent_bytes), .min = 4096, .max = 1ull << 32,
     .def = 1024 * 1024, .applies = APPLY_ON_RELOAD,
     .doc = "answers written to a client and not yet read; past it the proxy stops reading that client"},
    {"max_unsent_bytes_total", KEY_UINT, FIELD(TOP, max_unsent_bytes_total), .min = 1u << 20, .max = 1ull << 40,
     .def = LP_UNSENT_TOTAL_DEFAULT, .applies = APPLY_ON_RELOAD,
     .doc = "answers held for clients that have not taken them, the whole process; past it a connection with bytes "
            "unsent is not read, and large `/tokenize` answers are streamed as the client reads (or 429)"},
    {"max_body_bytes_in_flight", KEY_UINT, FIELD(TOP, max_body_bytes_in_flight), .min = 64, .max = 1ull << 40,
     .dump = dump_body_budget, .applies = APPLY_ON_RELOAD, .def_doc = "256 Mi (at least `max_body_bytes`)",
     .doc = "request bodies being received, the whole process; past it: 503 `bodies_in_flight_full`"},
    {"idle_timeout_ms", KEY_UINT, FIELD(TOP, idle_timeout_ms), .max = 86400000, .def = 60000,
     .applies = APPLY_ON_RELOAD, .doc = "a connection with no byte moved either way this long is closed"},
    {"max_requests_per_connection", KEY_UINT, FIELD(TOP, max_requests_per_connection), .max = UINT32_MAX,
     .applies = APPLY_ON_RELOAD, .doc = "answers before `Connection: close` (0: no limit)"},
    {"request_timeout_ms", KEY_UINT, FIELD(TOP, request_timeout_ms), .max = 86400000, .def = 30000,
     .applies = APPLY_ON_RELOAD, .doc = "time to receive a whole request"},
    {"max_sequences_per_request", KEY_UINT, FIELD(TOP, max_sequences_per_request), .min = 1, .max = 1000000,
     .def = 1024, .applies = APPLY_ON_RELOAD, .doc = "sequences one request may hold"},
    {"drain_timeout_ms", KEY_UINT, FIELD(TOP, drain_timeout_ms), .max = 3600000, .def = 10000,
     .applies = APPLY_AT_ONCE, .doc = "after SIGTERM, how long queued work may take before 503 `shutting_down`"},
    {"drain_delay_ms", KEY_UINT, FIELD(TOP, drain_delay_ms), .max = 3600000, .applies = APPLY_AT_ONCE,
     .doc = "after SIGTERM, how long to stay up and accepting while `/readyz` already fails"},
    {"threads", KEY_UINT, FIELD(TOP, threads), .max = LP_MAX_THREADS, .def = 1, .applies = APPLY_AT_RESTART,
     .doc = "front loops, each a thread around one scheduler (0: one per usable core); also `--threads N`"},
    {"tokenizer_threads", KEY_UINT, FIELD(TOP, tokenizer_threads), .max = LP_MAX_THREADS, .applies = APPLY_AT_RESTART,
     .def_doc = "0 (one per usable core)",
     .doc = "tokenizer workers (`lp-tok-N`): text is tokenized on them, off every loop, fair across requests"},
    {"tokenizer_nice", KEY_UINT, FIELD(TOP, tokenizer_nice), .max = 19, .def = LP_TOKENIZER_NICE_DEFAULT,
     .applies = APPLY_AT_RESTART,
     .doc = "how much nicer than the loops the tokenizer workers run (added to the process's nice value, at most 19, "
            "with `SCHED_BATCH`), so a loop that wakes gets a core first; 0 keeps them at the loops' priority"},
    {"tokenizer_queue_bytes", KEY_UINT, FIELD(TOP, tokenizer_queue_bytes), .min = 4096, .max = 1ull << 40,
     .def = LP_TOKENIZER_QUEUE_DEFAULT, .applies = APPLY_AT_ONCE,
     .doc = "bytes of text the workers hold, waiting or being tokenized, all requests together; past it a request "
            "with text gets 429 in its route's dialect (a request alone always goes in)"},
    {"health_interval_ms", KEY_UINT, FIELD(TOP, health_interval_ms), .min = 10, .max = 3600000, .def = 1000,
     .applies = APPLY_AT_ONCE, .doc = "how often each backend is probed"},
    {"unhealthy_after", KEY_UINT, FIELD(TOP, unhealthy_after), .min = 1, .max = 1000, .def = 3,
     .applies = APPLY_AT_ONCE, .doc = "failures in a row that mark a backend down"},
    {"models", KEY_OWN, .parse = parse_models, .dump = dump_models, .applies = APPLY_AT_RESTART,
     .type_doc = "object of models by name", .def_doc = "one model, `default`",
     .range_doc = "1 to 16; names 1 to 63 bytes without `/`",
     .doc = "the models (below); a reload that changes the set is refused"},
    {0},
};

/* ---- walking a table ---- */

static void reset_keys(const keydef_t *keys, void *base) {
  for (const keydef_t *k = keys; k->name; k++) {
    void *p = at(base, k);
    if (k->reset) {
      k->reset(base);
      continue;
    }
    switch (k->type) {
      case KEY_UINT: set_uint(p, k->size, (uint64_t)k->def); break;
      case KEY_INT32: *(int32_t *)p = (int32_t)k->def; break;
      case KEY_REAL: *(double *)p = k->def; break;
      case KEY_BOOL:
      case KEY_ENUM: *(int *)p = (int)k->def; break;
      case KEY_STR: snprintf(p, k->size, "%s", k->sdef ? k->sdef : ""); break;
      case KEY_OBJ: reset_keys(k->sub, p); break;
      case KEY_OWN:
      case KEY_DEAD: break;
    }
  }
}

static const keydef_t *find_key(const keydef_t *keys, const char *name) {
  for (const keydef_t *k = keys; k->name; k++)
    if (strcmp(k->name, name) == 0) return k;
  return NULL;
}

/* "must be "a", "b" or "c"" */
static int fail_enum(ctx_t *x, const char *path, const char *const *names) {
  char list[200];
  size_t n = 0;
  list[0] = 0;
  for (size_t i = 0; names[i] && n < sizeof(list); i++)
    n += (size_t)snprintf(list + n, sizeof(list) - n, "%s\"%s\"", i == 0 ? "" : names[i + 1] ? ", " : " or ",
                          names[i]);
  return fail(x, path, "must be %s", list);
}

static int parse_keys(ctx_t *x, const keydef_t *keys, void *base, json_t *o, const char *opath);

static int parse_key(ctx_t *x, const keydef_t *k, void *base, json_t *v, const char *path) {
  void *p = at(base, k);
  if (k->parse) return k->parse(x, base, v, path);
  switch (k->type) {
    case KEY_UINT:
      if (!json_is_integer(v) || json_integer_value(v) < 0 || (double)json_integer_value(v) < k->min ||
          (double)json_integer_value(v) > k->max)
        return fail(x, path, "must be an integer in [%llu, %llu]", (unsigned long long)k->min,
                    (unsigned long long)k->max);
      set_uint(p, k->size, (uint64_t)json_integer_value(v));
      return 0;
    case KEY_INT32:
      if (!json_is_integer(v) || json_integer_value(v) < INT32_MIN || json_integer_value(v) > INT32_MAX)
        return fail(x, path, "must be a 32-bit integer");
      *(int32_t *)p = (int32_t)json_integer_value(v);
      return 0;
    case KEY_REAL:
      if (!json_is_number(v) || json_number_value(v) < k->min || json_number_value(v) > k->max)
        return fail(x, path, "must be a number in [%g, %g]", k->min, k->max);
      *(double *)p = json_number_value(v);
      return 0;
    case KEY_BOOL:
      if (!json_is_boolean(v)) return fail(x, path, "must be true or false");
      *(int *)p = json_is_true(v);
      return 0;
    case KEY_STR:
      if (!(k->flags & KF_EMPTY_OK)) return get_str(x, v, path, p, k->size);
      if (!json_is_string(v) || json_string_length(v) >= k->size) return fail(x, path, "must be a string such as %s", k->example);
      memcpy(p, json_string_value(v), json_string_length(v) + 1);
      return 0;
    case KEY_ENUM:
      for (int i = 0; json_is_string(v) && k->names[i]; i++)
        if (strcmp(json_string_value(v), k->names[i]) == 0) {
          *(int *)p = i;
          return 0;
        }
      return fail_enum(x, path, k->names);
    case KEY_OBJ:
      if (!json_is_object(v)) return fail(x, path, "must be an object%s%s", k->example ? ": " : "", k->example ? k->example : "");
      if (parse_keys(x, k->sub, p, v, path)) return -EINVAL;
      return k->check ? k->check(x, p, path) : 0;
    case KEY_DEAD: return fail(x, path, "is no longer used: %s", k->doc);
    case KEY_OWN: break;
  }
  return fail(x, path, "unknown key");
}

/* The keys of object o (named opath in errors) into base, by the table keys. */
static int parse_keys(ctx_t *x, const keydef_t *keys, void *base, json_t *o, const char *opath) {
  char path[300];
  const char *key;
  json_t *v;
  if (!json_is_object(o)) return fail(x, opath, "must be an object");
  json_object_foreach(o, key, v) {
    snprintf(path, sizeof(path), "%s%s%s", opath, opath[0] ? "." : "", key);
    const keydef_t *k = find_key(keys, key);
    if (!k) {
      /* a short table says what it holds */
      char list[200] = "";
      size_t n = 0, count = 0;
      for (const keydef_t *r = keys; r->name; r++) count++;
      for (const keydef_t *r = keys; r->name && count <= 4 && n < sizeof(list); r++)
        n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", r == keys ? " (" : ", ", r->name);
      return fail(x, path, "unknown key%s%s", list, n ? ")" : "");
    }
    if (parse_key(x, k, base, v, path)) return -EINVAL;
  }
  return 0;
}

static json_t *dump_keys(const keydef_t *keys, const void *base, const lp_config_t *top) {
  json_t *o = json_object();
  for (const keydef_t *k = keys; k->name; k++) {
    const void *p = at_c(base, k);
    json_t *v = NULL;
    if (k->dump) {
      v = k->dump(base, top);
    } else {
      switch (k->type) {
        case KEY_UINT:
          if (!(k->flags & KF_OMIT_EMPTY) || get_uint(p, k->size)) v = json_integer((json_int_t)get_uint(p, k->size));
          break;
        case KEY_INT32: v = json_integer(*(const int32_t *)p); break;
        case KEY_REAL: v = json_real(*(const double *)p); break;
        case KEY_BOOL: v = json_boolean(*(const int *)p); break;
        case KEY_STR:
          if (*(const char *)p) v = json_string(p);
          else if (k->flags & KF_NULL_EMPTY) v = json_null();
          else if (!(k->flags & KF_OMIT_EMPTY)) v = json_string("");
          break;
        case KEY_ENUM: v = json_string(k->names[*(const int *)p]); break;
        case KEY_OBJ:
          if (!k->present || k->present(base)) v = dump_keys(k->sub, p, top);
          break;
        case KEY_OWN:
        case KEY_DEAD: break;
      }
    }
    if (v) json_object_set_new(o, k->name, v);
  }
  return o;
}

static int parse_models(ctx_t *x, void *base, json_t *v, const char *path) {
  lp_config_t *c = base;
  if (!json_is_object(v) || json_object_size(v) == 0) return fail(x, path, "must be an object of models by name");
  const char *mname;
  json_t *mo;
  json_object_foreach(v, mname, mo) {
    char mpath[128];
    snprintf(mpath, sizeof(mpath), "models.%s", mname);
    if (strlen(mname) == 0 || strlen(mname) >= LP_NAME_MAX || strchr(mname, '/'))
      return fail(x, mpath, "a model name is 1 to %d bytes without '/'", LP_NAME_MAX - 1);
    lp_model_config_t *m = (lp_model_config_t *)lp_config_model(c, mname);
    if (!m) {
      if (c->nmodels == LP_MAX_MODELS) return fail(x, mpath, "too many models (at most %d)", LP_MAX_MODELS);
      m = &c->models[c->nmodels++];
      lp_model_config_default(m, mname);
    }
    if (parse_keys(x, model_keys, m, mo, mpath) || settle_outputs(x, m, mpath)) return -EINVAL;
  }
  return 0;
}

static json_t *dump_models(const void *base, const lp_config_t *top) {
  const lp_config_t *c = base;
  json_t *models = json_object();
  for (size_t i = 0; i < c->nmodels; i++)
    json_object_set_new(models, c->models[i].name, dump_keys(model_keys, &c->models[i], top));
  return models;
}

/* The first key of keys (all of them, or those that apply at restart) whose
 * value differs between bases a and b: "PATH changed (A -> B)" into what.
 * Returns 1 for one, else 0. Keys read by their own hooks compare only with a
 * `same` hook; the set of models is compared by lp_config_restart_diff. */
static int diff_keys(const keydef_t *keys, const void *a, const void *b, const char *prefix, int all, char *what,
                     size_t cap) {
  for (const keydef_t *k = keys; k->name; k++) {
    if (k->type == KEY_DEAD || (!all && k->applies != APPLY_AT_RESTART)) continue;
    const void *pa = at_c(a, k), *pb = at_c(b, k);
    int n = -1; /* the length written, once one differs */
    if (k->same) {
      if (!k->same(a, b)) n = snprintf(what, cap, "%s%s changed", prefix, k->name);
    } else {
      switch (k->type) {
        case KEY_UINT:
          if (get_uint(pa, k->size) != get_uint(pb, k->size))
            n = snprintf(what, cap, "%s%s changed (%llu -> %llu)", prefix, k->name, (unsigned long long)get_uint(pa, k->size),
                         (unsigned long long)get_uint(pb, k->size));
          break;
        case KEY_INT32:
          if (*(const int32_t *)pa != *(const int32_t *)pb)
            n = snprintf(what, cap, "%s%s changed (%d -> %d)", prefix, k->name, *(const int32_t *)pa, *(const int32_t *)pb);
          break;
        case KEY_REAL:
          if (*(const double *)pa != *(const double *)pb)
            n = snprintf(what, cap, "%s%s changed (%g -> %g)", prefix, k->name, *(const double *)pa, *(const double *)pb);
          break;
        case KEY_BOOL:
          if (*(const int *)pa != *(const int *)pb)
            n = snprintf(what, cap, "%s%s changed (%s -> %s)", prefix, k->name, *(const int *)pa ? "true" : "false",
                         *(const int *)pb ? "true" : "false");
          break;
        case KEY_ENUM:
          if (*(const int *)pa != *(const int *)pb)
            n = snprintf(what, cap, "%s%s changed (%s -> %s)", prefix, k->name, k->names[*(const int *)pa],
                         k->names[*(const int *)pb]);
          break;
        case KEY_STR:
          if (strcmp(pa, pb)) n = snprintf(what, cap, "%s%s changed ('%s' -> '%s')", prefix, k->name, (const char *)pa,
                                           (const char *)pb);
          break;
        case KEY_OBJ: {
          char sub[128];
          snprintf(sub, sizeof(sub), "%s%s.", prefix, k->name);
          if (diff_keys(k->sub, pa, pb, sub, 1, what, cap)) return 1;
          break;
        }
        case KEY_OWN:
        case KEY_DEAD: break;
      }
    }
    if (n >= 0) return 1;
  }
  return 0;
}

int lp_config_restart_diff(const lp_config_t *running, const lp_config_t *next, char *what, size_t whatlen) {
  if (diff_keys(top_keys, running, next, "", 0, what, whatlen)) return 1;
  int same_set = running->nmodels == next->nmodels;
  for (size_t i = 0; same_set && i < running->nmodels; i++) same_set = lp_config_model(next, running->models[i].name) != NULL;
  if (!same_set) {
    snprintf(what, whatlen, "the set of models changed");
    return 1;
  }
  for (size_t i = 0; i < running->nmodels; i++) {
    char prefix[LP_NAME_MAX + 16];
    snprintf(prefix, sizeof(prefix), "models.%s.", running->models[i].name);
    if (diff_keys(model_keys, &running->models[i], lp_config_model(next, running->models[i].name), prefix, 0, what,
                  whatlen))
      return 1;
  }
  return 0;
}

/* ---- the entry points ---- */

void lp_model_config_default(lp_model_config_t *m, const char *name) {
  memset(m, 0, sizeof(*m));
  snprintf(m->name, sizeof(m->name), "%s", name);
  reset_keys(model_keys, m);
}

void lp_config_default(lp_config_t *c) {
  memset(c, 0, sizeof(*c));
  reset_keys(top_keys, c);
}

int lp_config_load_text(lp_config_t *c, const char *text, size_t len, const char *name, char *err,
                        size_t errlen) {
  ctx_t x = {err, errlen, name};
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    if (err) snprintf(err, errlen, "%s:%d:%d: %s", name, je.line, je.column, je.text);
    return -EINVAL;
  }
  int rc = json_is_object(root) ? parse_keys(&x, top_keys, c, root, "") : fail(&x, "(top)", "must be a JSON object");
  json_decref(root);
  return rc;
}

char *lp_config_dump(const lp_config_t *c) {
  json_t *root = dump_keys(top_keys, c, c);
  char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(root);
  return s;
}

int lp_config_load_file(lp_config_t *c, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (err) snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return -EINVAL;
  }
  lp_buf_t b;
  char chunk[4096];
  size_t n;
  lp_buf_init(&b);
  while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) lp_buf_append(&b, chunk, n);
  fclose(f);
  int rc = lp_config_load_text(c, b.data ? b.data : "", b.len, path, err, errlen);
  lp_buf_free(&b);
  return rc;
}

int32_t lp_config_piece_id(const void *ud, const char *piece) { return lp_tok_piece_id(ud, piece); }

lp_tok_t *lp_config_tok_load(const lp_model_config_t *m, char *err, size_t errlen) {
  if (m->huggingface[0]) return lp_tok_load_hf(m->huggingface, err, errlen);
  return lp_tok_load(m->sentencepiece, m->sentencepiece_options, err, errlen);
}

const lp_model_config_t *lp_config_model(const lp_config_t *c, const char *name) {
  for (size_t i = 0; i < c->nmodels; i++)
    if (strcmp(c->models[i].name, name) == 0) return &c->models[i];
  return NULL;
}

size_t lp_config_body_budget(const lp_config_t *c) {
  if (c->max_body_bytes_in_flight) return c->max_body_bytes_in_flight;
  return c->max_body_bytes > LP_BODY_BUDGET_DEFAULT ? c->max_body_bytes : LP_BODY_BUDGET_DEFAULT;
}

uint32_t lp_config_threads(const lp_config_t *c) {
  if (c->threads) return c->threads;
  unsigned n = uv_available_parallelism(); /* the affinity mask's cores (sched_getaffinity) */
  return n < 1 ? 1 : n > LP_MAX_THREADS ? LP_MAX_THREADS : n;
}

uint32_t lp_config_tokenizer_threads(const lp_config_t *c) {
  if (c->tokenizer_threads) return c->tokenizer_threads;
  unsigned n = uv_available_parallelism();
  return n < 1 ? 1 : n > LP_MAX_THREADS ? LP_MAX_THREADS : n;
}

int lp_config_validate(const lp_config_t *c, char *err, size_t errlen) {
  ctx_t x = {err, errlen, "config"};
  /* one body of the largest size must always fit */
  if (c->max_body_bytes_in_flight && c->max_body_bytes_in_flight < c->max_body_bytes)
    return fail(&x, "max_body_bytes_in_flight", "must be at least max_body_bytes (%zu)",
                c->max_body_bytes);
  if (c->nmodels == 0)
    return fail(&x, "models", "no model: give --backend and --shapes, or a config file");
  for (size_t i = 0; i < c->nmodels; i++) {
    const lp_model_config_t *m = &c->models[i];
    char path[128];
    snprintf(path, sizeof(path), "models.%s", m->name);
    if (m->nbackends == 0) return fail(&x, path, "needs at least one backend");
    if (!m->ragged && m->shapes.count == 0) return fail(&x, path, "needs at least one shape");
    if (m->nlabels && m->outputs != LP_OUTPUTS_SCORE)
      return fail(&x, path, "labels name a classifier's scores: set \"outputs\": \"score\"");
    for (size_t k = 0; k < m->shapes.count; k++) {
      const lp_shape_t *sh = &m->shapes.shapes[k];
      if (sh->lanes > LP_MAX_LANES || sh->bucket > LP_MAX_BUCKET ||
          (uint64_t)sh->lanes * sh->bucket > m->max_batch_tokens)
        return fail(&x, path, "shape %ux%u is over the bounds (lanes <= %u, bucket <= %u, "
                    "lanes x bucket <= max_batch_tokens = %llu)", sh->lanes, sh->bucket,
                    LP_MAX_LANES, LP_MAX_BUCKET, (unsigned long long)m->max_batch_tokens);
    }
    for (size_t k = 0; k < m->ncosts; k++)
      if (lp_bucket_set_find(&m->shapes, m->cost_spec[k].lanes, m->cost_spec[k].bucket) < 0)
        return fail(&x, path, "cost_ms names %ux%u, which is not in its shapes", m->cost_spec[k].lanes,
                    m->cost_spec[k].bucket);
    if (m->ragged && m->ragged_max_tokens > m->max_batch_tokens)
      return fail(&x, path, "ragged_max_tokens is over max_batch_tokens (%llu)",
                  (unsigned long long)m->max_batch_tokens);
    if (m->sentencepiece[0] || m->huggingface[0]) { /* the file loads, with its options, or the check says why */
      char terr[256];
      lp_tok_t *t = lp_config_tok_load(m, terr, sizeof(terr));
      if (!t) {
        char tpath[160];
        if (m->huggingface[0]) {
          snprintf(tpath, sizeof(tpath), "%s.tokenizer.huggingface", path);
          return fail(&x, tpath, "%s", terr);
        }
        snprintf(tpath, sizeof(tpath), "%s.tokenizer", path);
        return fail(&x, tpath, "cannot load the SentencePiece model '%s': %s", m->sentencepiece, terr);
      }
      /* an id the tokenizer makes (its [CLS] as well as a text's) must be one
       * the model takes: else every text is refused as the client's fault */
      int32_t pieces = lp_tok_vocab(t);
      if (m->vocab_size && pieces > m->vocab_size) {
        lp_tok_free(t);
        char vpath[160];
        snprintf(vpath, sizeof(vpath), "%s.vocab_size", path);
        return fail(&x, vpath, "%lld is below its tokenizer's %ld pieces (its ids go up to %ld): raise it to %ld "
                    "or leave it out", (long long)m->vocab_size, (long)pieces, (long)pieces - 1, (long)pieces);
      }
      lp_tei_template_t tpl;
      char tpath[160];
      snprintf(tpath, sizeof(tpath), "%s.tokenizer.pair_template", path);
      int bad_tpl = m->pair_template[0] && lp_tei_template_load(m->pair_template, lp_config_piece_id, t, &tpl,
                                                                 terr, sizeof(terr));
      lp_tok_free(t);
      if (bad_tpl) return fail(&x, tpath, "%s", terr);
    }
  }
  if (c->auth_tokens_file[0]) {
    char **tokens = NULL;
    size_t n = 0;
    char err2[300];
    if (lp_config_read_tokens(c->auth_tokens_file, lp_config_token_max(c), &tokens, &n, err2,
                              sizeof(err2)))
      return fail(&x, "auth_tokens_file", "%s", err2);
    lp_config_free_tokens(tokens, n);
  }
  return 0;
}


/* ---- the listing (doc/configuration.md's tables, checked by the doc test) ---- */

/* Below this a number reads best as it is (16384, 4096); above it, as a
 * whole number of Ki, Mi, Gi or Ti under 1024 where it is one (16 Mi). */
#define LISTING_UNITS_FROM 65536

/* n as the docs write it. */
static void put_number(lp_buf_t *b, double d) {
  static const char *const units[] = {"Ki", "Mi", "Gi", "Ti"};
  uint64_t n = (uint64_t)d;
  int u = -1;
  while (d >= LISTING_UNITS_FROM && n >= 1024 && n % 1024 == 0 && u < 3) {
    n /= 1024;
    u++;
  }
  if (u < 0 || n >= 1024) lp_buf_printf(b, "%llu", (unsigned long long)d);
  else lp_buf_printf(b, "%llu %s", (unsigned long long)n, units[u]);
}

static const char *const apply_words[] = {"at once", "on reload", "at restart"};

static void list_row(lp_buf_t *b, const keydef_t *k, const char *prefix) {
  static const char *const type_words[] = {"integer", "integer", "number", "boolean", "string",
                                           "string",  "object",  "",       "refused"};
  lp_buf_printf(b, "| `%s%s` | %s | ", prefix, k->name, k->type_doc ? k->type_doc : type_words[k->type]);
  if (k->def_doc) lp_buf_puts(b, k->def_doc);
  else if (k->type == KEY_UINT) put_number(b, k->def);
  else if (k->type == KEY_INT32 || k->type == KEY_REAL) lp_buf_printf(b, "%g", k->def);
  else if (k->type == KEY_BOOL) lp_buf_puts(b, k->def ? "true" : "false");
  else if (k->type == KEY_ENUM) lp_buf_printf(b, "`%s`", k->names[(int)k->def]);
  else if (k->type == KEY_STR) lp_buf_printf(b, k->sdef ? "`%s`" : "none", k->sdef);
  lp_buf_puts(b, " | ");
  if (k->range_doc) {
    lp_buf_puts(b, k->range_doc);
  } else if (k->type == KEY_UINT || k->type == KEY_REAL) {
    lp_buf_puts(b, "[");
    if (k->type == KEY_REAL) lp_buf_printf(b, "%g, %g", k->min, k->max);
    else put_number(b, k->min), lp_buf_puts(b, ", "), put_number(b, k->max);
    lp_buf_puts(b, "]");
  } else if (k->type == KEY_INT32) {
    lp_buf_puts(b, "32-bit signed");
  } else if (k->type == KEY_ENUM) {
    for (int i = 0; k->names[i]; i++) lp_buf_printf(b, "%s`%s`", i ? ", " : "", k->names[i]);
  } else if (k->type == KEY_STR) {
    lp_buf_printf(b, "at most %zu bytes", k->size - 1);
  }
  lp_buf_printf(b, " | %s | %s |\n", k->type == KEY_DEAD ? "refused" : apply_words[k->applies], k->doc);
  if (k->type == KEY_OBJ) {
    char sub[64];
    snprintf(sub, sizeof(sub), "%s%s.", prefix, k->name);
    for (const keydef_t *s = k->sub; s->name; s++) list_row(b, s, sub);
  }
}

char *lp_config_keys_doc(void) {
  static const struct {
    const char *title;
    const keydef_t *keys;
  } tables[] = {{"Top level:", top_keys}, {"Per model (`\"models\": {\"NAME\": {...}}`):", model_keys}};
  lp_buf_t b;
  lp_buf_init(&b);
  for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
    lp_buf_printf(&b, "%s%s\n\n| key | type | default | range | applies | what it does |\n"
                      "| --- | --- | --- | --- | --- | --- |\n", t ? "\n" : "", tables[t].title);
    for (const keydef_t *k = tables[t].keys; k->name; k++) list_row(&b, k, "");
  }
  if (b.oom) {
    lp_buf_free(&b);
    return NULL;
  }
  char *s = strdup(lp_buf_cstr(&b));
  lp_buf_free(&b);
  return s;
}

int lp_config_read_tokens(const char *path, size_t max_len, char ***out, size_t *n, char *err,
                          size_t errlen) {
  *out = NULL;
  *n = 0;
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return -EINVAL;
  }
  /* lines of any length (getline): a token is never cut into two */
  char *line = NULL;
  size_t linecap = 0, cap = 0, lineno = 0;
  ssize_t got;
  int rc = 0;
  while ((got = getline(&line, &linecap, f)) >= 0) {
    lineno++;
    size_t len = (size_t)got;
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' ||
                   line[len - 1] == '\t'))
      line[--len] = 0;
    char *t = line;
    while (*t == ' ' || *t == '\t') t++;
    len -= (size_t)(t - line);
    if (!len || *t == '#') continue;
    /* what a client can send after "Bearer ": visible ASCII, no space or NUL */
    for (size_t i = 0; i < len && rc == 0; i++)
      if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f) {
        snprintf(err, errlen, "%s line %zu: a token may hold only visible ASCII characters (byte %zu is not)",
                 path, lineno, i + 1);
        rc = -EINVAL;
      }
    if (rc == 0 && max_len && len > max_len) {
      snprintf(err, errlen, "%s line %zu: a token of %zu bytes cannot be sent within max_header_bytes "
               "(at most %zu bytes after 'Authorization: Bearer ')", path, lineno, len, max_len);
      rc = -EINVAL;
    }
    if (rc) break;
    if (*n == cap) {
      cap = cap ? cap * 2 : 8;
      char **nt = realloc(*out, cap * sizeof(char *));
      if (!nt) {
        rc = -ENOMEM;
        break;
      }
      *out = nt;
    }
    if (!((*out)[*n] = strdup(t))) {
      rc = -ENOMEM;
      break;
    }
    (*n)++;
  }
  free(line);
  fclose(f);
  if (rc == -ENOMEM) snprintf(err, errlen, "%s: out of memory", path);
  if (rc == 0 && *n == 0) {
    snprintf(err, errlen, "%s: no token in the file", path);
    rc = -EINVAL;
  }
  if (rc) {
    lp_config_free_tokens(*out, *n);
    *out = NULL;
    *n = 0;
  }
  return rc;
}

/* Room kept in max_header_bytes for the rest of a request: its url, Host and a
 * few headers count against the limit too (a token that fills it alone can
 * never be sent). */
#define LP_TOKEN_REQUEST_ROOM 256

size_t lp_config_token_max(const lp_config_t *c) {
  /* the header's name and the scheme count against the limit too */
  size_t over = sizeof("Authorization") - 1 + sizeof("Bearer ") - 1 + LP_TOKEN_REQUEST_ROOM;
  return c->max_header_bytes > over ? c->max_header_bytes - over : 1;
}

void lp_config_free_tokens(char **tokens, size_t n) {
  for (size_t i = 0; i < n; i++) free(tokens[i]);
  free(tokens);
}
