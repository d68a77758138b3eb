/* lanepack: the sequence-packing proxy's command line. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "lanepack/log.h"
#include "probe.h"
#include "proxy.h"

#ifndef LP_VERSION
#define LP_VERSION "0.1.0"
#endif

static void usage(FILE *f) {
  fprintf(f,
          "usage: lanepack [--config FILE] [--listen HOST:PORT] [--backend URL]...\n"
          "                [--shapes 4x8192,8x2048] [--max-wait-ms N] [--log-level LEVEL]\n"
          "                [--model NAME] [--check-config] [--version] [--help]\n"
          "       lanepack --probe URL   (exit 0 if GET URL answers 2xx within 2 s)\n"
          "Flags override the file. --backend, --shapes and --max-wait-ms apply to the\n"
          "model named by --model (default: the only model, or 'default').\n");
}

int main(int argc, char **argv) {
  static lp_config_t cfg;
  lp_config_default(&cfg);
  const char *config = NULL, *listen = NULL, *shapes = NULL, *level = NULL, *model = NULL;
  const char *backends[LP_MAX_BACKENDS];
  size_t nbackends = 0;
  long max_wait = -1;
  int check = 0;
  static const struct option opts[] = {
      {"config", required_argument, 0, 'c'},      {"listen", required_argument, 0, 'l'},
      {"backend", required_argument, 0, 'b'},     {"shapes", required_argument, 0, 's'},
      {"max-wait-ms", required_argument, 0, 'w'}, {"log-level", required_argument, 0, 'L'},
      {"model", required_argument, 0, 'm'},       {"check-config", no_argument, 0, 'C'},
      {"version", no_argument, 0, 'V'},           {"help", no_argument, 0, 'h'},
      {"probe", required_argument, 0, 'P'},
      {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
      case 'c': config = optarg; break;
      case 'l': listen = optarg; break;
      case 'b':
        if (nbackends == LP_MAX_BACKENDS) {
          fprintf(stderr, "lanepack: at most %d --backend\n", LP_MAX_BACKENDS);
          return 2;
        }
        backends[nbackends++] = optarg;
        break;
      case 's': shapes = optarg; break;
      case 'w': {
        char *end;
        max_wait = strtol(optarg, &end, 10);
        if (*end || end == optarg || max_wait < 0 || max_wait > 3600000) {
          fprintf(stderr, "lanepack: --max-wait-ms wants an integer in [0, 3600000], got '%s'\n", optarg);
          return 2;
        }
        break;
      }
      case 'L': level = optarg; break;
      case 'm': model = optarg; break;
      case 'C': check = 1; break;
      case 'V': printf("lanepack %s\n", LP_VERSION); return 0;
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
  if (config && lp_config_load_file(&cfg, config, err, sizeof(err))) {
    fprintf(stderr, "lanepack: %s\n", err);
    return 2;
  }
  if (listen) snprintf(cfg.listen, sizeof(cfg.listen), "%s", listen);
  if (level) {
    int l = lp_log_parse_level(level);
    if (l < 0) {
      fprintf(stderr, "lanepack: --log-level must be debug, info, warn or error\n");
      return 2;
    }
    cfg.log_level = l;
  }
  if (nbackends || shapes || max_wait >= 0) {
    lp_model_config_t *m = NULL;
    const char *name = model ? model : (cfg.nmodels == 1 ? cfg.models[0].name : "default");
    m = (lp_model_config_t *)lp_config_model(&cfg, name);
    if (!m) {
      if (cfg.nmodels == LP_MAX_MODELS) {
        fprintf(stderr, "lanepack: too many models\n");
        return 2;
      }
      m = &cfg.models[cfg.nmodels++];
      lp_model_config_default(m, name);
    }
    if (nbackends) {
      m->nbackends = 0;
      for (size_t i = 0; i < nbackends; i++) {
        if (strncmp(backends[i], "http://", 7) && strncmp(backends[i], "https://", 8)) {
          fprintf(stderr, "lanepack: --backend '%s' must start with http:// or https://\n", backends[i]);
          return 2;
        }
        snprintf(m->backends[m->nbackends], LP_URL_MAX, "%s", backends[i]);
        size_t n = strlen(m->backends[m->nbackends]);
        while (n > 8 && m->backends[m->nbackends][n - 1] == '/') m->backends[m->nbackends][--n] = 0;
        m->nbackends++;
      }
    }
    if (shapes) {
      lp_bucket_set_init(&m->shapes);
      if (lp_bucket_set_parse(&m->shapes, shapes, err, sizeof(err))) {
        fprintf(stderr, "lanepack: --shapes: %s\n", err);
        return 2;
      }
    }
    if (max_wait >= 0) m->max_wait_ms = (uint64_t)max_wait;
  }
  if (lp_config_validate(&cfg, err, sizeof(err))) {
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
  if (rc) {
    fprintf(stderr, "lanepack: cannot start on %s: %s\n", cfg.listen,
            rc < 0 && rc > -4096 ? uv_strerror(rc) : strerror(-rc));
    return 1;
  }
  lp_log(LP_LOG_INFO, "listening", "\"port\": %d, \"models\": %zu", port, cfg.nmodels);
  uv_run(loop, UV_RUN_DEFAULT);
  lp_log(LP_LOG_INFO, "stopped", "\"jobs_left\": %zu", proxy.jobs);
  return proxy.exit_code;
}
