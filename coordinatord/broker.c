/*
 * broker: the writer loop and its inproc client (see broker.h).
 *
 * Commands travel as multipart messages on inproc://ringmaster-writer:
 *   client -> loop   [cmd_hdr_t] [args...]   (the ROUTER prepends the identity)
 *   loop -> client   [reply_hdr_t] [body]
 * SUBMIT args are [name] [spec_json] [idempotency key or empty] [submitting
 * token's name or empty]; CANCEL has [job id] [cancelling token's name or
 * empty]; TOKEN has one JSON command (tokenapi.h); PING has none. s_cmds lists the commands: to add one, give it a
 * CMD_ type, an apply function and a row there, and a client function. Each command carries a sequence number so that a
 * client that gave up waiting skips the late answer to its previous command.
 */
#include "broker.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>
#include <systemd/sd-daemon.h>
#include <zmq.h>

#include "clock.h"
#include "curve.h"
#include "enroll.h"
#include "fabric.h"
#include "feed.h"
#include "fsutil.h"
#include "jobview.h"
#include "log.h"
#include "metrics.h"
#include "problem.h"
#include "sbuf.h"
#include "store.h"
#include "tokenapi.h"
#include "wire.h"

#define WRITER_ENDPOINT "inproc://ringmaster-writer"
#define CMD_MAGIC 0x524d4331u /* "RMC1" */
#define MAX_GROUP 256
#define MAX_PARTS 8
#define POLL_MS 100
/* Frames up to twice the payload limit are read and answered with ERROR 413;
 * a larger frame makes ZeroMQ drop the peer's connection. */
#define WIRE_MAX_MSG_BYTES (2 * WIRE_MAX_PAYLOAD_BYTES)

enum { CMD_PING = 1, CMD_SUBMIT, CMD_CANCEL, CMD_TOKEN, CMD_WORKERS };

typedef struct {
	uint32_t magic;
	uint32_t seq;
	uint32_t type;
	int32_t priority;
	int32_t world_size;
	uint32_t has_idem_key;
	unsigned char body_hash[32];
} cmd_hdr_t;

typedef struct {
	uint32_t seq;
	int32_t status;
	uint32_t replayed;
	char job_id[STORE_ID_BYTES];
} reply_hdr_t;

typedef struct {
	unsigned char identity[256];
	size_t identity_len;
	cmd_hdr_t hdr;
	const struct cmd_kind *kind; /* s_cmds row of hdr.type */
	char *arg[4]; /* malloc'ed, NUL-terminated */
	int status;
	bool replayed;
	char job_id[STORE_ID_BYTES]; /* set with a 2xx status */
	sbuf_t body;
} cmd_t;

struct broker {
	void *zctx;
	void *router;  /* workers (tcp) */
	void *writer;  /* inproc commands from HTTP threads */
	store_t *store;
	fabric_t *fabric; /* agents, ranks, scheduling: the ROUTER's side */
	pthread_t thread;
	bool started;
	atomic_bool stop;
	cmd_t group[MAX_GROUP];
	char endpoint[512];
	int max_queued_per_token; /* 429 past it */
	curve_t *curve;   /* --broker-auth on: the ZAP handler */
	char broker_public[CURVE_Z85_BYTES];
};

struct broker_client {
	void *sock;
	uint32_t seq;
};

/* mkdir -p of the folder holding `path` (api/fsutil.h), which must then be
 * writable. 0 or a negative errno with a message in `err`. */
static int make_parent_dirs(const char *path, char *err, size_t errlen)
{
	char dir[4096];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = '\0';
	int r = fs_mkdir_p(dir, 0750);
	if (r < 0) {
		snprintf(err, errlen, "cannot create database folder %s: %s", dir, strerror(-r));
		return r;
	}
	if (access(dir, W_OK) < 0) {
		int e = errno;
		snprintf(err, errlen, "database folder %s is not writable: %s", dir, strerror(e));
		return -e;
	}
	return 0;
}

/* Whether a broker endpoint is only reachable from this host. */
static bool endpoint_is_local(const char *ep)
{
	if (strncmp(ep, "ipc://", 6) == 0 || strncmp(ep, "inproc://", 9) == 0)
		return true;
	if (strncmp(ep, "tcp://", 6) != 0)
		return false;
	const char *host = ep + 6;
	return strncmp(host, "127.", 4) == 0 || strncmp(host, "localhost:", 10) == 0 ||
	       strncmp(host, "[::1]:", 6) == 0 || strncmp(host, "lo:", 3) == 0;
}

/* --broker-auth: make the ROUTER a CURVE server with the ZAP handler, or
 * check that it may go without. 0 or a negative errno with `err`. */
static int setup_auth(broker_t *b, const config_t *cfg, char *err, size_t errlen)
{
	if (!cfg->broker_auth) {
		if (!endpoint_is_local(cfg->broker) && !cfg->insecure) {
			snprintf(err, errlen, "--broker-auth off on %s: anyone who reaches that address could register as an "
			         "agent and report for any job; use a loopback, ipc:// or inproc:// endpoint, or add "
			         "--insecure", cfg->broker);
			return -EINVAL;
		}
		log_warn("broker: --broker-auth off: %s admits any peer without a key%s", cfg->broker,
		         cfg->insecure && !endpoint_is_local(cfg->broker) ? " (--insecure, on a non-loopback address)" : "");
		return 0;
	}
	char secret[CURVE_Z85_BYTES];
	int r = curve_broker_keys(cfg->db, b->broker_public, secret, err, errlen);
	if (r < 0)
		return r;
	b->curve = curve_new(b->zctx, b->store, err, errlen);
	r = b->curve ? curve_server_setup(b->router, secret) : -EIO;
	sodium_memzero(secret, sizeof secret);
	if (r < 0) {
		if (b->curve)
			snprintf(err, errlen, "cannot make the broker a CURVE server: %s", zmq_strerror(-r));
		return r;
	}
	log_info("broker: CURVE on, public key %s; agents enroll with a join token (ringctl worker enroll)",
	         b->broker_public);
	return 0;
}

broker_t *broker_new(void *zctx, const config_t *cfg, char *err, size_t errlen)
{
	const char *endpoint = cfg->broker, *db_path = cfg->db;
	broker_t *b = calloc(1, sizeof *b);
	if (!b) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	b->zctx = zctx;
	b->max_queued_per_token = cfg->max_queued_per_token;
	atomic_init(&b->stop, false);
	snprintf(b->endpoint, sizeof b->endpoint, "%s", endpoint);

	if (make_parent_dirs(db_path, err, errlen) < 0)
		goto fail;
	b->store = store_open(db_path, STORE_OPEN_WRITER, err, errlen);
	if (!b->store)
		goto fail;
	if (feed_init(b->store, 0) < 0) {
		snprintf(err, errlen, "out of memory for the change feed");
		goto fail;
	}

	int linger = 0;
	int64_t max_msg = WIRE_MAX_MSG_BYTES;
	b->router = zmq_socket(zctx, ZMQ_ROUTER);
	if (!b->router) {
		snprintf(err, errlen, "cannot create the broker socket: %s", zmq_strerror(zmq_errno()));
		goto fail;
	}
	if (setup_auth(b, cfg, err, errlen) < 0)
		goto fail;
	zmq_setsockopt(b->router, ZMQ_LINGER, &linger, sizeof linger);
	zmq_setsockopt(b->router, ZMQ_MAXMSGSIZE, &max_msg, sizeof max_msg);
	if (!cfg->broker_auth) {
		int one = 1; /* a reconnecting agent's new connection takes over its identity */
		zmq_setsockopt(b->router, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
	} else {
		/* No handover with keys: a second connection can never take a live
		 * identity over (another enrolled key would silence an agent or a
		 * rank). A reconnecting peer's old connection is gone once its FIN
		 * arrives, or once ZMTP heartbeats find it dead within the agents'
		 * own liveness window. */
		int ivl = cfg->heartbeat_ms, timeout = cfg->heartbeat_ms * cfg->heartbeat_misses;
		zmq_setsockopt(b->router, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
		zmq_setsockopt(b->router, ZMQ_HEARTBEAT_TIMEOUT, &timeout, sizeof timeout);
		zmq_setsockopt(b->router, ZMQ_HEARTBEAT_TTL, &timeout, sizeof timeout);
	}
	if (zmq_bind(b->router, endpoint) != 0) {
		snprintf(err, errlen, "cannot bind the broker to %s: %s", endpoint, zmq_strerror(zmq_errno()));
		goto fail;
	}
	fabric_options_t fo = {
		.heartbeat_ms = cfg->heartbeat_ms,
		.dead_after = cfg->heartbeat_misses,
		.metrics_every = cfg->metrics_every,
		.restart_backoff_ms = cfg->restart_backoff_ms,
		.restart_backoff_max_ms = cfg->restart_backoff_max_ms,
		.restart_grace_ms = cfg->restart_grace_ms,
		.dead_worker_retention_s = cfg->dead_worker_retention_s,
		.auth = cfg->broker_auth,
	};
	b->fabric = fabric_new(b->router, b->store, &fo);
	if (!b->fabric) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	if (fabric_load(b->fabric, err, errlen) < 0)
		goto fail;

	b->writer = zmq_socket(zctx, ZMQ_ROUTER);
	if (!b->writer) {
		snprintf(err, errlen, "cannot create the writer socket: %s", zmq_strerror(zmq_errno()));
		goto fail;
	}
	zmq_setsockopt(b->writer, ZMQ_LINGER, &linger, sizeof linger);
	if (zmq_bind(b->writer, WRITER_ENDPOINT) != 0) {
		snprintf(err, errlen, "cannot bind %s: %s", WRITER_ENDPOINT, zmq_strerror(zmq_errno()));
		goto fail;
	}
	return b;
fail:
	broker_free(b);
	return NULL;
}

/* ---- the loop ---- */

static void cmd_clear(cmd_t *c)
{
	for (int i = 0; i < 4; i++) {
		free(c->arg[i]);
		c->arg[i] = NULL;
	}
	c->kind = NULL;
	c->status = 0;
	c->replayed = false;
	c->job_id[0] = '\0';
	sbuf_reset(&c->body);
}

static void cmd_problem(cmd_t *c, int status, const char *detail)
{
	sbuf_reset(&c->body);
	c->status = status;
	c->replayed = false;
	c->job_id[0] = '\0';
	problem_render(&c->body, status, detail, NULL);
}

/* Receive one whole multipart message into parts[]; extra parts are dropped.
 * Returns the number of parts kept, 0 when nothing is waiting, <0 on error. */
static int recv_parts(void *sock, zmq_msg_t parts[MAX_PARTS], int *ret_total)
{
	int n = 0, total = 0;
	for (;;) {
		zmq_msg_t m;
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, sock, total == 0 ? ZMQ_DONTWAIT : 0) < 0) {
			int e = zmq_errno();
			zmq_msg_close(&m);
			for (int i = 0; i < n; i++)
				zmq_msg_close(&parts[i]);
			return e == EAGAIN && total == 0 ? 0 : -e;
		}
		total++;
		bool more = zmq_msg_more(&m);
		if (n < MAX_PARTS)
			parts[n++] = m;
		else
			zmq_msg_close(&m);
		if (!more)
			break;
	}
	*ret_total = total;
	return n;
}

static char *msg_strdup(zmq_msg_t *m)
{
	size_t n = zmq_msg_size(m);
	char *s = malloc(n + 1);
	if (s) {
		memcpy(s, zmq_msg_data(m), n);
		s[n] = '\0';
	}
	return s;
}

static void send_reply(broker_t *b, const cmd_t *c)
{
	reply_hdr_t h = {.seq = c->hdr.seq, .status = c->status, .replayed = c->replayed};
	snprintf(h.job_id, sizeof h.job_id, "%s", c->job_id);
	if (zmq_send(b->writer, c->identity, c->identity_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
		return;
	zmq_send(b->writer, &h, sizeof h, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(b->writer, c->body.data ? c->body.data : "", c->body.len, ZMQ_DONTWAIT);
}

static void new_job_id(char out[STORE_ID_BYTES])
{
	static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz234567";
	unsigned char rnd[13]; /* 20 symbols x 5 bits = 100 bits */
	randombytes_buf(rnd, sizeof rnd);
	out[0] = 'j';
	out[1] = '-';
	for (int i = 0; i < 20; i++) {
		int bit = i * 5;
		unsigned v = ((unsigned)rnd[bit / 8] << 8 | rnd[bit / 8 + 1]) >> (11 - bit % 8);
		out[2 + i] = alphabet[v & 31];
	}
	out[22] = '\0';
}

/* The reply body: the job's view (jobview.h). 0 or -ENOMEM. */
static int set_job_body(cmd_t *c, const store_job_t *job)
{
	sbuf_reset(&c->body);
	jobview_job(&c->body, job);
	return c->body.failed ? -ENOMEM : 0;
}

/* Apply one SUBMIT inside the open transaction. 0 (with c->status set) or a
 * negative errno that fails the whole group. */
static int apply_submit(broker_t *b, cmd_t *c)
{
	const char *name = c->arg[0], *spec = c->arg[1], *key = c->arg[2];
	const char *by = c->arg[3] && c->arg[3][0] ? c->arg[3] : NULL;
	bool has_key = c->hdr.has_idem_key && key && key[0];
	if (has_key) {
		unsigned char hash[32];
		int status = 0;
		char *body = NULL;
		char job_id[STORE_ID_BYTES];
		int r = store_idem_get(b->store, key, hash, &status, &body, job_id);
		if (r == 0) {
			if (sodium_memcmp(hash, c->hdr.body_hash, sizeof hash) == 0) {
				sbuf_reset(&c->body);
				sbuf_puts(&c->body, body ? body : "");
				c->status = status;
				c->replayed = true;
				snprintf(c->job_id, sizeof c->job_id, "%s", job_id);
			} else {
				char detail[512];
				snprintf(detail, sizeof detail,
				         "Idempotency-Key was already used for a different request body (job %s); "
				         "use a new key for a new job",
				         job_id);
				cmd_problem(c, 409, detail);
			}
			free(body);
			return 0;
		}
		if (r != -ENOENT)
			return r;
	}

	if (by) { /* the per-token cap on queued jobs */
		int64_t n_queued = 0;
		int r = store_job_count_queued_by(b->store, by, &n_queued);
		if (r < 0)
			return r;
		if (n_queued >= b->max_queued_per_token) {
			char detail[256];
			snprintf(detail, sizeof detail,
			         "token \"%s\" already has %lld queued jobs, the cap per token (max_queued_per_token "
			         "%d); wait for some to start or cancel some",
			         by, (long long)n_queued, b->max_queued_per_token);
			cmd_problem(c, 429, detail);
			return 0;
		}
	}
	store_job_t job;
	memset(&job, 0, sizeof job);
	job.name = (char *)name;
	job.submitted_by = (char *)by;
	job.spec_json = (char *)spec;
	job.priority = c->hdr.priority;
	job.world_size = c->hdr.world_size;
	job.state = STORE_JOB_QUEUED;
	job.created_at_us = job.updated_at_us = clock_wall_us();
	int r = -EEXIST;
	for (int tries = 0; tries < 4 && r == -EEXIST; tries++) {
		new_job_id(job.id);
		r = store_job_insert(b->store, &job);
	}
	if (r < 0)
		return r;
	if (set_job_body(c, &job) < 0)
		return -ENOMEM;
	c->status = 201;
	snprintf(c->job_id, sizeof c->job_id, "%s", job.id);
	if (has_key) {
		r = store_idem_put(b->store, key, c->hdr.body_hash, 201, c->body.data, job.id,
		                   job.created_at_us);
		if (r < 0)
			return r;
	}
	log_debug("job %s submitted", job.id);
	return 0;
}

static int apply_cancel(broker_t *b, cmd_t *c)
{
	const char *id = c->arg[0];
	store_job_t job;
	memset(&job, 0, sizeof job);
	int r = store_job_get(b->store, id, &job);
	if (r == -ENOENT) {
		char detail[256];
		snprintf(detail, sizeof detail, "no job with id %.40s", id);
		cmd_problem(c, 404, detail);
		return 0;
	}
	if (r < 0)
		return r;
	if (store_job_state_is_final(job.state)) {
		char detail[256];
		snprintf(detail, sizeof detail,
		         "job %s is already %s; only queued, scheduled, running or recovering jobs can be cancelled",
		         job.id, store_job_state_name(job.state));
		store_job_clear(&job);
		cmd_problem(c, 409, detail);
		return 0;
	}
	store_job_clear(&job);
	const char *by = c->arg[1] && c->arg[1][0] ? c->arg[1] : NULL;
	r = store_job_cancel(b->store, id, by, "cancelled by request", clock_wall_us());
	if (r < 0)
		return r;
	r = store_job_get(b->store, id, &job);
	if (r < 0)
		return r;
	r = set_job_body(c, &job);
	store_job_clear(&job);
	if (r < 0)
		return -ENOMEM;
	c->status = 200;
	snprintf(c->job_id, sizeof c->job_id, "%s", id);
	log_info("job %s cancelled%s%s", id, by ? " by " : "", by ? by : "");
	return 0;
}

static int apply_token(broker_t *b, cmd_t *c)
{
	return tokenapi_apply(b->store, c->arg[0], &c->body, &c->status);
}

/* The workers' keys and join tokens (enroll.h): args [op] [a1] [a2]. */
static int apply_workers(broker_t *b, cmd_t *c)
{
	int64_t revoked = 0;
	if (!b->curve) {
		cmd_problem(c, 409, "the broker runs with --broker-auth off: there are no keys or join tokens");
		return 0;
	}
	int r = enroll_apply(b->store, b->broker_public, c->arg[0], c->arg[1], c->arg[2], &c->body, &c->status,
	                     &revoked);
	if (r == -EINVAL) {
		cmd_problem(c, 400, "unknown workers operation");
		return 0;
	}
	if (revoked)
		snprintf(c->job_id, sizeof c->job_id, "%lld", (long long)revoked);
	return r;
}

static void workers_committed(broker_t *b, const cmd_t *c)
{
	if (c->status == 200 && c->job_id[0] && strcmp(c->arg[0], ENROLL_OP_KEY_REVOKE) == 0)
		fabric_key_revoked(b->fabric, strtoll(c->job_id, NULL, 10));
}

/* After the group's commit: the workers' side may act on it now. */
static void submit_committed(broker_t *b, const cmd_t *c)
{
	if (c->status == 201 && !c->replayed)
		fabric_mark_dirty(b->fabric);
}

static void cancel_committed(broker_t *b, const cmd_t *c)
{
	if (c->status == 200)
		fabric_job_cancelled(b->fabric, c->arg[0], "cancelled by request");
}

/*
 * The commands, one row each: the header's type, its name (for logs), the
 * argument frames it carries, what it does inside the group's transaction
 * (NULL: answered at once, without the store) and what follows its commit.
 */
typedef struct cmd_kind {
	uint32_t type;
	const char *name;
	int n_args;
	int (*apply)(broker_t *b, cmd_t *c);
	void (*committed)(broker_t *b, const cmd_t *c);
} cmd_kind_t;

static const cmd_kind_t s_cmds[] = {
	{CMD_PING, "ping", 0, NULL, NULL},
	{CMD_SUBMIT, "submit", 4, apply_submit, submit_committed},
	{CMD_CANCEL, "cancel", 2, apply_cancel, cancel_committed},
	{CMD_TOKEN, "token", 1, apply_token, NULL},
	{CMD_WORKERS, "workers", 3, apply_workers, workers_committed},
};

static const cmd_kind_t *cmd_kind(uint32_t type)
{
	for (size_t i = 0; i < sizeof s_cmds / sizeof s_cmds[0]; i++)
		if (s_cmds[i].type == type)
			return &s_cmds[i];
	return NULL;
}

/* Parse one command message into c. false when it is not a valid command
 * (it is then dropped: only our own clients speak on this socket). */
static bool parse_cmd(cmd_t *c, zmq_msg_t *parts, int n)
{
	if (n < 2 || zmq_msg_size(&parts[0]) > sizeof c->identity ||
	    zmq_msg_size(&parts[1]) != sizeof c->hdr)
		return false;
	c->identity_len = zmq_msg_size(&parts[0]);
	memcpy(c->identity, zmq_msg_data(&parts[0]), c->identity_len);
	memcpy(&c->hdr, zmq_msg_data(&parts[1]), sizeof c->hdr);
	if (c->hdr.magic != CMD_MAGIC)
		return false;
	c->kind = cmd_kind(c->hdr.type);
	if (!c->kind || n != 2 + c->kind->n_args)
		return false;
	for (int i = 0; i < c->kind->n_args; i++) {
		c->arg[i] = msg_strdup(&parts[2 + i]);
		if (!c->arg[i])
			return false;
	}
	return true;
}

/* Drain the command socket and apply everything in one transaction. */
static void handle_commands(broker_t *b)
{
	int n_cmd = 0;
	while (n_cmd < MAX_GROUP) {
		zmq_msg_t parts[MAX_PARTS];
		int total = 0;
		int n = recv_parts(b->writer, parts, &total);
		if (n <= 0)
			break;
		cmd_t *c = &b->group[n_cmd];
		bool ok = parse_cmd(c, parts, n);
		for (int i = 0; i < n; i++)
			zmq_msg_close(&parts[i]);
		if (!ok) {
			cmd_clear(c);
			continue;
		}
		if (!c->kind->apply) {
			c->status = 200;
			send_reply(b, c);
			cmd_clear(c);
			continue;
		}
		n_cmd++;
	}
	if (n_cmd == 0)
		return;

	fabric_flush(b->fabric); /* the group gets a transaction of its own */
	int r = store_begin(b->store);
	for (int i = 0; i < n_cmd && r == 0; i++) {
		cmd_t *c = &b->group[i];
		r = c->kind->apply(b, c);
	}
	if (r == 0) {
		r = store_commit(b->store);
		if (r < 0)
			log_error("store: commit of %d command(s) failed: %s", n_cmd, store_errmsg(b->store));
	} else {
		log_error("store: a group of %d command(s) failed (%s): %s", n_cmd, strerror(-r),
		          store_errmsg(b->store));
	}
	if (r < 0) {
		store_rollback(b->store);
		for (int i = 0; i < n_cmd; i++)
			cmd_problem(&b->group[i], 503,
			            "the coordinator could not write to its database; nothing was stored, retry later");
	}
	metrics_record_commit(n_cmd, r == 0);
	if (r == 0)
		feed_collect(b->store); /* the streams see it once it is durable */
	for (int i = 0; i < n_cmd && r == 0; i++)
		if (b->group[i].kind->committed)
			b->group[i].kind->committed(b, &b->group[i]);
	for (int i = 0; i < n_cmd; i++) {
		send_reply(b, &b->group[i]);
		cmd_clear(&b->group[i]);
	}
}

static void *loop_main(void *arg)
{
	broker_t *b = arg;
	uint64_t wd_usec = 0;
	int64_t wd_next = 0;
	if (sd_watchdog_enabled(0, &wd_usec) > 0 && wd_usec > 0) {
		wd_usec /= 2;
		wd_next = clock_mono_us();
		log_info("systemd watchdog enabled: keep-alive every %llu ms", (unsigned long long)wd_usec / 1000);
	} else {
		wd_usec = 0;
	}
	log_debug("broker loop started");
	int64_t polled_us = clock_mono_us(); /* when the last poll returned */
	while (!atomic_load(&b->stop)) {
		long timeout_ms = POLL_MS;
		long fabric_ms = fabric_timeout_ms(b->fabric);
		if (fabric_ms < timeout_ms)
			timeout_ms = fabric_ms;
		if (wd_usec) {
			int64_t now = clock_mono_us();
			if (now >= wd_next) {
				sd_notify(0, "WATCHDOG=1");
				wd_next = now + (int64_t)wd_usec;
			}
			long until = (long)((wd_next - now) / 1000);
			if (until < timeout_ms)
				timeout_ms = until < 0 ? 0 : until;
		}
		zmq_pollitem_t items[3] = {
			{.socket = b->writer, .events = ZMQ_POLLIN},
			{.socket = b->router, .events = ZMQ_POLLIN},
			{.socket = b->curve ? curve_zap_socket(b->curve) : NULL, .events = ZMQ_POLLIN},
		};
		int64_t poll_us = clock_mono_us();
		int r = zmq_poll(items, b->curve ? 3 : 2, timeout_ms);
		int64_t now_us = clock_mono_us();
		/* deaf: the work since the last poll, and any oversleep of this one */
		int64_t deaf_us = poll_us - polled_us;
		if (now_us - poll_us > (int64_t)timeout_ms * 1000)
			deaf_us += now_us - poll_us - (int64_t)timeout_ms * 1000;
		polled_us = now_us;
		fabric_deaf(b->fabric, deaf_us);
		if (r < 0) {
			if (zmq_errno() == EINTR)
				continue;
			if (zmq_errno() == ETERM)
				break;
			log_error("broker: poll failed: %s", zmq_strerror(zmq_errno()));
			struct timespec ts = {0, 10 * 1000 * 1000};
			nanosleep(&ts, NULL);
			continue;
		}
		if (items[0].revents & ZMQ_POLLIN)
			handle_commands(b);
		if (b->curve && (items[2].revents & ZMQ_POLLIN))
			curve_handle_zap(b->curve); /* handshakes first: their peers wait */
		if (items[1].revents & ZMQ_POLLIN)
			fabric_handle_wire(b->fabric);
		fabric_tick(b->fabric);
		fabric_flush(b->fabric);
	}
	fabric_flush(b->fabric);
	log_debug("broker loop stopped");
	return NULL;
}

int broker_start(broker_t *b)
{
	int r = pthread_create(&b->thread, NULL, loop_main, b);
	if (r)
		return -r;
	b->started = true;
	return 0;
}

void broker_stop(broker_t *b)
{
	if (!b || !b->started)
		return;
	atomic_store(&b->stop, true);
	pthread_join(b->thread, NULL);
	b->started = false;
}

void broker_free(broker_t *b)
{
	if (!b)
		return;
	broker_stop(b);
	for (int i = 0; i < MAX_GROUP; i++) {
		cmd_clear(&b->group[i]);
		sbuf_free(&b->group[i].body);
	}
	fabric_flush(b->fabric);
	fabric_free(b->fabric);
	if (b->writer)
		zmq_close(b->writer);
	if (b->router)
		zmq_close(b->router);
	curve_free(b->curve);
	store_close(b->store);
	free(b);
}

/* ---- client ---- */

broker_client_t *broker_client_new(void *zctx)
{
	broker_client_t *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->sock = zmq_socket(zctx, ZMQ_DEALER);
	if (!c->sock)
		goto fail;
	int linger = 0;
	zmq_setsockopt(c->sock, ZMQ_LINGER, &linger, sizeof linger);
	if (zmq_connect(c->sock, WRITER_ENDPOINT) != 0)
		goto fail;
	return c;
fail:
	broker_client_free(c);
	return NULL;
}

void broker_client_free(broker_client_t *c)
{
	if (!c)
		return;
	if (c->sock)
		zmq_close(c->sock);
	free(c);
}

void broker_reply_clear(broker_reply_t *r)
{
	free(r->body);
	memset(r, 0, sizeof *r);
}

/* Send hdr + args; wait for the reply with the same seq. */
static int call(broker_client_t *c, cmd_hdr_t *hdr, const char *const *args, int n_args,
                int timeout_ms, broker_reply_t *ret)
{
	hdr->magic = CMD_MAGIC;
	hdr->seq = ++c->seq;
	if (zmq_send(c->sock, hdr, sizeof *hdr, n_args ? ZMQ_SNDMORE : 0) < 0)
		return -zmq_errno();
	for (int i = 0; i < n_args; i++) {
		const char *a = args[i] ? args[i] : "";
		if (zmq_send(c->sock, a, strlen(a), i + 1 < n_args ? ZMQ_SNDMORE : 0) < 0)
			return -zmq_errno();
	}
	int64_t deadline = clock_mono_us() + (int64_t)timeout_ms * 1000;
	for (;;) {
		int64_t left_ms = (deadline - clock_mono_us()) / 1000;
		if (left_ms <= 0)
			return -ETIMEDOUT;
		zmq_pollitem_t item = {.socket = c->sock, .events = ZMQ_POLLIN};
		int r = zmq_poll(&item, 1, (long)left_ms);
		if (r < 0) {
			if (zmq_errno() == EINTR)
				continue;
			return -zmq_errno();
		}
		if (r == 0)
			return -ETIMEDOUT;
		zmq_msg_t parts[MAX_PARTS];
		int total = 0;
		int n = recv_parts(c->sock, parts, &total);
		if (n < 0)
			return n;
		if (n == 0)
			continue;
		reply_hdr_t h;
		bool mine = n == 2 && zmq_msg_size(&parts[0]) == sizeof h;
		if (mine) {
			memcpy(&h, zmq_msg_data(&parts[0]), sizeof h);
			mine = h.seq == c->seq;
		}
		if (mine && ret) {
			ret->status = h.status;
			ret->replayed = h.replayed != 0;
			h.job_id[sizeof h.job_id - 1] = '\0';
			memcpy(ret->job_id, h.job_id, sizeof ret->job_id);
			ret->body = msg_strdup(&parts[1]);
			ret->body_len = zmq_msg_size(&parts[1]);
		}
		for (int i = 0; i < n; i++)
			zmq_msg_close(&parts[i]);
		if (!mine)
			continue; /* a late answer to a command we gave up on */
		if (ret && !ret->body)
			return -ENOMEM;
		return 0;
	}
}

int broker_client_submit(broker_client_t *c, const broker_submit_t *cmd, int timeout_ms,
                         broker_reply_t *ret)
{
	cmd_hdr_t h;
	memset(&h, 0, sizeof h);
	h.type = CMD_SUBMIT;
	h.priority = cmd->priority;
	h.world_size = cmd->world_size;
	h.has_idem_key = cmd->idem_key != NULL;
	memcpy(h.body_hash, cmd->body_hash, sizeof h.body_hash);
	const char *args[4] = {cmd->name, cmd->spec_json, cmd->idem_key, cmd->submitted_by};
	memset(ret, 0, sizeof *ret);
	return call(c, &h, args, 4, timeout_ms, ret);
}

int broker_client_cancel(broker_client_t *c, const char *job_id, const char *cancelled_by, int timeout_ms,
                         broker_reply_t *ret)
{
	cmd_hdr_t h;
	memset(&h, 0, sizeof h);
	h.type = CMD_CANCEL;
	const char *args[2] = {job_id, cancelled_by};
	memset(ret, 0, sizeof *ret);
	return call(c, &h, args, 2, timeout_ms, ret);
}

int broker_client_token(broker_client_t *c, const char *cmd_json, int timeout_ms, broker_reply_t *ret)
{
	cmd_hdr_t h;
	memset(&h, 0, sizeof h);
	h.type = CMD_TOKEN;
	const char *args[1] = {cmd_json};
	memset(ret, 0, sizeof *ret);
	return call(c, &h, args, 1, timeout_ms, ret);
}

int broker_client_ping(broker_client_t *c, int timeout_ms)
{
	cmd_hdr_t h;
	memset(&h, 0, sizeof h);
	h.type = CMD_PING;
	return call(c, &h, NULL, 0, timeout_ms, NULL);
}

int broker_client_workers(broker_client_t *c, const char *op, const char *a1, const char *a2, int timeout_ms,
                          broker_reply_t *ret)
{
	cmd_hdr_t h;
	memset(&h, 0, sizeof h);
	h.type = CMD_WORKERS;
	const char *args[3] = {op, a1, a2};
	memset(ret, 0, sizeof *ret);
	return call(c, &h, args, 3, timeout_ms, ret);
}
