/* Configuration: JSON file + flags, every key checked, errors naming the key. */
#include "lanepack/config.h"
#include "lanepack/openai.h"
#include "lanepack/tei.h"
#include "lanepack/tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "lanepack/buf.h"
#include "lanepack/log.h"

void lp_model_config_default(lp_model_config_t *m, const char *name) {
  memset(m, 0, sizeof(*m));
  snprintf(m->name, sizeof(m->name), "%s", name);
  lp_bucket_set_init(&m->shapes);
  m->pad_id = 0;
  m->packer = LP_ALGO_BFD;
  m->max_wait_ms = 5;
  m->max_queue_requests = 10000;
  m->max_queue_tokens = 16u * 1024 * 1024;
  m->max_inflight = 0;
  m->devices = 1;
  m->stall_factor = 3.0;
  m->stall_min_ms = 100;
  m->backend_timeout_ms = 30000;
  m->ragged_max_tokens = 32768;
  m->max_retries = 2;
  m->retry_backoff_ms = 20;
  m->max_queue_bytes = 256ull << 20;
  m->v2.binary = 1;
  snprintf(m->v2.inputs[0], sizeof(m->v2.inputs[0]), "input_ids");
  snprintf(m->v2.inputs[1], sizeof(m->v2.inputs[1]), "segment_ids");
  snprintf(m->v2.inputs[2], sizeof(m->v2.inputs[2]), "position_ids");
  m->max_batch_tokens = 1u << 21;
  m->max_output_value_bytes = 4096;
}

void lp_config_default(lp_config_t *c) {
  memset(c, 0, sizeof(*c));
  snprintf(c->listen, sizeof(c->listen), "127.0.0.1:8080");
  c->log_level = LP_LOG_INFO;
  c->max_header_bytes = 16 * 1024;
  c->max_body_bytes = 8 * 1024 * 1024;
  c->max_connections = 10000;
  c->max_pipeline = 64;
  c->threads = 1;
  c->max_unsent_bytes = 1024 * 1024;
  c->max_unsent_bytes_total = LP_UNSENT_TOTAL_DEFAULT;
  c->idle_timeout_ms = 60000;
  c->request_timeout_ms = 30000;
  c->max_sequences_per_request = 1024;
  c->drain_timeout_ms = 10000;
  c->access_log_sample = 1.0;
  c->health_interval_ms = 1000;
  c->unhealthy_after = 3;
}

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

static int get_u64(ctx_t *x, json_t *v, const char *path, uint64_t min, uint64_t max,
                   uint64_t *out) {
  if (!json_is_integer(v) || json_integer_value(v) < 0 ||
      (uint64_t)json_integer_value(v) < min || (uint64_t)json_integer_value(v) > max)
    return fail(x, path, "must be an integer in [%llu, %llu]", (unsigned long long)min,
                (unsigned long long)max);
  *out = (uint64_t)json_integer_value(v);
  return 0;
}

#define U64_FIELD(x, v, path, min, max, dst)                      \
  do {                                                            \
    uint64_t t_ = 0;                                                \
    if (get_u64(x, v, path, min, max, &t_)) return -EINVAL;       \
    dst = t_;                                                     \
  } while (0)

static int get_str(ctx_t *x, json_t *v, const char *path, char *out, size_t cap) {
  if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) >= cap)
    return fail(x, path, "must be a non-empty string of at most %zu bytes", cap - 1);
  memcpy(out, json_string_value(v), json_string_length(v) + 1);
  return 0;
}

/* The "tokenizer" object of a model: {"sentencepiece": PATH, "extra_options":
 * "bos:eos"} (the library's own encode options), "pair_template" (/rerank's). */
static int load_tokenizer(ctx_t *x, lp_model_config_t *m, json_t *o, const char *tpath) {
  char path[300];
  const char *key;
  json_t *v;
  if (!json_is_object(o)) return fail(x, tpath, "must be an object: {\"sentencepiece\": \"PATH.model\"}");
  json_object_foreach(o, key, v) {
    snprintf(path, sizeof(path), "%s.%s", tpath, key);
    if (strcmp(key, "sentencepiece") == 0) {
      if (get_str(x, v, path, m->sentencepiece, sizeof(m->sentencepiece))) return -EINVAL;
    } else if (strcmp(key, "extra_options") == 0) {
      if (!json_is_string(v) || json_string_length(v) >= sizeof(m->sentencepiece_options))
        return fail(x, path, "must be a string such as \"bos:eos\"");
      memcpy(m->sentencepiece_options, json_string_value(v), json_string_length(v) + 1);
    } else if (strcmp(key, "pair_template") == 0) {
      if (!json_is_string(v) || json_string_length(v) >= sizeof(m->pair_template))
        return fail(x, path, "must be a string such as \"<s> $A </s></s> $B </s>\"");
      memcpy(m->pair_template, json_string_value(v), json_string_length(v) + 1);
    } else {
      return fail(x, path, "unknown key (sentencepiece, extra_options, pair_template)");
    }
  }
  if (!m->sentencepiece[0]) return fail(x, tpath, "needs \"sentencepiece\": the model file's path");
  return 0;
}

/* The "embedding" object of a model: {"normalize": true} gives /v1/embeddings
 * unit-length vectors (as OpenAI's are); {"dimensions": N} says the model's
 * vectors have N values and stay meaningful cut to their first ones (a
 * Matryoshka-trained model), so a request's "dimensions" may ask for fewer. */
static int load_embedding(ctx_t *x, lp_model_config_t *m, json_t *o, const char *epath) {
  char path[300];
  const char *key;
  json_t *v;
  if (!json_is_object(o)) return fail(x, epath, "must be an object: {\"normalize\": true, \"dimensions\": N}");
  json_object_foreach(o, key, v) {
    snprintf(path, sizeof(path), "%s.%s", epath, key);
    if (strcmp(key, "normalize") == 0) {
      if (!json_is_boolean(v)) return fail(x, path, "must be true or false");
      m->embed_normalize = json_is_true(v);
    } else if (strcmp(key, "dimensions") == 0) {
      U64_FIELD(x, v, path, 1, LP_OPENAI_MAX_DIMS, m->embed_dimensions);
    } else {
      return fail(x, path, "unknown key (normalize, dimensions)");
    }
  }
  return 0;
}

/* The "v2" object of a model: how its backends are spoken to. */
static int load_v2(ctx_t *x, lp_v2_config_t *c, json_t *o, const char *vpath) {
  static const char *const input_keys[3] = {"input_ids", "segment_ids", "position_ids"};
  char path[300];
  const char *key;
  json_t *v;
  if (!json_is_object(o)) return fail(x, vpath, "must be an object");
  json_object_foreach(o, key, v) {
    snprintf(path, sizeof(path), "%s.%s", vpath, key);
    if (strcmp(key, "model") == 0) {
      if (get_str(x, v, path, c->model, sizeof(c->model))) return -EINVAL;
    } else if (strcmp(key, "binary") == 0) {
      if (!json_is_boolean(v)) return fail(x, path, "must be true or false");
      c->binary = json_is_true(v);
    } else if (strcmp(key, "output") == 0) {
      if (get_str(x, v, path, c->output, sizeof(c->output))) return -EINVAL;
    } else if (strcmp(key, "output_kind") == 0) {
      const char *s = json_is_string(v) ? json_string_value(v) : "";
      if (strcmp(s, "per_token") == 0) c->per_segment = 0;
      else if (strcmp(s, "per_segment") == 0) c->per_segment = 1;
      else return fail(x, path, "must be \"per_token\" or \"per_segment\"");
    } else if (strcmp(key, "datatype") == 0) {
      const char *s = json_is_string(v) ? json_string_value(v) : "";
      if (strcmp(s, "INT32") == 0) c->int64 = 0;
      else if (strcmp(s, "INT64") == 0) c->int64 = 1;
      else return fail(x, path, "must be \"INT32\" or \"INT64\"");
    } else if (strcmp(key, "inputs") == 0) {
      const char *ik;
      json_t *iv;
      if (!json_is_object(v)) return fail(x, path, "must be an object of input names");
      json_object_foreach(v, ik, iv) {
        char ipath[360];
        snprintf(ipath, sizeof(ipath), "%s.%s", path, ik);
        int k = 0;
        while (k < 3 && strcmp(ik, input_keys[k]) != 0) k++;
        if (k == 3) return fail(x, ipath, "unknown input (input_ids, segment_ids, position_ids)");
        if (json_is_null(iv)) {
          if (k == 0) return fail(x, ipath, "input_ids is always sent");
          c->inputs[k][0] = '\0';
        } else if (get_str(x, iv, ipath, c->inputs[k], sizeof(c->inputs[k]))) {
          return -EINVAL;
        }
      }
    } else {
      return fail(x, path, "unknown key");
    }
  }
  return 0;
}

/* Keys an older release read and the dispatch core does not: refused, with
 * what decides instead, rather than accepted and ignored (an operator would
 * believe they tune it). NULL for any other key. */
static const char *dead_key(const char *key) {
  static const struct {
    const char *key, *why;
  } dead[] = {
      {"fill_target", "the device clock decides when a batch leaves (when its device is expected free, less "
                      "the lead time); max_wait_ms bounds how long a request waits"},
      {"max_bypass", "max_wait_ms bounds how long a request may be passed over (past it, the oldest goes in the "
                     "next rectangle); priority orders the rest"},
      {"balance", "each batch goes to the backend whose device is expected free first (the device clocks), "
                  "healthy backends only"},
  };
  for (size_t i = 0; i < sizeof(dead) / sizeof(dead[0]); i++)
    if (strcmp(key, dead[i].key) == 0) return dead[i].why;
  return NULL;
}

static int load_model(ctx_t *x, lp_model_config_t *m, json_t *o, const char *mpath) {
  const char *why;
  char path[256];
  const char *key;
  json_t *v;
  if (!json_is_object(o)) return fail(x, mpath, "must be an object");
  json_object_foreach(o, key, v) {
    snprintf(path, sizeof(path), "%s.%s", mpath, key);
    if (strcmp(key, "shapes") == 0) {
      char err[160];
      lp_bucket_set_init(&m->shapes);
      if (json_is_string(v)) {
        if (lp_bucket_set_parse(&m->shapes, json_string_value(v), err, sizeof(err)))
          return fail(x, path, "%s", err);
      } else if (json_is_array(v) && json_array_size(v) > 0) {
        size_t i;
        json_t *s;
        json_array_foreach(v, i, s) {
          if (json_is_string(s)) {
            if (lp_bucket_set_parse(&m->shapes, json_string_value(s), err, sizeof(err)))
              return fail(x, path, "%s", err);
          } else if (json_is_array(s) && json_array_size(s) == 2 &&
                     json_is_integer(json_array_get(s, 0)) && json_is_integer(json_array_get(s, 1))) {
            json_int_t l = json_integer_value(json_array_get(s, 0));
            json_int_t b = json_integer_value(json_array_get(s, 1));
            if (l < 1 || l > 65536 || b < 1 || b > (1 << 24) ||
                lp_bucket_set_add(&m->shapes, (uint32_t)l, (uint32_t)b) < 0)
              return fail(x, path, "bad shape [%lld, %lld]", (long long)l, (long long)b);
          } else {
            return fail(x, path, "each shape is \"LANESxBUCKET\" or [lanes, bucket]");
          }
        }
      } else {
        return fail(x, path, "must be \"4x8192,8x2048\" or a non-empty list of shapes");
      }
    } else if (strcmp(key, "backends") == 0) {
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
        if (get_str(x, s, bp, m->backends[m->nbackends], LP_URL_MAX)) {
          json_decref(v);
          return -EINVAL;
        }
        const char *u = m->backends[m->nbackends];
        if (strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0) {
          json_decref(v);
          return fail(x, bp, "must start with http:// or https://");
        }
        /* no trailing slash: paths are appended */
        size_t n = strlen(m->backends[m->nbackends]);
        while (n > 8 && m->backends[m->nbackends][n - 1] == '/') m->backends[m->nbackends][--n] = 0;
        m->nbackends++;
      }
      json_decref(v);
    } else if (strcmp(key, "pad_id") == 0) {
      if (!json_is_integer(v) || json_integer_value(v) < INT32_MIN || json_integer_value(v) > INT32_MAX)
        return fail(x, path, "must be a 32-bit integer");
      m->pad_id = (int32_t)json_integer_value(v);
    } else if (strcmp(key, "vocab_size") == 0) {
      U64_FIELD(x, v, path, 0, 2147483648ull, m->vocab_size);
    } else if (strcmp(key, "packer") == 0) {
      int a = json_is_string(v) ? lp_algo_parse(json_string_value(v)) : -1;
      if (a < 0) return fail(x, path, "must be \"ffd\", \"bfd\" or \"spfhp\"");
      m->packer = (lp_algo_t)a;
    } else if (strcmp(key, "max_segments_per_lane") == 0) {
      U64_FIELD(x, v, path, 0, 1u << 24, m->max_segments_per_lane);
    } else if (strcmp(key, "max_wait_ms") == 0) {
      U64_FIELD(x, v, path, 0, 3600000, m->max_wait_ms);
    } else if (strcmp(key, "max_queue_requests") == 0) {
      U64_FIELD(x, v, path, 1, 10000000, m->max_queue_requests);
    } else if (strcmp(key, "max_queue_tokens") == 0) {
      U64_FIELD(x, v, path, 1, 1ull << 40, m->max_queue_tokens);
    } else if (strcmp(key, "stall_min_ms") == 0) {
      U64_FIELD(x, v, path, 0, 3600000, m->stall_min_ms);
    } else if (strcmp(key, "stall_factor") == 0) {
      if (!json_is_number(v) || !(json_number_value(v) == 0 || (json_number_value(v) >= 1.5 && json_number_value(v) <= 1000)))
        return fail(x, path, "must be 0 (never hedge) or a number in [1.5, 1000]");
      m->stall_factor = json_number_value(v);
    } else if (strcmp(key, "devices") == 0) {
      U64_FIELD(x, v, path, 1, 64, m->devices);
    } else if (strcmp(key, "cost_ms") == 0) {
      /* {"4x8192": 20, ...}: matched to the shapes once both are read */
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
        if (m->ncosts == sizeof(m->cost_spec) / sizeof(m->cost_spec[0]))
          return fail(x, cpath, "too many shapes");
        m->cost_spec[m->ncosts].lanes = one.shapes[0].lanes;
        m->cost_spec[m->ncosts].bucket = one.shapes[0].bucket;
        m->cost_spec[m->ncosts++].ms = (uint64_t)json_integer_value(sv);
      }
    } else if (strcmp(key, "max_inflight") == 0) {
      U64_FIELD(x, v, path, 1, 1024, m->max_inflight);
    } else if (strcmp(key, "backend_timeout_ms") == 0) {
      U64_FIELD(x, v, path, 1, 3600000, m->backend_timeout_ms);
    } else if (strcmp(key, "max_request_ms") == 0) {
      U64_FIELD(x, v, path, 0, 86400000, m->max_request_ms);
    } else if (strcmp(key, "max_queue_bytes") == 0) {
      U64_FIELD(x, v, path, 1 << 20, 1ull << 40, m->max_queue_bytes);
    } else if (strcmp(key, "max_batch_tokens") == 0) {
      U64_FIELD(x, v, path, 1, 1ull << 26, m->max_batch_tokens);
    } else if (strcmp(key, "max_output_value_bytes") == 0) {
      U64_FIELD(x, v, path, 16, 16u << 20, m->max_output_value_bytes);
    } else if (strcmp(key, "max_retries") == 0) {
      U64_FIELD(x, v, path, 0, 100, m->max_retries);
    } else if (strcmp(key, "retry_backoff_ms") == 0) {
      U64_FIELD(x, v, path, 0, 60000, m->retry_backoff_ms);
    } else if (strcmp(key, "default_deadline_ms") == 0) {
      U64_FIELD(x, v, path, 0, 3600000, m->default_deadline_ms);
    } else if (strcmp(key, "ragged") == 0) {
      if (!json_is_boolean(v)) return fail(x, path, "must be true or false");
      m->ragged = json_is_true(v);
    } else if (strcmp(key, "ragged_max_tokens") == 0) {
      U64_FIELD(x, v, path, 1, 1u << 24, m->ragged_max_tokens);
    } else if (strcmp(key, "protocol") == 0) {
      const char *s = json_is_string(v) ? json_string_value(v) : "";
      if (strcmp(s, "lanepack") == 0) m->protocol = LP_PROTO_LANEPACK;
      else if (strcmp(s, "v2") == 0) m->protocol = LP_PROTO_V2;
      else return fail(x, path, "must be \"lanepack\" or \"v2\"");
    } else if (strcmp(key, "v2") == 0) {
      if (load_v2(x, &m->v2, v, path)) return -EINVAL;
    } else if (strcmp(key, "tokenizer") == 0) {
      if (load_tokenizer(x, m, v, path)) return -EINVAL;
    } else if (strcmp(key, "embedding") == 0) {
      if (load_embedding(x, m, v, path)) return -EINVAL;
    } else if ((why = dead_key(key)) != NULL) {
      return fail(x, path, "is no longer used: %s", why);
    } else {
      return fail(x, path, "unknown key");
    }
  }
  return 0;
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
  int rc = 0;
  const char *key;
  json_t *v;
  if (!json_is_object(root)) rc = fail(&x, "(top)", "must be a JSON object");
  json_object_foreach(root, key, v) {
    if (rc) break;
    if (strcmp(key, "listen") == 0) rc = get_str(&x, v, key, c->listen, sizeof(c->listen));
    else if (strcmp(key, "admin_listen") == 0)
      rc = get_str(&x, v, key, c->admin_listen, sizeof(c->admin_listen));
    else if (strcmp(key, "auth_tokens_file") == 0)
      rc = get_str(&x, v, key, c->auth_tokens_file, sizeof(c->auth_tokens_file));
    else if (strcmp(key, "access_log") == 0)
      rc = get_str(&x, v, key, c->access_log, sizeof(c->access_log));
    else if (strcmp(key, "access_log_sample") == 0) {
      if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 1)
        rc = fail(&x, key, "must be a number in [0, 1]");
      else
        c->access_log_sample = json_number_value(v);
    }
    else if (strcmp(key, "log_level") == 0) {
      int l = json_is_string(v) ? lp_log_parse_level(json_string_value(v)) : -1;
      if (l < 0) rc = fail(&x, key, "must be \"debug\", \"info\", \"warn\" or \"error\"");
      else c->log_level = l;
    } else if (strcmp(key, "max_header_bytes") == 0) {
      uint64_t t = 0;
      if (!(rc = get_u64(&x, v, key, 256, 1u << 20, &t))) c->max_header_bytes = t;
    } else if (strcmp(key, "max_body_bytes") == 0) {
      uint64_t t = 0;
      if (!(rc = get_u64(&x, v, key, 64, 1ull << 32, &t))) c->max_body_bytes = t;
    } else if (strcmp(key, "max_connections") == 0) {
      uint64_t t = 0;
      if (!(rc = get_u64(&x, v, key, 1, 1000000, &t))) c->max_connections = t;
    } else if (strcmp(key, "max_body_bytes_in_flight") == 0) {
      uint64_t t = 0;
      if (!(rc = get_u64(&x, v, key, 64, 1ull << 40, &t))) c->max_body_bytes_in_flight = t;
    } else if (strcmp(key, "max_unsent_bytes") == 0) {
      uint64_t t = 0;
      if (!(rc = get_u64(&x, v, key, 4096, 1ull << 32, &t))) c->max_unsent_bytes = t;
    } else if (strcmp(key, "max_unsent_bytes_total") == 0) {
      uint64_t t = 0; /* at least a few streamed answers' pieces (64 KiB each) */
      if (!(rc = get_u64(&x, v, key, 1u << 20, 1ull << 40, &t))) c->max_unsent_bytes_total = t;
    } else if (strcmp(key, "max_pipeline") == 0) {
      uint64_t t = 0;
      if (!(rc = get_u64(&x, v, key, 1, 100000, &t))) c->max_pipeline = t;
    } else if (strcmp(key, "max_requests_per_connection") == 0) {
      rc = get_u64(&x, v, key, 0, UINT32_MAX, &c->max_requests_per_connection);
    } else if (strcmp(key, "idle_timeout_ms") == 0) {
      rc = get_u64(&x, v, key, 0, 86400000, &c->idle_timeout_ms);
    } else if (strcmp(key, "request_timeout_ms") == 0) {
      rc = get_u64(&x, v, key, 0, 86400000, &c->request_timeout_ms);
    } else if (strcmp(key, "max_sequences_per_request") == 0) {
      uint64_t t = 0;
      if (!(rc = get_u64(&x, v, key, 1, 1000000, &t))) c->max_sequences_per_request = (uint32_t)t;
    } else if (strcmp(key, "drain_timeout_ms") == 0) {
      rc = get_u64(&x, v, key, 0, 3600000, &c->drain_timeout_ms);
    } else if (strcmp(key, "threads") == 0) {
      uint64_t t = 0;
      if (!(rc = get_u64(&x, v, key, 0, LP_MAX_THREADS, &t))) c->threads = (uint32_t)t;
    } else if (strcmp(key, "drain_delay_ms") == 0) {
      rc = get_u64(&x, v, key, 0, 3600000, &c->drain_delay_ms);
    } else if (strcmp(key, "health_interval_ms") == 0) {
      rc = get_u64(&x, v, key, 10, 3600000, &c->health_interval_ms);
    } else if (strcmp(key, "unhealthy_after") == 0) {
      uint64_t t = 0;
      if (!(rc = get_u64(&x, v, key, 1, 1000, &t))) c->unhealthy_after = (uint32_t)t;
    } else if (strcmp(key, "models") == 0) {
      if (!json_is_object(v) || json_object_size(v) == 0) {
        rc = fail(&x, key, "must be an object of models by name");
        break;
      }
      const char *mname;
      json_t *mo;
      json_object_foreach(v, mname, mo) {
        char mpath[128];
        snprintf(mpath, sizeof(mpath), "models.%s", mname);
        if (strlen(mname) == 0 || strlen(mname) >= LP_NAME_MAX || strchr(mname, '/')) {
          rc = fail(&x, mpath, "a model name is 1 to %d bytes without '/'", LP_NAME_MAX - 1);
          break;
        }
        lp_model_config_t *m = (lp_model_config_t *)lp_config_model(c, mname);
        if (!m) {
          if (c->nmodels == LP_MAX_MODELS) {
            rc = fail(&x, mpath, "too many models (at most %d)", LP_MAX_MODELS);
            break;
          }
          m = &c->models[c->nmodels++];
          lp_model_config_default(m, mname);
        }
        if ((rc = load_model(&x, m, mo, mpath))) break;
      }
    } else {
      rc = fail(&x, key, "unknown key");
    }
  }
  json_decref(root);
  return rc;
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
    if (m->sentencepiece[0]) { /* the file loads, with its options, or the check says why */
      char terr[256];
      lp_tok_t *t = lp_tok_load(m->sentencepiece, m->sentencepiece_options, terr, sizeof(terr));
      if (!t) {
        char tpath[160];
        snprintf(tpath, sizeof(tpath), "%s.tokenizer", path);
        return fail(&x, tpath, "cannot load the SentencePiece model '%s': %s", m->sentencepiece, terr);
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

char *lp_config_dump(const lp_config_t *c) {
  json_t *root = json_object();
  json_object_set_new(root, "listen", json_string(c->listen));
  json_object_set_new(root, "admin_listen", json_string(c->admin_listen));
  json_object_set_new(root, "auth_tokens_file", json_string(c->auth_tokens_file));
  json_object_set_new(root, "access_log", json_string(c->access_log));
  json_object_set_new(root, "access_log_sample", json_real(c->access_log_sample));
  json_object_set_new(root, "log_level", json_string(lp_log_level_name(c->log_level)));
  json_object_set_new(root, "max_header_bytes", json_integer((json_int_t)c->max_header_bytes));
  json_object_set_new(root, "max_body_bytes", json_integer((json_int_t)c->max_body_bytes));
  json_object_set_new(root, "max_connections", json_integer((json_int_t)c->max_connections));
  json_object_set_new(root, "max_pipeline", json_integer((json_int_t)c->max_pipeline));
  json_object_set_new(root, "max_unsent_bytes", json_integer((json_int_t)c->max_unsent_bytes));
  json_object_set_new(root, "max_unsent_bytes_total", json_integer((json_int_t)c->max_unsent_bytes_total));
  json_object_set_new(root, "max_body_bytes_in_flight", json_integer((json_int_t)lp_config_body_budget(c)));
  json_object_set_new(root, "idle_timeout_ms", json_integer((json_int_t)c->idle_timeout_ms));
  json_object_set_new(root, "max_requests_per_connection",
                      json_integer((json_int_t)c->max_requests_per_connection));
  json_object_set_new(root, "request_timeout_ms", json_integer((json_int_t)c->request_timeout_ms));
  json_object_set_new(root, "max_sequences_per_request",
                      json_integer(c->max_sequences_per_request));
  json_object_set_new(root, "drain_timeout_ms", json_integer((json_int_t)c->drain_timeout_ms));
  json_object_set_new(root, "drain_delay_ms", json_integer((json_int_t)c->drain_delay_ms));
  json_object_set_new(root, "threads", json_integer((json_int_t)c->threads));
  json_object_set_new(root, "health_interval_ms", json_integer((json_int_t)c->health_interval_ms));
  json_object_set_new(root, "unhealthy_after", json_integer(c->unhealthy_after));
  json_t *models = json_object();
  for (size_t i = 0; i < c->nmodels; i++) {
    const lp_model_config_t *m = &c->models[i];
    json_t *o = json_object();
    json_t *shapes = json_array();
    for (size_t s = 0; s < m->shapes.count; s++) {
      char spec[40];
      snprintf(spec, sizeof(spec), "%ux%u", m->shapes.shapes[s].lanes, m->shapes.shapes[s].bucket);
      json_array_append_new(shapes, json_string(spec));
    }
    json_object_set_new(o, "shapes", shapes);
    json_t *bk = json_array();
    for (size_t b = 0; b < m->nbackends; b++) json_array_append_new(bk, json_string(m->backends[b]));
    json_object_set_new(o, "backends", bk);
    json_object_set_new(o, "pad_id", json_integer(m->pad_id));
    json_object_set_new(o, "vocab_size", json_integer(m->vocab_size));
    json_object_set_new(o, "packer", json_string(lp_algo_name(m->packer)));
    json_object_set_new(o, "max_segments_per_lane", json_integer(m->max_segments_per_lane));
    json_object_set_new(o, "max_wait_ms", json_integer((json_int_t)m->max_wait_ms));
    json_object_set_new(o, "max_queue_requests", json_integer((json_int_t)m->max_queue_requests));
    json_object_set_new(o, "max_queue_tokens", json_integer((json_int_t)m->max_queue_tokens));
    json_object_set_new(o, "max_inflight", json_integer(m->max_inflight));
    json_object_set_new(o, "devices", json_integer(m->devices));
    json_object_set_new(o, "stall_factor", json_real(m->stall_factor));
    json_object_set_new(o, "stall_min_ms", json_integer((json_int_t)m->stall_min_ms));
    json_t *costs = json_object();
    for (size_t k = 0; k < m->ncosts; k++) {
      char spec[48];
      snprintf(spec, sizeof(spec), "%ux%u", m->cost_spec[k].lanes, m->cost_spec[k].bucket);
      json_object_set_new(costs, spec, json_integer((json_int_t)m->cost_spec[k].ms));
    }
    json_object_set_new(o, "cost_ms", costs);
    json_object_set_new(o, "backend_timeout_ms", json_integer((json_int_t)m->backend_timeout_ms));
    json_object_set_new(o, "default_deadline_ms", json_integer((json_int_t)m->default_deadline_ms));
    json_object_set_new(o, "max_retries", json_integer(m->max_retries));
    json_object_set_new(o, "retry_backoff_ms", json_integer((json_int_t)m->retry_backoff_ms));
    json_object_set_new(o, "max_request_ms", json_integer((json_int_t)m->max_request_ms));
    json_object_set_new(o, "max_queue_bytes", json_integer((json_int_t)m->max_queue_bytes));
    json_object_set_new(o, "max_batch_tokens", json_integer((json_int_t)m->max_batch_tokens));
    json_object_set_new(o, "max_output_value_bytes", json_integer((json_int_t)m->max_output_value_bytes));
    json_object_set_new(o, "protocol", json_string(m->protocol == LP_PROTO_V2 ? "v2" : "lanepack"));
    if (m->protocol == LP_PROTO_V2) {
      json_t *v2 = json_object();
      json_object_set_new(v2, "model", json_string(m->v2.model[0] ? m->v2.model : m->name));
      json_object_set_new(v2, "binary", json_boolean(m->v2.binary));
      json_object_set_new(v2, "output", m->v2.output[0] ? json_string(m->v2.output) : json_null());
      json_object_set_new(v2, "output_kind", json_string(m->v2.per_segment ? "per_segment" : "per_token"));
      json_object_set_new(v2, "datatype", json_string(m->v2.int64 ? "INT64" : "INT32"));
      json_t *in = json_object();
      static const char *const keys[3] = {"input_ids", "segment_ids", "position_ids"};
      for (int k = 0; k < 3; k++)
        json_object_set_new(in, keys[k], m->v2.inputs[k][0] ? json_string(m->v2.inputs[k]) : json_null());
      json_object_set_new(v2, "inputs", in);
      json_object_set_new(o, "v2", v2);
    }
    if (m->sentencepiece[0]) {
      json_t *tk = json_object();
      json_object_set_new(tk, "sentencepiece", json_string(m->sentencepiece));
      json_object_set_new(tk, "extra_options", json_string(m->sentencepiece_options));
      if (m->pair_template[0]) json_object_set_new(tk, "pair_template", json_string(m->pair_template));
      json_object_set_new(o, "tokenizer", tk);
    }
    if (m->embed_normalize || m->embed_dimensions) {
      json_t *em = json_object();
      json_object_set_new(em, "normalize", json_boolean(m->embed_normalize));
      if (m->embed_dimensions) json_object_set_new(em, "dimensions", json_integer(m->embed_dimensions));
      json_object_set_new(o, "embedding", em);
    }
    json_object_set_new(o, "ragged", json_boolean(m->ragged));
    json_object_set_new(o, "ragged_max_tokens", json_integer(m->ragged_max_tokens));
    json_object_set_new(models, m->name, o);
  }
  json_object_set_new(root, "models", models);
  char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(root);
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
