/*
 * config: ringmasterd's settings, from built-in defaults, an INI file
 * (--config FILE, parsed with inih) and command-line overrides, in that order.
 *
 * The file has one section, [server]:
 *   listen = 127.0.0.1:8080            REST API address (HOST:PORT, [V6]:PORT)
 *   broker = tcp://127.0.0.1:5555      ZeroMQ ROUTER endpoint for workers
 *   db = ./state/ringmaster.db         SQLite database; its folder is created
 *   log_level = info                   error | warn | info | debug
 *   max_body_bytes = 1048576           request body limit (413 above it)
 *   http_threads = 4                   libmicrohttpd thread pool size
 *   max_streams = 256                  open Server-Sent Events streams at once (503 past it)
 *   stream_keepalive_ms = 15000        the streams' keep-alive comment interval
 *   heartbeat_ms = 1000                heartbeat interval to and from agents
 *   heartbeat_misses = 3               intervals without a message: agent dead
 *   metrics_every = 1                  steps between the ranks' METRICS
 *   restart_backoff_ms = 1000          wait before the 2nd restart of a job,
 *                                      doubling at each later one (the 1st: none)
 *   restart_backoff_max_ms = 30000     the longest wait between restarts
 *   restart_grace_ms = 5000            how long a failed attempt's ranks get to
 *                                      be reported gone before its restart
 * The HTTP transport (TLS and the limits that keep one client from taking
 * the API offline; each answered while the daemon keeps serving others):
 *   tls_cert = /etc/ringmaster/tls.crt  PEM certificate (chain): serve HTTPS;
 *   tls_key = /etc/ringmaster/tls.key   its PEM private key (both or neither;
 *                                      a key readable by group/other is warned about)
 *   max_connections = 1024             open HTTP connections at once (past it:
 *                                      new ones are closed at accept)
 *   max_connections_per_ip = 64        open connections from one client address;
 *                                      must be below max_connections, so that
 *                                      others (health checks) keep a reserve
 *   idle_timeout_s = 30                a connection silent this long, or a
 *                                      request still incomplete, is closed
 *   max_header_bytes = 16384           the request's header fields (431 above;
 *                                      the URL and query: 8192 bytes, 414 above)
 *   submit_rate = 60                   POST /v1/jobs per minute per token (per
 *                                      client address without one); 0: no limit
 *   submit_burst = 30                  submissions allowed at once before the
 *                                      rate applies (429 with Retry-After past it)
 *   max_queued_jobs = 10000            queued jobs in all; a submission past it is
 *                                      answered 429 naming the cap
 *   dead_worker_retention_s = 86400    how long a dead worker's row is kept; older
 *                                      ones are deleted (0: kept forever)
 *   auth = on                          on | off: API tokens required (off: every
 *                                      caller is an admin; refused unless every
 *                                      listen address is loopback or insecure is set)
 *   insecure = false                   allow auth = off on a non-loopback address
 *                                      (logged as a warning at every start)
 *   metrics_auth = loopback            loopback | token | open: who may read /metrics
 *                                      (loopback: loopback callers need no token)
 *   allowed_hosts =                    extra Host names the dashboard's session
 *                                      accepts (comma-separated), besides the listen
 *                                      host, localhost, 127.0.0.1, ::1 and the host name
 *   max_queued_per_token = 1000        queued jobs one token may have (429 past it)
 *   env_allow = NCCL_*,CUDA_*,...      environment names a program job's
 *                                      program.env may set (comma-separated, a
 *                                      trailing * matches any rest; envallow.h
 *                                      has the default and the names always refused)
 *   job_env_allow = NCCL_*,CUDA_*,...  environment names any job's top-level env
 *                                      may set (same form; ENVALLOW_JOB_DEFAULT:
 *                                      NCCL_*,CUDA_*,OMP_*,GLOO_*,LD_LIBRARY_PATH)
 * A bad value or unknown key is refused with a message naming the key and
 * where it came from ("ringmasterd.conf:3: http_threads ...").
 */
#ifndef RINGMASTER_COORDINATORD_CONFIG_H
#define RINGMASTER_COORDINATORD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"

#define CONFIG_DEFAULT_LISTEN "127.0.0.1:8080"
#define CONFIG_DEFAULT_BROKER "tcp://127.0.0.1:5555"
#define CONFIG_DEFAULT_DB "./state/ringmaster.db"
#define CONFIG_DEFAULT_MAX_BODY_BYTES 1048576
#define CONFIG_DEFAULT_HTTP_THREADS 4
#define CONFIG_DEFAULT_HEARTBEAT_MS 1000
#define CONFIG_DEFAULT_HEARTBEAT_MISSES 3
#define CONFIG_DEFAULT_METRICS_EVERY 1
#define CONFIG_DEFAULT_RESTART_BACKOFF_MS 1000
#define CONFIG_DEFAULT_RESTART_BACKOFF_MAX_MS 30000
#define CONFIG_DEFAULT_RESTART_GRACE_MS 5000
#define CONFIG_DEFAULT_MAX_STREAMS 256
#define CONFIG_DEFAULT_STREAM_KEEPALIVE_MS 15000
#define CONFIG_DEFAULT_MAX_CONNECTIONS 1024
#define CONFIG_DEFAULT_MAX_CONNECTIONS_PER_IP 64
#define CONFIG_DEFAULT_IDLE_TIMEOUT_S 30
#define CONFIG_DEFAULT_MAX_HEADER_BYTES 16384
#define CONFIG_DEFAULT_SUBMIT_RATE 60
#define CONFIG_DEFAULT_SUBMIT_BURST 30
#define CONFIG_DEFAULT_MAX_QUEUED_JOBS 10000
#define CONFIG_DEFAULT_DEAD_WORKER_RETENTION_S 86400
#define CONFIG_DEFAULT_MAX_QUEUED_PER_TOKEN 1000

/* Who may read /metrics (metrics_auth). */
typedef enum {
	CONFIG_METRICS_AUTH_LOOPBACK = 0, /* loopback callers need nothing, others a viewer token */
	CONFIG_METRICS_AUTH_TOKEN,        /* everyone needs a viewer token */
	CONFIG_METRICS_AUTH_OPEN,         /* nobody needs anything */
} config_metrics_auth_t;

typedef struct {
	char listen_host[256]; /* without brackets */
	char listen_port[8];
	char broker[512];
	char db[4096];
	log_level_t log_level;
	size_t max_body_bytes;
	int http_threads;
	int heartbeat_ms;     /* 10 .. 60000 */
	int heartbeat_misses; /* 1 .. 100: the agents' dead_after */
	int metrics_every;    /* 1 .. 1000000 */
	int restart_backoff_ms;     /* 0 .. 3600000 */
	int restart_backoff_max_ms; /* 0 .. 3600000 */
	int restart_grace_ms;       /* 0 .. 600000 */
	int max_streams;            /* 1 .. 100000: open SSE streams at once */
	int stream_keepalive_ms;    /* 100 .. 600000: the SSE keep-alive comment */
	/* the HTTP transport: TLS is on when tls_cert is not empty */
	char tls_cert[4096];
	char tls_key[4096];
	int max_connections;        /* 16 .. 1000000 */
	int max_connections_per_ip; /* 1 .. max_connections - 1 */
	int idle_timeout_s;         /* 1 .. 3600 */
	size_t max_header_bytes;    /* 1024 .. 1048576 */
	int submit_rate;            /* 0 (off) .. 1000000 per minute */
	int submit_burst;           /* 1 .. 1000000 */
	int max_queued_jobs;        /* 1 .. 10000000: queued jobs in all (429 past it) */
	int dead_worker_retention_s; /* 0 .. 315360000: dead worker rows kept; 0: forever */
	bool auth;                  /* API tokens required (default true) */
	bool insecure;              /* auth off accepted on a non-loopback address */
	config_metrics_auth_t metrics_auth;
	char allowed_hosts[1024];   /* extra Host names, comma-separated ("" none) */
	int max_queued_per_token;   /* 1 .. 10000000 */
	bool broker_auth;           /* --broker-auth on|off (CurveZMQ + ZAP on the broker; default on) */
	char env_allow[4096];       /* program.env's allow-list (envallow.h; default ENVALLOW_DEFAULT) */
	char job_env_allow[4096];   /* the spec's env allow-list (envallow.h; default ENVALLOW_JOB_DEFAULT) */
} config_t;

typedef enum {
	CONFIG_RUN = 0,        /* start the daemon */
	CONFIG_HELP,           /* --help printed: exit 0 */
	CONFIG_VERSION,        /* --version printed: exit 0 */
	CONFIG_PRINT_ROUTES,   /* --print-routes: print the route table, exit 0 */
} config_action_t;

/* Fill `cfg` with the defaults above. */
void config_defaults(config_t *cfg);

/*
 * Set one key from text. `origin` names where the value came from (a file and
 * line, or an option) and is used in the error. Returns 0, or -EINVAL with a
 * one-line message in `err`.
 */
int config_set(config_t *cfg, const char *key, const char *value, const char *origin, char *err,
               size_t errlen);

/*
 * Checks between keys, once all are set: tls_cert and tls_key both or
 * neither, max_connections_per_ip below max_connections. 0, or -EINVAL with a
 * one-line message naming the keys.
 */
int config_check(const config_t *cfg, char *err, size_t errlen);

/* Read an INI file over `cfg`. -errno / -EINVAL with a one-line message. */
int config_load_file(config_t *cfg, const char *path, char *err, size_t errlen);

/*
 * Defaults, then --config FILE, then the other options. Returns 0 and
 * *ret_action, or -EINVAL with a message in `err` (unknown option, bad
 * value). --help and --version print to stdout.
 */
int config_from_args(config_t *cfg, int argc, char **argv, config_action_t *ret_action, char *err,
                     size_t errlen);

#endif
