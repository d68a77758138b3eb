/* lanepack: the sequence-packing proxy's command line. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "lanepack/log.h"
#include "probe.h"
#include "process/process.h"

#ifndef LP_VERSION
#define LP_VERSION "0.1.0"
#endif

static void usage(FILE *f) {
  fprintf(f,
          "usage: lanepack [--config FILE] [--listen HOST:PORT] [--backend URL]...\n"
          "                [--shapes 4x8192,8x2048] [--max-wait-ms N] [--log-level LEVEL]\n"
          "                [--model NAME] [--threads N] [--check-config] [--config-keys] [--version] [--help]\n"
          "       lanepack --probe URL   (exit 0 if GET URL answers 2xx within 2 s)\n"
          "Flags override the file. --backend, --shapes and --max-wait-ms apply to the\n"
          "model named by --model (default: the only model, or 'default').\n");
}

/* What the command line says; kept, so that a reload (SIGHUP) re-reads the
 * file and applies the same flags over it. */
static struct {
  const char *config, *listen, *shapes, *level, *model;
  const char *backends[LP_MAX_BACKENDS];
  size_t nbackends;
  long max_wait;
  long threads;
} cli = {.max_wait = -1, .threads = -1};

/* The configuration: defaults, the file, the flags; validated. Returns 0, or 2
 * with err set. */
static int make_config(lp_config_t *cfg, char *err, size_t errlen) {
  lp_config_default(cfg);
  if (cli.config && lp_config_load_file(cfg, cli.config, err, errlen)) return 2;
  if (cli.listen) snprintf(cfg->listen, sizeof(cfg->listen), "%s", cli.listen);
  if (cli.level) {
    int l = lp_log_parse_level(cli.level);
    if (l < 0) {
      snprintf(err, errlen, "--log-level must be debug, info, warn or error");
      return 2;
    }
    cfg->log_level = l;
  }
  if (cli.threads >= 0) cfg->threads = (uint32_t)cli.threads;
  if (cli.nbackends || cli.shapes || cli.max_wait >= 0) {
    const char *name = cli.model ? cli.model : (cfg->nmodels == 1 ? cfg->models[0].name : "default");
    lp_model_config_t *m = (lp_model_config_t *)lp_config_model(cfg, name);
    if (!m) {
      if (cfg->nmodels == LP_MAX_MODELS) {
        snprintf(err, errlen, "too many models");
        return 2;
      }
      m = &cfg->models[cfg->nmodels++];
      lp_model_config_default(m, name);
    }
    if (cli.nbackends) {
      m->nbackends = 0;
      for (size_t i = 0; i < cli.nbackends; i++) {
        if (strncmp(cli.backends[i], "http://", 7) && strncmp(cli.backends[i], "https://", 8)) {
          snprintf(err, errlen, "--backend '%s' must start with http:// or https://", cli.backends[i]);
          return 2;
        }
        snprintf(m->backends[m->nbackends], LP_URL_MAX, "%s", cli.backends[i]);
        size_t n = strlen(m->backends[m->nbackends]);
        while (n > 8 && m->backends[m->nbackends][n - 1] == '/') m->backends[m->nbackends][--n] = 0;
        m->nbackends++;
      }
    }
    if (cli.shapes) {
      char e2[400];
      lp_bucket_set_init(&m->shapes);
      if (lp_bucket_set_parse(&m->shapes, cli.shapes, e2, sizeof(e2))) {
        snprintf(err, errlen, "--shapes: %s", e2);
        return 2;
      }
    }
    if (cli.max_wait >= 0) m->max_wait_ms = (uint64_t)cli.max_wait;
  }
  if (lp_config_validate(cfg, err, errlen)) return 2;
  return 0;
}

/* SIGHUP: the configuration again, as at start. */
static int reload_config(lp_config_t *out, char *err, size_t errlen) { return make_config(out, err, errlen); }

static void sched_main(void *loop) {
  prctl(PR_SET_NAME, "lp-sched", 0, 0, 0);
  uv_run(loop, UV_RUN_DEFAULT);
}

int main(int argc, char **argv) {
  static lp_config_t cfg;
  int check = 0;
#ifdef __GLIBC__
  /* Under load the allocator would give the top of its heap back and take it
   * again many times a second (a batch body and answer are hundreds of KB):
   * each time a brk call and fresh pages the kernel zeroes, several percent
   * of the proxy's CPU. Fixed thresholds keep it; the proxy's idle timer
   * (malloc_trim once nothing is in flight) gives it back after a burst. */
  mallopt(M_TRIM_THRESHOLD, LP_TRIM_THRESHOLD);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
#endif
  static const struct option opts[] = {
      {"config", required_argument, 0, 'c'},      {"listen", required_argument, 0, 'l'},
      {"backend", required_argument, 0, 'b'},     {"shapes", required_argument, 0, 's'},
      {"max-wait-ms", required_argument, 0, 'w'}, {"log-level", required_argument, 0, 'L'},
      {"model", required_argument, 0, 'm'},       {"check-config", no_argument, 0, 'C'},
      {"version", no_argument, 0, 'V'},           {"help", no_argument, 0, 'h'},
      {"probe", required_argument, 0, 'P'},       {"threads", required_argument, 0, 'T'},
      {"config-keys", no_argument, 0, 'K'},
      {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
      case 'c': cli.config = optarg; break;
      case 'l': cli.listen = optarg; break;
      case 'b':
        if (cli.nbackends == LP_MAX_BACKENDS) {
          fprintf(stderr, "lanepack: at most %d --backend\n", LP_MAX_BACKENDS);
          return 2;
        }
        cli.backends[cli.nbackends++] = optarg;
        break;
      case 's': cli.shapes = optarg; break;
      case 'w': {
        char *end;
        cli.max_wait = strtol(optarg, &end, 10);
        if (*end || end == optarg || cli.max_wait < 0 || cli.max_wait > 3600000) {
          fprintf(stderr, "lanepack: --max-wait-ms wants an integer in [0, 3600000], got '%s'\n", optarg);
          return 2;
        }
        break;
      }
      case 'T': {
        char *end;
        cli.threads = strtol(optarg, &end, 10);
        if (*end || end == optarg || cli.threads < 0 || cli.threads > LP_MAX_THREADS) {
          fprintf(stderr, "lanepack: --threads wants an integer in [0, %d] (0: one per core), got '%s'\n",
                  LP_MAX_THREADS, optarg);
          return 2;
        }
        break;
      }
      case 'L': cli.level = optarg; break;
      case 'm': cli.model = optarg; break;
      case 'C': check = 1; break;
      case 'V': printf("lanepack %s\n", LP_VERSION); return 0;
      case 'K': { /* every key, as doc/configuration.md lists them (the doc test compares) */
        char *keys = lp_config_keys_doc();
        if (!keys) return 1;
        fputs(keys, stdout);
        free(keys);
        return 0;
      }
      case 'P': {
        char perr[300];
        int prc = lp_probe(optarg, 2000, perr, sizeof(perr));
        if (prc) fprintf(stderr, "lanepack: probe: %s\n", perr);
        return prc;
      }
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "lanepack: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  char err[512];
  if (make_config(&cfg, err, sizeof(err))) {
    fprintf(stderr, "lanepack: %s\n", err);
    return 2;
  }
  struct sockaddr_storage ss;
  if (lp_parse_hostport(cfg.listen, &ss)) {
    fprintf(stderr, "lanepack: listen: '%s' is not HOST:PORT\n", cfg.listen);
    return 2;
  }
  if (check) {
    char *s = lp_config_dump(&cfg);
    if (!s) return 1;
    printf("%s\n", s);
    free(s);
    return 0;
  }
  signal(SIGPIPE, SIG_IGN);
  /* every client and backend connection is a descriptor: take what is allowed */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  static lp_proxy_t proxy;
  uv_loop_t *loop = uv_default_loop();
  int port = 0;
  int rc = lp_proxy_init(&proxy, loop, &cfg, &port);
  proxy.reload = reload_config;
  if (rc) {
    fprintf(stderr, "lanepack: cannot start on %s: %s\n", cfg.listen,
            rc < 0 && rc > -4096 ? uv_strerror(rc) : strerror(-rc));
    return 1;
  }
  lp_log(LP_LOG_INFO, "listening", "\"port\": %d, \"models\": %zu", port, cfg.nmodels);
  /* the scheduler's loop on a thread of its own, named for top -H; the main
   * thread keeps the process's name (pkill -x lanepack, logrotate) */
  uv_thread_t sched;
  if (uv_thread_create(&sched, sched_main, loop) == 0) uv_thread_join(&sched);
  else sched_main(loop);
  lp_proxy_free(&proxy); /* the front threads stopped and joined */
  lp_log(LP_LOG_INFO, "stopped", "\"jobs_left\": %zu", proxy.jobs);
  return proxy.exit_code;
}
