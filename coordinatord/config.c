/*
 * config: defaults, INI file (inih) and command-line options (getopt_long).
 * See config.h for the keys. Options are applied after the file so that they
 * override it whatever their order on the command line.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ini.h>

#include "envallow.h"

void config_defaults(config_t *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	snprintf(cfg->listen_host, sizeof cfg->listen_host, "127.0.0.1");
	snprintf(cfg->listen_port, sizeof cfg->listen_port, "8080");
	snprintf(cfg->broker, sizeof cfg->broker, "%s", CONFIG_DEFAULT_BROKER);
	snprintf(cfg->db, sizeof cfg->db, "%s", CONFIG_DEFAULT_DB);
	cfg->log_level = LOG_INFO;
	cfg->max_body_bytes = CONFIG_DEFAULT_MAX_BODY_BYTES;
	cfg->http_threads = CONFIG_DEFAULT_HTTP_THREADS;
	cfg->max_streams = CONFIG_DEFAULT_MAX_STREAMS;
	cfg->stream_keepalive_ms = CONFIG_DEFAULT_STREAM_KEEPALIVE_MS;
	cfg->heartbeat_ms = CONFIG_DEFAULT_HEARTBEAT_MS;
	cfg->heartbeat_misses = CONFIG_DEFAULT_HEARTBEAT_MISSES;
	cfg->broker_auth = true;
	cfg->metrics_every = CONFIG_DEFAULT_METRICS_EVERY;
	cfg->restart_backoff_ms = CONFIG_DEFAULT_RESTART_BACKOFF_MS;
	cfg->restart_backoff_max_ms = CONFIG_DEFAULT_RESTART_BACKOFF_MAX_MS;
	cfg->restart_grace_ms = CONFIG_DEFAULT_RESTART_GRACE_MS;
	cfg->max_connections = CONFIG_DEFAULT_MAX_CONNECTIONS;
	cfg->max_connections_per_ip = CONFIG_DEFAULT_MAX_CONNECTIONS_PER_IP;
	cfg->idle_timeout_s = CONFIG_DEFAULT_IDLE_TIMEOUT_S;
	cfg->max_header_bytes = CONFIG_DEFAULT_MAX_HEADER_BYTES;
	cfg->submit_rate = CONFIG_DEFAULT_SUBMIT_RATE;
	cfg->submit_burst = CONFIG_DEFAULT_SUBMIT_BURST;
	cfg->max_queued_jobs = CONFIG_DEFAULT_MAX_QUEUED_JOBS;
	cfg->dead_worker_retention_s = CONFIG_DEFAULT_DEAD_WORKER_RETENTION_S;
	cfg->auth = true;
	cfg->metrics_auth = CONFIG_METRICS_AUTH_LOOPBACK;
	cfg->max_queued_per_token = CONFIG_DEFAULT_MAX_QUEUED_PER_TOKEN;
	snprintf(cfg->env_allow, sizeof cfg->env_allow, "%s", ENVALLOW_DEFAULT);
	snprintf(cfg->job_env_allow, sizeof cfg->job_env_allow, "%s", ENVALLOW_JOB_DEFAULT);
}

static int parse_long(const char *value, long lo, long hi, long *ret);

/* on/off, true/false, yes/no, 1/0. */
static int parse_bool(const char *value, bool *ret)
{
	static const char *const yes[] = {"on", "true", "yes", "1"}, *const no[] = {"off", "false", "no", "0"};
	for (size_t i = 0; i < 4; i++) {
		if (strcmp(value, yes[i]) == 0 || strcmp(value, no[i]) == 0) {
			*ret = strcmp(value, yes[i]) == 0;
			return 0;
		}
	}
	return -EINVAL;
}

/* The security keys (auth, insecure, metrics_auth, allowed_hosts,
 * max_queued_per_token): 0, -EINVAL with a message, or -ENOENT when `key`
 * is none of them. */
static int set_auth_key(config_t *cfg, const char *key, const char *value, const char *origin, char *err,
                        size_t errlen)
{
	long v;
	if (strcmp(key, "auth") == 0 || strcmp(key, "insecure") == 0) {
		bool *field = key[0] == 'a' ? &cfg->auth : &cfg->insecure;
		if (parse_bool(value, field) == 0)
			return 0;
		snprintf(err, errlen, "%s: %s must be on or off (got \"%.64s\")", origin, key, value);
	} else if (strcmp(key, "metrics_auth") == 0) {
		static const char *const names[] = {"loopback", "token", "open"};
		for (int i = 0; i < 3; i++) {
			if (strcmp(value, names[i]) == 0) {
				cfg->metrics_auth = (config_metrics_auth_t)i;
				return 0;
			}
		}
		snprintf(err, errlen, "%s: metrics_auth must be loopback, token or open (got \"%.64s\")", origin, value);
	} else if (strcmp(key, "allowed_hosts") == 0) {
		size_t n = strlen(value);
		bool ok = n < sizeof cfg->allowed_hosts;
		for (size_t i = 0; ok && i < n; i++)
			ok = value[i] > 0x20 && value[i] < 0x7f;
		if (ok) {
			memcpy(cfg->allowed_hosts, value, n + 1);
			return 0;
		}
		snprintf(err, errlen,
		         "%s: allowed_hosts must be host names separated by commas, without spaces, under %zu bytes",
		         origin, sizeof cfg->allowed_hosts);
	} else if (strcmp(key, "env_allow") == 0 || strcmp(key, "job_env_allow") == 0) {
		char *to = key[0] == 'e' ? cfg->env_allow : cfg->job_env_allow;
		if (envallow_valid(value)) {
			snprintf(to, ENVALLOW_MAX_BYTES, "%s", value);
			return 0;
		}
		snprintf(err, errlen,
		         "%s: %s must be comma-separated names of letters, digits and '_', each with at most"
		         " one '*' at its end, under %d bytes (got \"%.64s\")", origin, key, ENVALLOW_MAX_BYTES, value);
	} else if (strcmp(key, "max_queued_per_token") == 0) {
		if (parse_long(value, 1, 10000000, &v) == 0) {
			cfg->max_queued_per_token = (int)v;
			return 0;
		}
		snprintf(err, errlen, "%s: max_queued_per_token must be an integer from 1 to 10000000 (got \"%.64s\")",
		         origin, value);
	} else {
		return -ENOENT;
	}
	return -EINVAL;
}

/* "HOST:PORT" or "[V6]:PORT"; port 0..65535. */
static int parse_listen(config_t *cfg, const char *value)
{
	const char *colon;
	const char *host = value;
	size_t host_len;
	if (value[0] == '[') {
		const char *close = strchr(value, ']');
		if (!close || close[1] != ':')
			return -EINVAL;
		host = value + 1;
		host_len = (size_t)(close - host);
		colon = close + 1;
	} else {
		colon = strrchr(value, ':');
		if (!colon)
			return -EINVAL;
		host_len = (size_t)(colon - value);
		if (memchr(value, ':', host_len))
			return -EINVAL; /* bare IPv6 needs brackets */
	}
	if (host_len == 0 || host_len >= sizeof cfg->listen_host)
		return -EINVAL;
	const char *port = colon + 1;
	size_t port_len = strlen(port);
	if (port_len == 0 || port_len > 5 || strspn(port, "0123456789") != port_len)
		return -EINVAL;
	if (atoi(port) > 65535)
		return -EINVAL;
	memcpy(cfg->listen_host, host, host_len);
	cfg->listen_host[host_len] = '\0';
	memcpy(cfg->listen_port, port, port_len + 1);
	return 0;
}

static int parse_long(const char *value, long lo, long hi, long *ret)
{
	char *end;
	errno = 0;
	long v = strtol(value, &end, 10);
	if (errno || end == value || *end != '\0' || v < lo || v > hi)
		return -EINVAL;
	*ret = v;
	return 0;
}

/* The HTTP transport's keys (config.h): 1 when `key` is one of them (then 0
 * or -EINVAL in *ret), 0 when it is not. */
static int set_transport(config_t *cfg, const char *key, const char *value, const char *origin, char *err,
                         size_t errlen, int *ret)
{
	static const struct {
		const char *key;
		long lo, hi;
	} ints[] = {
		{"max_connections", 16, 1000000},     {"max_connections_per_ip", 1, 1000000},
		{"idle_timeout_s", 1, 3600},         {"max_header_bytes", 1024, 1048576},
		{"submit_rate", 0, 1000000},         {"submit_burst", 1, 1000000},
	};
	*ret = 0;
	if (strcmp(key, "tls_cert") == 0 || strcmp(key, "tls_key") == 0) {
		char *dst = key[4] == 'c' ? cfg->tls_cert : cfg->tls_key;
		if (strlen(value) < sizeof cfg->tls_cert) {
			snprintf(dst, sizeof cfg->tls_cert, "%s", value);
			return 1;
		}
		snprintf(err, errlen, "%s: %s must be a file path shorter than 4096 bytes", origin, key);
		*ret = -EINVAL;
		return 1;
	}
	for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
		if (strcmp(key, ints[i].key) != 0)
			continue;
		long v;
		if (parse_long(value, ints[i].lo, ints[i].hi, &v) < 0) {
			snprintf(err, errlen, "%s: %s must be an integer from %ld to %ld (got \"%s\")", origin, key,
			         ints[i].lo, ints[i].hi, value);
			*ret = -EINVAL;
			return 1;
		}
		switch (i) {
		case 0: cfg->max_connections = (int)v; break;
		case 1: cfg->max_connections_per_ip = (int)v; break;
		case 2: cfg->idle_timeout_s = (int)v; break;
		case 3: cfg->max_header_bytes = (size_t)v; break;
		case 4: cfg->submit_rate = (int)v; break;
		default: cfg->submit_burst = (int)v; break;
		}
		return 1;
	}
	return 0;
}

int config_check(const config_t *cfg, char *err, size_t errlen)
{
	if (!cfg->tls_cert[0] != !cfg->tls_key[0]) {
		snprintf(err, errlen, "%s is set without %s: HTTPS needs both the certificate (--tls-cert) and its "
		         "private key (--tls-key)", cfg->tls_cert[0] ? "tls_cert" : "tls_key",
		         cfg->tls_cert[0] ? "tls_key" : "tls_cert");
		return -EINVAL;
	}
	if (cfg->max_connections_per_ip >= cfg->max_connections) {
		snprintf(err, errlen, "max_connections_per_ip (%d) must be below max_connections (%d), so that one "
		         "client cannot take every connection", cfg->max_connections_per_ip, cfg->max_connections);
		return -EINVAL;
	}
	return 0;
}

int config_set(config_t *cfg, const char *key, const char *value, const char *origin, char *err,
               size_t errlen)
{
	long v;
	int tr;
	if (set_transport(cfg, key, value, origin, err, errlen, &tr))
		return tr;
	int ra = set_auth_key(cfg, key, value, origin, err, errlen);
	if (ra != -ENOENT)
		return ra;
	if (strcmp(key, "listen") == 0) {
		if (parse_listen(cfg, value) == 0)
			return 0;
		snprintf(err, errlen, "%s: listen must be HOST:PORT or [IPV6]:PORT with a port 0-65535 (got \"%s\")",
		         origin, value);
	} else if (strcmp(key, "broker") == 0) {
		if (value[0] && strstr(value, "://") && strlen(value) < sizeof cfg->broker) {
			snprintf(cfg->broker, sizeof cfg->broker, "%s", value);
			return 0;
		}
		snprintf(err, errlen, "%s: broker must be a ZeroMQ endpoint such as tcp://127.0.0.1:5555 (got \"%s\")",
		         origin, value);
	} else if (strcmp(key, "db") == 0) {
		if (value[0] && strlen(value) < sizeof cfg->db) {
			snprintf(cfg->db, sizeof cfg->db, "%s", value);
			return 0;
		}
		snprintf(err, errlen, "%s: db must be a file path (got \"%s\")", origin, value);
	} else if (strcmp(key, "log_level") == 0) {
		if (log_level_parse(value, &cfg->log_level) == 0)
			return 0;
		snprintf(err, errlen, "%s: log_level must be error, warn, info or debug (got \"%s\")", origin,
		         value);
	} else if (strcmp(key, "max_body_bytes") == 0) {
		if (parse_long(value, 1024, 1L << 30, &v) == 0) {
			cfg->max_body_bytes = (size_t)v;
			return 0;
		}
		snprintf(err, errlen, "%s: max_body_bytes must be an integer from 1024 to 1073741824 (got \"%s\")",
		         origin, value);
	} else if (strcmp(key, "http_threads") == 0) {
		if (parse_long(value, 1, 256, &v) == 0) {
			cfg->http_threads = (int)v;
			return 0;
		}
		snprintf(err, errlen, "%s: http_threads must be an integer from 1 to 256 (got \"%s\")", origin,
		         value);
	} else if (strcmp(key, "max_streams") == 0) {
		if (parse_long(value, 1, 100000, &v) == 0) {
			cfg->max_streams = (int)v;
			return 0;
		}
		snprintf(err, errlen, "%s: max_streams must be an integer from 1 to 100000 (got \"%s\")", origin, value);
	} else if (strcmp(key, "stream_keepalive_ms") == 0) {
		if (parse_long(value, 100, 600000, &v) == 0) {
			cfg->stream_keepalive_ms = (int)v;
			return 0;
		}
		snprintf(err, errlen, "%s: stream_keepalive_ms must be an integer from 100 to 600000 (got \"%s\")", origin,
		         value);
	} else if (strcmp(key, "heartbeat_ms") == 0) {
		if (parse_long(value, 10, 60000, &v) == 0) {
			cfg->heartbeat_ms = (int)v;
			return 0;
		}
		snprintf(err, errlen, "%s: heartbeat_ms must be an integer from 10 to 60000 (got \"%s\")", origin,
		         value);
	} else if (strcmp(key, "heartbeat_misses") == 0) {
		if (parse_long(value, 1, 100, &v) == 0) {
			cfg->heartbeat_misses = (int)v;
			return 0;
		}
		snprintf(err, errlen, "%s: heartbeat_misses must be an integer from 1 to 100 (got \"%s\")", origin,
		         value);
	} else if (strcmp(key, "metrics_every") == 0) {
		if (parse_long(value, 1, 1000000, &v) == 0) {
			cfg->metrics_every = (int)v;
			return 0;
		}
		snprintf(err, errlen, "%s: metrics_every must be an integer from 1 to 1000000 (got \"%s\")",
		         origin, value);
	} else if (strcmp(key, "restart_backoff_ms") == 0 || strcmp(key, "restart_backoff_max_ms") == 0 ||
	           strcmp(key, "restart_grace_ms") == 0) {
		bool grace = strcmp(key, "restart_grace_ms") == 0;
		long hi = grace ? 600000 : 3600000;
		if (parse_long(value, 0, hi, &v) == 0) {
			if (grace)
				cfg->restart_grace_ms = (int)v;
			else if (strcmp(key, "restart_backoff_ms") == 0)
				cfg->restart_backoff_ms = (int)v;
			else
				cfg->restart_backoff_max_ms = (int)v;
			return 0;
		}
		snprintf(err, errlen, "%s: %s must be an integer from 0 to %ld (got \"%s\")", origin, key, hi, value);
	} else if (strcmp(key, "max_queued_jobs") == 0) {
		if (parse_long(value, 1, 10000000, &v) == 0) {
			cfg->max_queued_jobs = (int)v;
			return 0;
		}
		snprintf(err, errlen, "%s: max_queued_jobs must be an integer from 1 to 10000000 (got \"%s\")",
		         origin, value);
	} else if (strcmp(key, "dead_worker_retention_s") == 0) {
		if (parse_long(value, 0, 315360000, &v) == 0) {
			cfg->dead_worker_retention_s = (int)v;
			return 0;
		}
		snprintf(err, errlen,
		         "%s: dead_worker_retention_s must be an integer from 0 to 315360000 (got \"%s\")",
		         origin, value);
	} else if (strcmp(key, "broker_auth") == 0) {
		if (strcmp(value, "on") == 0 || strcmp(value, "off") == 0) {
			cfg->broker_auth = strcmp(value, "on") == 0;
			return 0;
		}
		snprintf(err, errlen, "%s: broker_auth must be on or off (got \"%s\")", origin, value);
	} else {
		snprintf(err, errlen,
		         "%s: unknown key \"%s\" (known: listen, broker, db, log_level, max_body_bytes, http_threads, max_streams, stream_keepalive_ms, "
		         "heartbeat_ms, heartbeat_misses, metrics_every, restart_backoff_ms, restart_backoff_max_ms, "
		         "restart_grace_ms, tls_cert, tls_key, max_connections, max_connections_per_ip, idle_timeout_s, "
		         "max_header_bytes, submit_rate, submit_burst, max_queued_jobs, "
		         "dead_worker_retention_s, auth, insecure, metrics_auth, allowed_hosts, max_queued_per_token, broker_auth, "
		         "env_allow, job_env_allow)",
		         origin, key);
	}
	return -EINVAL;
}

typedef struct {
	config_t *cfg;
	const char *path;
	char *err;
	size_t errlen;
	int rc;
	int line;
} ini_ctx_t;

static int on_ini_value(void *user, const char *section, const char *name, const char *value
#if INI_HANDLER_LINENO
                       , int lineno
#endif
)
{
	ini_ctx_t *c = user;
	int line = 0;
#if INI_HANDLER_LINENO
	line = lineno;
#endif
	if (c->rc)
		return 0;
	char origin[4200];
	if (line > 0)
		snprintf(origin, sizeof origin, "%s:%d", c->path, line);
	else
		snprintf(origin, sizeof origin, "%s", c->path);
	if (strcmp(section, "server") != 0) {
		snprintf(c->err, c->errlen, "%s: unknown section [%s] (the file has one section, [server])",
		         origin, section);
		c->rc = -EINVAL;
		return 0;
	}
	c->rc = config_set(c->cfg, name, value, origin, c->err, c->errlen);
	return c->rc == 0;
}

int config_load_file(config_t *cfg, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		int e = errno;
		snprintf(err, errlen, "cannot read config file %s: %s", path, strerror(e));
		return -e;
	}
	ini_ctx_t c = {.cfg = cfg, .path = path, .err = err, .errlen = errlen};
	int r = ini_parse_file(f, on_ini_value, &c);
	fclose(f);
	if (c.rc)
		return c.rc;
	if (r > 0) {
		snprintf(err, errlen, "%s:%d: syntax error (expected \"key = value\" or \"[section]\")", path, r);
		return -EINVAL;
	}
	if (r < 0) {
		snprintf(err, errlen, "cannot parse config file %s", path);
		return -EIO;
	}
	return 0;
}

static void print_help(const char *argv0)
{
	printf("Usage: %s [OPTIONS]\n"
	       "The ringmaster coordinator: REST API, job store and worker broker.\n\n"
	       "  --config FILE       read settings from an INI file ([server] section)\n"
	       "  --listen HOST:PORT  REST API address (default " CONFIG_DEFAULT_LISTEN ")\n"
	       "  --broker ENDPOINT   ZeroMQ ROUTER endpoint (default " CONFIG_DEFAULT_BROKER ")\n"
	       "  --db PATH           SQLite database (default " CONFIG_DEFAULT_DB ")\n"
	       "  --log-level LEVEL   error, warn, info or debug (default info)\n"
	       "  --heartbeat-ms MS   heartbeat interval to and from agents (default 1000)\n"
	       "  --heartbeat-misses N  intervals without a message before an agent is dead (default 3)\n"
	       "  --metrics-every N   steps between the ranks' METRICS messages (default 1)\n"
	       "  --restart-backoff-ms MS  wait before a job's 2nd restart, doubling after (default 1000)\n"
	       "  --restart-backoff-max-ms MS  longest wait between restarts (default 30000)\n"
	       "  --restart-grace-ms MS  time a failed attempt's ranks get to exit (default 5000)\n"
	       "  --max-streams N     Server-Sent Events streams open at once, 503 past it (default 256)\n"
	       "  --stream-keepalive-ms MS  the streams' keep-alive comment interval (default 15000)\n"
	       "  --tls-cert FILE     serve HTTPS with this PEM certificate (chain); needs --tls-key\n"
	       "  --tls-key FILE      the certificate's PEM private key (keep it 0600)\n"
	       "  --max-connections N  open HTTP connections at once (default 1024)\n"
	       "  --max-connections-per-ip N  open connections from one address, below the total (default 64)\n"
	       "  --idle-timeout-s S  close a connection idle or with an incomplete request this long (default 30)\n"
	       "  --max-header-bytes N  request header fields' size, 431 above (default 16384)\n"
	       "  --submit-rate N     job submissions per minute per token, 429 past it; 0: off (default 60)\n"
	       "  --submit-burst N    submissions allowed at once before the rate applies (default 30)\n"
	       "  --max-queued-jobs N  queued jobs in all, 429 past it (default 10000)\n"
	       "  --dead-worker-retention-s S  keep a dead worker's row S seconds (default 86400, 0: forever)\n"
	       "  --auth on|off       require API tokens (default on; off only on loopback)\n"
	       "  --broker-auth on|off  CurveZMQ and enrolled keys on the broker (default on; off only\n"
	       "                      for a loopback, ipc:// or inproc:// broker unless --insecure)\n"
	       "  --insecure          accept --auth off or --broker-auth off on a non-loopback address\n"
	       "                      (logged as a warning at every start)\n"
	       "  --metrics-auth loopback|token|open  who may read /metrics (default loopback)\n"
	       "  --allowed-hosts H1,H2  Host names the dashboard accepts besides the defaults\n"
	       "  --max-queued-per-token N  queued jobs per token, 429 past it (default 1000)\n"
	       "  --env-allow P1,P2   env names a program job may set (trailing * = any rest;\n"
	       "                      default " ENVALLOW_DEFAULT ")\n"
	       "  --job-env-allow P1,P2  env names any job's env may set (same form;\n"
	       "                      default " ENVALLOW_JOB_DEFAULT ")\n"
	       "  --print-routes      print the REST routes served (METHOD PATH) and exit\n"
	       "  --help              show this help and exit\n"
	       "  --version           show the version and exit\n",
	       argv0);
}

int config_from_args(config_t *cfg, int argc, char **argv, config_action_t *ret_action, char *err,
                     size_t errlen)
{
	enum { OPT_CONFIG = 1000, OPT_LISTEN, OPT_BROKER, OPT_DB, OPT_LOG_LEVEL, OPT_ROUTES, OPT_HB_MS,
	       OPT_HB_MISSES, OPT_METRICS_EVERY, OPT_BACKOFF, OPT_BACKOFF_MAX, OPT_GRACE, OPT_MAX_STREAMS, OPT_KEEPALIVE,
	       OPT_TLS_CERT, OPT_TLS_KEY, OPT_MAX_CONN, OPT_MAX_CONN_IP, OPT_IDLE, OPT_MAX_HEADER, OPT_SUBMIT_RATE,
	       OPT_SUBMIT_BURST, OPT_MAX_QUEUED, OPT_DEAD_RETENTION,
	       OPT_AUTH, OPT_INSECURE, OPT_METRICS_AUTH, OPT_ALLOWED_HOSTS, OPT_MAX_QUEUED_PER_TOKEN, OPT_BROKER_AUTH,
	       OPT_ENV_ALLOW, OPT_JOB_ENV_ALLOW };
	static const struct option opts[] = {
		{"config", required_argument, NULL, OPT_CONFIG},
		{"listen", required_argument, NULL, OPT_LISTEN},
		{"broker", required_argument, NULL, OPT_BROKER},
		{"db", required_argument, NULL, OPT_DB},
		{"log-level", required_argument, NULL, OPT_LOG_LEVEL},
		{"print-routes", no_argument, NULL, OPT_ROUTES},
		{"heartbeat-ms", required_argument, NULL, OPT_HB_MS},
		{"heartbeat-misses", required_argument, NULL, OPT_HB_MISSES},
		{"metrics-every", required_argument, NULL, OPT_METRICS_EVERY},
		{"restart-backoff-ms", required_argument, NULL, OPT_BACKOFF},
		{"restart-backoff-max-ms", required_argument, NULL, OPT_BACKOFF_MAX},
		{"restart-grace-ms", required_argument, NULL, OPT_GRACE},
		{"max-streams", required_argument, NULL, OPT_MAX_STREAMS},
		{"stream-keepalive-ms", required_argument, NULL, OPT_KEEPALIVE},
		{"tls-cert", required_argument, NULL, OPT_TLS_CERT},
		{"tls-key", required_argument, NULL, OPT_TLS_KEY},
		{"max-connections", required_argument, NULL, OPT_MAX_CONN},
		{"max-connections-per-ip", required_argument, NULL, OPT_MAX_CONN_IP},
		{"idle-timeout-s", required_argument, NULL, OPT_IDLE},
		{"max-header-bytes", required_argument, NULL, OPT_MAX_HEADER},
		{"submit-rate", required_argument, NULL, OPT_SUBMIT_RATE},
		{"submit-burst", required_argument, NULL, OPT_SUBMIT_BURST},
		{"max-queued-jobs", required_argument, NULL, OPT_MAX_QUEUED},
		{"dead-worker-retention-s", required_argument, NULL, OPT_DEAD_RETENTION},
		{"auth", required_argument, NULL, OPT_AUTH},
		{"insecure", no_argument, NULL, OPT_INSECURE},
		{"metrics-auth", required_argument, NULL, OPT_METRICS_AUTH},
		{"allowed-hosts", required_argument, NULL, OPT_ALLOWED_HOSTS},
		{"max-queued-per-token", required_argument, NULL, OPT_MAX_QUEUED_PER_TOKEN},
		{"broker-auth", required_argument, NULL, OPT_BROKER_AUTH},
		{"env-allow", required_argument, NULL, OPT_ENV_ALLOW},
		{"job-env-allow", required_argument, NULL, OPT_JOB_ENV_ALLOW},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	config_defaults(cfg);
	config_action_t action = CONFIG_RUN;
	const char *config_path = NULL;

	/* Pass 1: find --config and the actions; report unknown options. */
	opterr = 0;
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, ":hV", opts, NULL)) != -1) {
		switch (c) {
		case OPT_CONFIG: config_path = optarg; break;
		case OPT_ROUTES: action = CONFIG_PRINT_ROUTES; break;
		case 'h': print_help(argv[0]); *ret_action = CONFIG_HELP; return 0;
		case 'V': printf("ringmasterd %s\n", RINGMASTER_VERSION); *ret_action = CONFIG_VERSION; return 0;
		case ':':
			snprintf(err, errlen, "option %s needs a value (see --help)", argv[optind - 1]);
			return -EINVAL;
		case '?':
			snprintf(err, errlen, "unknown option %s (see --help)", argv[optind - 1]);
			return -EINVAL;
		default: break;
		}
	}
	if (optind < argc) {
		snprintf(err, errlen, "unexpected argument \"%s\" (see --help)", argv[optind]);
		return -EINVAL;
	}
	if (config_path) {
		int r = config_load_file(cfg, config_path, err, errlen);
		if (r < 0)
			return r;
	}
	/* Pass 2: overrides. */
	optind = 1;
	while ((c = getopt_long(argc, argv, ":hV", opts, NULL)) != -1) {
		const char *key = NULL, *origin = NULL;
		switch (c) {
		case OPT_LISTEN: key = "listen"; origin = "--listen"; break;
		case OPT_BROKER: key = "broker"; origin = "--broker"; break;
		case OPT_DB: key = "db"; origin = "--db"; break;
		case OPT_LOG_LEVEL: key = "log_level"; origin = "--log-level"; break;
		case OPT_HB_MS: key = "heartbeat_ms"; origin = "--heartbeat-ms"; break;
		case OPT_HB_MISSES: key = "heartbeat_misses"; origin = "--heartbeat-misses"; break;
		case OPT_METRICS_EVERY: key = "metrics_every"; origin = "--metrics-every"; break;
		case OPT_BACKOFF: key = "restart_backoff_ms"; origin = "--restart-backoff-ms"; break;
		case OPT_BACKOFF_MAX: key = "restart_backoff_max_ms"; origin = "--restart-backoff-max-ms"; break;
		case OPT_GRACE: key = "restart_grace_ms"; origin = "--restart-grace-ms"; break;
		case OPT_MAX_STREAMS: key = "max_streams"; origin = "--max-streams"; break;
		case OPT_KEEPALIVE: key = "stream_keepalive_ms"; origin = "--stream-keepalive-ms"; break;
		case OPT_TLS_CERT: key = "tls_cert"; origin = "--tls-cert"; break;
		case OPT_TLS_KEY: key = "tls_key"; origin = "--tls-key"; break;
		case OPT_MAX_CONN: key = "max_connections"; origin = "--max-connections"; break;
		case OPT_MAX_CONN_IP: key = "max_connections_per_ip"; origin = "--max-connections-per-ip"; break;
		case OPT_IDLE: key = "idle_timeout_s"; origin = "--idle-timeout-s"; break;
		case OPT_MAX_HEADER: key = "max_header_bytes"; origin = "--max-header-bytes"; break;
		case OPT_SUBMIT_RATE: key = "submit_rate"; origin = "--submit-rate"; break;
		case OPT_SUBMIT_BURST: key = "submit_burst"; origin = "--submit-burst"; break;
		case OPT_MAX_QUEUED: key = "max_queued_jobs"; origin = "--max-queued-jobs"; break;
		case OPT_DEAD_RETENTION: key = "dead_worker_retention_s"; origin = "--dead-worker-retention-s"; break;
		case OPT_AUTH: key = "auth"; origin = "--auth"; break;
		case OPT_INSECURE: key = "insecure"; origin = "--insecure"; optarg = (char *)"on"; break;
		case OPT_METRICS_AUTH: key = "metrics_auth"; origin = "--metrics-auth"; break;
		case OPT_ALLOWED_HOSTS: key = "allowed_hosts"; origin = "--allowed-hosts"; break;
		case OPT_MAX_QUEUED_PER_TOKEN: key = "max_queued_per_token"; origin = "--max-queued-per-token"; break;
		case OPT_BROKER_AUTH: key = "broker_auth"; origin = "--broker-auth"; break;
		case OPT_ENV_ALLOW: key = "env_allow"; origin = "--env-allow"; break;
		case OPT_JOB_ENV_ALLOW: key = "job_env_allow"; origin = "--job-env-allow"; break;
		default: break;
		}
		if (key) {
			int r = config_set(cfg, key, optarg, origin, err, errlen);
			if (r < 0)
				return r;
		}
	}
	if (action == CONFIG_RUN) {
		int r = config_check(cfg, err, errlen);
		if (r < 0)
			return r;
	}
	*ret_action = action;
	return 0;
}
