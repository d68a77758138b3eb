/* lanepack-packbench: packs a length mix with each algorithm and with the
 * strategies peers use (pad to bucket, pad to longest), and prints fill, batches,
 * the lower bound and speed side by side; --advise K proposes a shape set. */
#include <errno.h>

#ifndef LP_VERSION
#define LP_VERSION "0.1.0"
#endif

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lanepack/advisor.h"
#include "lanepack/bucket.h"
#include "lanepack/lengths.h"
#include "lanepack/packer.h"
#include "baseline-sched.h"

typedef struct {
  char algo[32];
  double fill;
  uint64_t batches, lower_bound, rejected;
  double seqs_per_s;
} row_t;

typedef struct {
  const uint32_t *lens;  /* admitted sequences, arrival order */
  size_t n;
  uint64_t tokens;
  const lp_bucket_set_t *set;
  int *shape_of;         /* per sequence: smallest shape that fits */
  uint32_t max_segments;
} input_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: lanepack-packbench --lengths FILE|MIX [--shapes 4x8192,...] [--algo NAME]...\n"
          "         [--count N] [--seed S] [--max-segments N] [--batch N] [--json]\n"
          "       lanepack-packbench --lengths FILE|MIX --advise K [--shapes ...]\n"
          "         [--max-bucket N] [--granule G] [--token-budget T]\n"
          "MIX: fixed:N | uniform:A,B | lognormal:mu=M,sigma=S[,max=X] | zipf:s=S,max=X,\n"
          "     parts joined by '+', each with an optional weight: 0.9*...+0.1*...\n"
          "NAME: ffd, bfd, spfhp (default: all), plus the online scheduler and peers' padding\n");
}

/* Groups sequences by shape and packs each group with unlimited lanes. */
static int run_offline(lp_packer_t *pk, lp_algo_t algo, const input_t *in, row_t *row) {
  const lp_bucket_set_t *set = in->set;
  uint32_t *lens = malloc((in->n + 1) * sizeof(uint32_t));
  lp_place_t *place = malloc((in->n + 1) * sizeof(lp_place_t));
  if (!lens || !place) {
    free(lens);
    free(place);
    return -ENOMEM;
  }
  double slots = 0;
  uint64_t batches = 0, bound = 0;
  double elapsed = 0;
  int reps = 0;
  do {
    slots = 0;
    batches = bound = 0;
    double t0 = now_s();
    for (size_t s = 0; s < set->count; s++) {
      size_t m = 0;
      uint64_t tok = 0;
      for (size_t i = 0; i < in->n; i++)
        if (in->shape_of[i] == (int)s) {
          lens[m++] = in->lens[i];
          tok += in->lens[i];
        }
      if (m == 0) continue;
      const lp_shape_t *sh = &set->shapes[s];
      lp_pack_params_t prm = {.capacity = sh->bucket, .max_segments = in->max_segments};
      uint32_t bins;
      long placed = lp_packer_pack(pk, algo, &prm, lens, m, place, &bins);
      if (placed < 0 || (size_t)placed != m) {
        free(lens);
        free(place);
        return placed < 0 ? (int)placed : -EPROTO;
      }
      uint64_t rects = (bins + sh->lanes - 1) / sh->lanes;
      uint64_t cap = (uint64_t)sh->lanes * sh->bucket;
      batches += rects;
      slots += (double)rects * cap;
      bound += (tok + cap - 1) / cap;
    }
    elapsed += now_s() - t0;
    reps++;
  } while (elapsed < 0.3 && reps < 1000);
  free(lens);
  free(place);
  snprintf(row->algo, sizeof(row->algo), "%s", lp_algo_name(algo));
  row->fill = slots > 0 ? (double)in->tokens / slots : 0;
  row->batches = batches;
  row->lower_bound = bound;
  row->seqs_per_s = elapsed > 0 ? (double)in->n * reps / elapsed : 0;
  return 0;
}

/* Feeds the whole stream through the online scheduler, as the proxy does under
 * a backlog: each decision sees a window of the queue, and a dispatched batch's
 * sequences leave it. */
static int run_online(lp_algo_t algo, const input_t *in, row_t *row) {
  lp_baseline_config_t cfg = {.algo = algo, .fill_target = 0.0, .max_wait_ns = UINT64_MAX / 4,
                              .max_bypass = 8, .max_segments = in->max_segments};
  lp_baseline_t *s = lp_baseline_new(&cfg);
  lp_baseline_item_t *q = malloc((in->n + 1) * sizeof(*q));
  if (!s || !q) {
    lp_baseline_free(s);
    free(q);
    return -ENOMEM;
  }
  for (size_t i = 0; i < in->n; i++) q[i] = (lp_baseline_item_t){.len = in->lens[i]};
  size_t qn = in->n;
  double slots = 0;
  uint64_t batches = 0, shape_tokens[LP_BUCKET_MAX_SHAPES] = {0};
  int rc = 0;
  double t0 = now_s();
  while (qn > 0) {
    lp_baseline_plan_t plan;
    rc = lp_baseline_decide(s, in->set, q, qn, 1, &plan);
    if (rc) break;
    if (plan.action != LP_BASELINE_DISPATCH) {
      rc = -EPROTO;
      break;
    }
    const lp_shape_t *sh = &in->set->shapes[plan.shape];
    batches++;
    slots += (double)sh->lanes * sh->bucket;
    shape_tokens[plan.shape] += plan.real_tokens;
    size_t w = 0;
    for (size_t i = 0; i < qn; i++)
      if (i >= plan.n || plan.place[i].bin < 0) q[w++] = q[i];
    qn = w;
  }
  double elapsed = now_s() - t0;
  lp_baseline_free(s);
  free(q);
  if (rc) return rc;
  /* the bound for the same split of tokens across shapes */
  uint64_t bound = 0;
  for (size_t i = 0; i < in->set->count; i++) {
    uint64_t cap = (uint64_t)in->set->shapes[i].lanes * in->set->shapes[i].bucket;
    bound += (shape_tokens[i] + cap - 1) / cap;
  }
  snprintf(row->algo, sizeof(row->algo), "online-%s", lp_algo_name(algo));
  row->fill = slots > 0 ? (double)in->tokens / slots : 0;
  row->batches = batches;
  row->lower_bound = bound;
  row->seqs_per_s = elapsed > 0 ? (double)in->n / elapsed : 0;
  return 0;
}

/* JetStream-style prefill buckets: one sequence per lane of the smallest fit. */
static void run_pad_bucket(const input_t *in, row_t *row) {
  const lp_bucket_set_t *set = in->set;
  double t0 = now_s(), slots = 0;
  uint64_t batches = 0, bound = 0;
  for (size_t s = 0; s < set->count; s++) {
    uint64_t m = 0, tok = 0;
    for (size_t i = 0; i < in->n; i++)
      if (in->shape_of[i] == (int)s) {
        m++;
        tok += in->lens[i];
      }
    const lp_shape_t *sh = &set->shapes[s];
    uint64_t rects = (m + sh->lanes - 1) / sh->lanes, cap = (uint64_t)sh->lanes * sh->bucket;
    batches += rects;
    slots += (double)rects * cap;
    bound += (tok + cap - 1) / cap;
  }
  double el = now_s() - t0;
  snprintf(row->algo, sizeof(row->algo), "pad-bucket");
  row->fill = slots > 0 ? (double)in->tokens / slots : 0;
  row->batches = batches;
  row->lower_bound = bound;
  row->seqs_per_s = el > 0 ? (double)in->n / el : 0;
}

/* Dynamic batchers (Triton, TEI): N requests in arrival order, padded to the
 * longest of them. */
static void run_pad_longest(const input_t *in, uint32_t batch, uint64_t bound, row_t *row) {
  double t0 = now_s(), slots = 0;
  uint64_t batches = 0;
  for (size_t i = 0; i < in->n; i += batch) {
    size_t e = i + batch < in->n ? i + batch : in->n;
    uint32_t longest = 0;
    for (size_t j = i; j < e; j++)
      if (in->lens[j] > longest) longest = in->lens[j];
    slots += (double)(e - i) * longest;
    batches++;
  }
  double el = now_s() - t0;
  snprintf(row->algo, sizeof(row->algo), "pad-longest-%u", batch);
  row->fill = slots > 0 ? (double)in->tokens / slots : 0;
  row->batches = batches;
  row->lower_bound = bound;
  row->seqs_per_s = el > 0 ? (double)in->n / el : 0;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

static int advise(const uint32_t *all, size_t n, const lp_bucket_set_t *set, uint32_t k,
                  uint32_t max_bucket, uint32_t granule, uint64_t budget, uint32_t max_segments,
                  int json) {
  lp_lenhist_t h;
  if (lp_lenhist_init(&h, max_bucket)) return -ENOMEM;
  for (size_t i = 0; i < n; i++) lp_lenhist_add(&h, all[i], 1);
  lp_packer_t *pk = lp_packer_new();
  lp_advice_t a[2];
  int rc = pk ? 0 : -ENOMEM;
  for (int o = 0; o < 2 && rc == 0; o++) {
    lp_advise_params_t prm = {.objective = (lp_advise_objective_t)o, .k = k,
                              .max_bucket = max_bucket, .token_budget = budget,
                              .granule = granule, .max_segments = max_segments};
    rc = lp_advise(pk, &h, &prm, set, &a[o]);
  }
  lp_packer_free(pk);
  lp_lenhist_free(&h);
  if (rc) {
    fprintf(stderr, "lanepack-packbench: advise: %s\n",
            rc == -ENODATA ? "no sequence fits the largest bucket" : strerror(-rc));
    return rc;
  }
  static const char *names[2] = {"padded", "packed"};
  if (json) {
    printf("{\"advice\": [");
    for (int o = 0; o < 2; o++) {
      printf("%s{\"objective\": \"%s\", \"shapes\": [", o ? ", " : "", names[o]);
      for (size_t i = 0; i < a[o].k; i++)
        printf("%s[%u, %u]", i ? ", " : "", a[o].lanes[i], a[o].bucket[i]);
      printf("], \"padded_fill\": %.4f, \"packed_fill\": %.4f, \"current_padded_fill\": %.4f, "
             "\"current_packed_fill\": %.4f, \"sequences\": %llu, \"rejected\": %llu}",
             a[o].padded_fill, a[o].packed_fill, a[o].current_padded_fill,
             a[o].current_packed_fill, (unsigned long long)a[o].sequences,
             (unsigned long long)a[o].rejected);
    }
    printf("]}\n");
    return 0;
  }
  printf("bucket advice for up to %u shapes (token budget %llu per batch, granule %u)\n", k,
         (unsigned long long)budget, granule);
  printf("%-22s %-34s %11s %11s\n", "objective", "shapes", "padded-fill", "packed-fill");
  for (int o = 0; o < 2; o++) {
    char shapes[256] = "";
    size_t at = 0;
    for (size_t i = 0; i < a[o].k && at < sizeof(shapes); i++)
      at += (size_t)snprintf(shapes + at, sizeof(shapes) - at, "%s%ux%u", i ? "," : "",
                             a[o].lanes[i], a[o].bucket[i]);
    printf("%-22s %-34s %11.4f %11.4f\n", o ? "least padding, packed" : "least padding, unpacked",
           shapes, a[o].padded_fill, a[o].packed_fill);
  }
  char cur[256] = "";
  size_t at = 0;
  for (size_t i = 0; i < set->count && at < sizeof(cur); i++)
    at += (size_t)snprintf(cur + at, sizeof(cur) - at, "%s%ux%u", i ? "," : "",
                           set->shapes[i].lanes, set->shapes[i].bucket);
  printf("%-22s %-34s %11.4f %11.4f\n", "current", cur, a[0].current_padded_fill,
         a[0].current_packed_fill);
  printf("sequences %llu, rejected (over %u tokens) %llu\n", (unsigned long long)a[0].sequences,
         max_bucket, (unsigned long long)a[0].rejected);
  return 0;
}

int main(int argc, char **argv) {
  const char *lengths = NULL, *shapes = "4x8192";
  int algos[LP_ALGO_COUNT], nalgo = 0, json = 0;
  unsigned long count = 20000, seed = 1, max_segments = 0, batch = 0, adv = 0, max_bucket = 0,
                granule = 128, budget = 0;
  static const struct option opts[] = {
      {"lengths", required_argument, 0, 'l'}, {"shapes", required_argument, 0, 's'},
      {"algo", required_argument, 0, 'a'},    {"count", required_argument, 0, 'n'},
      {"seed", required_argument, 0, 'S'},    {"max-segments", required_argument, 0, 'm'},
      {"batch", required_argument, 0, 'b'},   {"json", no_argument, 0, 'j'},
      {"advise", required_argument, 0, 'A'},  {"max-bucket", required_argument, 0, 'M'},
      {"granule", required_argument, 0, 'g'}, {"token-budget", required_argument, 0, 'T'},
      {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, 'Z'},          {0, 0, 0, 0}};
  int c, idx = 0;
  while ((c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
    unsigned long *num = NULL;
    switch (c) {
      case 'l': lengths = optarg; break;
      case 's': shapes = optarg; break;
      case 'a': {
        int a = lp_algo_parse(optarg);
        if (a < 0) {
          fprintf(stderr, "lanepack-packbench: unknown --algo '%s' (ffd, bfd, spfhp)\n", optarg);
          return 2;
        }
        if (nalgo < LP_ALGO_COUNT) algos[nalgo++] = a;
        break;
      }
      case 'n': num = &count; break;
      case 'S': num = &seed; break;
      case 'm': num = &max_segments; break;
      case 'b': num = &batch; break;
      case 'A': num = &adv; break;
      case 'M': num = &max_bucket; break;
      case 'g': num = &granule; break;
      case 'T': num = &budget; break;
      case 'j': json = 1; break;
      case 'Z': printf("%s %s\n", "lanepack-packbench", LP_VERSION); return 0;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
    if (num) {
      char *end;
      errno = 0;
      *num = strtoul(optarg, &end, 10);
      if (*end || errno || optarg[0] == '-' || optarg[0] == '\0') {
        fprintf(stderr, "lanepack-packbench: --%s wants a non-negative integer, got '%s'\n",
                opts[idx].name, optarg);
        return 2;
      }
    }
  }
  if (optind < argc) {
    fprintf(stderr, "lanepack-packbench: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  if (!lengths) {
    usage(stderr);
    return 2;
  }
  char err[256];
  lp_bucket_set_t set;
  lp_bucket_set_init(&set);
  if (lp_bucket_set_parse(&set, shapes, err, sizeof(err))) {
    fprintf(stderr, "lanepack-packbench: --shapes: %s\n", err);
    return 2;
  }
  if (adv > LP_ADVISE_MAX_K || granule == 0 || count == 0) {
    fprintf(stderr, "lanepack-packbench: --advise wants 1..%d, --granule and --count > 0\n",
            LP_ADVISE_MAX_K);
    return 2;
  }
  lp_lengths_t src;
  if (lp_lengths_load(&src, lengths, err, sizeof(err))) {
    fprintf(stderr, "lanepack-packbench: --lengths: %s\n", err);
    return 2;
  }
  size_t total = src.count ? src.count : count;
  uint32_t *all = malloc(total * sizeof(uint32_t));
  uint32_t *lens = malloc(total * sizeof(uint32_t));
  int *shape_of = malloc(total * sizeof(int));
  if (!all || !lens || !shape_of) {
    fprintf(stderr, "lanepack-packbench: out of memory\n");
    return 1;
  }
  lp_rng_t rng;
  lp_rng_seed(&rng, seed);
  lp_lengths_fill(&src, &rng, all, total);
  lp_lengths_free(&src);

  uint32_t maxb = lp_bucket_set_max_len(&set);
  uint64_t cap_max = 0;
  for (size_t i = 0; i < set.count; i++) {
    uint64_t cap = (uint64_t)set.shapes[i].lanes * set.shapes[i].bucket;
    if (cap > cap_max) cap_max = cap;
  }
  if (adv) {
    int rc = advise(all, total, &set, (uint32_t)adv, max_bucket ? (uint32_t)max_bucket : maxb,
                    (uint32_t)granule, budget ? budget : cap_max, (uint32_t)max_segments, json);
    free(all); free(lens); free(shape_of);
    return rc ? 1 : 0;
  }

  /* Admission as the proxy does it; each admitted sequence's smallest shape. */
  input_t in = {.lens = lens, .set = &set, .shape_of = shape_of,
                .max_segments = (uint32_t)max_segments};
  uint64_t rejected = 0;
  for (size_t i = 0; i < total; i++) {
    if (lp_bucket_set_admit(&set, all[i], NULL) != LP_ADMIT_OK) {
      rejected++;
      continue;
    }
    int best = -1;
    for (size_t s = 0; s < set.count; s++)
      if (set.shapes[s].bucket >= all[i] &&
          (best < 0 || set.shapes[s].bucket < set.shapes[best].bucket))
        best = (int)s;
    shape_of[in.n] = best;
    lens[in.n++] = all[i];
    in.tokens += all[i];
  }
  if (nalgo == 0)
    for (int a = 0; a < LP_ALGO_COUNT; a++) algos[nalgo++] = a;
  if (batch == 0) {
    for (size_t i = 0; i < set.count; i++)
      if (set.shapes[i].lanes > batch) batch = set.shapes[i].lanes;
  }

  row_t rows[2 * LP_ALGO_COUNT + 2];
  size_t nrows = 0;
  lp_packer_t *pk = lp_packer_new();
  int rc = pk ? 0 : -ENOMEM;
  for (int a = 0; a < nalgo && rc == 0 && in.n; a++) rc = run_offline(pk, algos[a], &in, &rows[nrows++]);
  for (int a = 0; a < nalgo && rc == 0 && in.n; a++) rc = run_online(algos[a], &in, &rows[nrows++]);
  lp_packer_free(pk);
  if (rc) {
    fprintf(stderr, "lanepack-packbench: packing failed: %s\n", strerror(-rc));
    return 1;
  }
  if (in.n) {
    run_pad_bucket(&in, &rows[nrows++]);
    run_pad_longest(&in, (uint32_t)batch, rows[0].lower_bound, &rows[nrows++]);
  }
  for (size_t r = 0; r < nrows; r++) rows[r].rejected = rejected;

  qsort(all, total, sizeof(uint32_t), cmp_u32);
  if (json) {
    printf("{\"lengths\": \"%s\", \"shapes\": \"%s\", \"sequences\": %zu, \"tokens\": %llu, "
           "\"rows\": [",
           lengths, shapes, total, (unsigned long long)in.tokens);
    for (size_t r = 0; r < nrows; r++)
      printf("%s{\"algo\": \"%s\", \"fill\": %.4f, \"batches\": %llu, \"lower_bound\": %llu, "
             "\"ratio_to_bound\": %.4f, \"seqs_per_s\": %.0f, \"rejected\": %llu}",
             r ? ", " : "", rows[r].algo, rows[r].fill, (unsigned long long)rows[r].batches,
             (unsigned long long)rows[r].lower_bound,
             rows[r].lower_bound ? (double)rows[r].batches / rows[r].lower_bound : 0.0,
             rows[r].seqs_per_s, (unsigned long long)rows[r].rejected);
    printf("]}\n");
  } else {
    printf("lengths %s: %zu sequences, p50 %u, p90 %u, p99 %u, max %u; shapes %s\n", lengths,
           total, all[total / 2], all[total * 9 / 10], all[total * 99 / 100], all[total - 1],
           shapes);
    printf("%-16s %7s %9s %11s %7s %13s %9s\n", "algo", "fill", "batches", "lower_bound",
           "ratio", "seqs/s", "rejected");
    for (size_t r = 0; r < nrows; r++)
      printf("%-16s %7.4f %9llu %11llu %7.3f %13.0f %9llu\n", rows[r].algo, rows[r].fill,
             (unsigned long long)rows[r].batches, (unsigned long long)rows[r].lower_bound,
             rows[r].lower_bound ? (double)rows[r].batches / rows[r].lower_bound : 0.0,
             rows[r].seqs_per_s, (unsigned long long)rows[r].rejected);
  }
  free(all); free(lens); free(shape_of);
  return 0;
}
