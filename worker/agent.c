/*
 * agent: the node agent (see agent.h). One loop: coordinator messages, the
 * signalfd (SIGCHLD, SIGTERM, SIGINT) and the ranks' stderr pipes.
 */
#include "agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <zmq.h>

#include "exitcode.h"
#include "fabric.h"
#include "gpus.h"
#include "program.h"
#include "ranklog.h"
#include "wire.h"

extern char **environ;

#define JOB_MAX_BYTES 128
/* A SPAWN may name a slot whose rank has sent DONE but not exited yet (the
 * coordinator frees a device when its rank is done). The new rank waits for
 * the old one this long, then the old one gets SIGTERM. */
#define PENDING_GRACE_MS 2000
#define ERROR_MAX_BYTES 512

/* One device slot and the rank running on it, if any. */
typedef struct {
	bool busy;
	pid_t pid;
	char job[JOB_MAX_BYTES];
	int attempt;
	int rank;
	int fds[2];                    /* read ends of its stdout and stderr; -1 once closed */
	ranklog_t log;                 /* its lines on their way to the coordinator */
	int64_t rest_until_us[2];      /* do not poll that pipe before (monotonic) */
	char last_error[ERROR_MAX_BYTES]; /* last stderr line saying "error" */
	int64_t kill_at_us;            /* SIGKILL deadline after SIGTERM; 0: none */
	json_t *pending;               /* a SPAWN for this slot, run once the rank exits */
	int64_t pending_term_at_us;    /* SIGTERM the rank then if it is still running */
	program_rank_t *prog;          /* a program rank's metrics pipe; NULL: a built-in rank */
} slot_t;

typedef struct {
	const agent_options_t *opt;
	FILE *log;
	char node[256];
	char advertise[INET6_ADDRSTRLEN];
	char exe[PATH_MAX];
	int n_slots;         /* n_cpu + n_gpus */
	int n_cpu;           /* cpu:i is slots[i] */
	int n_gpus;          /* cuda:g is slots[n_cpu + g], GPU gpus[g] */
	gpu_info_t gpus[GPUS_MAX];
	char gpu_note[256];  /* why no GPU is advertised, when none is */
	slot_t *slots;
	cpu_set_t avail;     /* the CPUs this agent may hand out */
	sigset_t old_mask;   /* restored in the ranks */
	int sig_fd;
	void *zctx;
	fabric_t *fab;
	bool registered;
	int heartbeat_ms;
	int dead_after;
	int64_t retry_at_us; /* unregistered: reconnect when nothing came by then */
	bool stopping;
	int64_t stop_deadline_us;
	int kill_grace_ms;
	long long memory_bytes; /* offered to ranks, sent in REGISTER (0: unknown) */
} agent_t;

static void s_log(agent_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void s_log(agent_t *a, const char *fmt, ...)
{
	/* RFC 3339 UTC with microseconds, as ringmasterd's log. */
	struct timeval tv;
	struct tm tm;
	char when[32];
	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
	fprintf(a->log, "%s.%06ldZ agent %s: ", when, (long)tv.tv_usec, a->node);
	va_list ap;
	va_start(ap, fmt);
	vfprintf(a->log, fmt, ap);
	va_end(ap);
	fputc('\n', a->log);
	fflush(a->log);
}

/* ---- ranks ---- */

static slot_t *s_find(agent_t *a, const char *job, int attempt, int rank)
{
	for (int i = 0; i < a->n_slots; i++) {
		slot_t *s = &a->slots[i];
		if (s->busy && s->attempt == attempt && s->rank == rank && strcmp(s->job, job) == 0)
			return s;
	}
	return NULL;
}

/* Whether a pending SPAWN is of `job` (and `attempt` and `rank` unless -1). */
static bool s_pending_matches(const json_t *p, const char *job, int attempt, int rank)
{
	return strcmp(json_string_value(json_object_get(p, "job")), job) == 0 &&
	       (attempt < 0 || json_integer_value(json_object_get(p, "attempt")) == attempt) &&
	       (rank < 0 || json_integer_value(json_object_get(p, "rank")) == rank);
}

static int s_n_running(const agent_t *a)
{
	int n = 0;
	for (int i = 0; i < a->n_slots; i++)
		n += a->slots[i].busy;
	return n;
}

static void s_send(agent_t *a, wire_type_t type, json_t *payload)
{
	if (!payload) {
		s_log(a, "out of memory building %s", wire_type_name(type));
		return;
	}
	int rc = fabric_send(a->fab, type, payload);
	if (rc < 0)
		s_log(a, "could not send %s: %s", wire_type_name(type), strerror(-rc));
	json_decref(payload);
}

/* "cpu:3" or "cuda:0": slot i as the coordinator names its device. */
static void s_slot_label(const agent_t *a, int i, char *buf, size_t n)
{
	if (i < a->n_cpu)
		snprintf(buf, n, "cpu:%d", i);
	else
		snprintf(buf, n, "cuda:%d", i - a->n_cpu);
}

/* The host memory the ranks may use: MemAvailable now, else MemTotal; 0
 * when /proc/meminfo cannot be read. */
static long long s_host_memory(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	if (!f)
		return 0;
	char line[256];
	unsigned long long kib, total = 0, avail = 0;
	while (fgets(line, sizeof line, f)) {
		if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
			avail = kib;
		else if (sscanf(line, "MemTotal: %llu kB", &kib) == 1)
			total = kib;
	}
	fclose(f);
	return (long long)(avail ? avail : total) * 1024;
}

static void s_send_register(agent_t *a)
{
	json_t *devices = json_array(), *ranks = json_array();
	for (int i = 0; i < a->n_slots; i++) {
		if (i < a->n_cpu) {
			json_array_append_new(devices, json_pack("{s:s, s:i}", "kind", "cpu", "index", i));
		} else {
			const gpu_info_t *g = &a->gpus[i - a->n_cpu];
			json_array_append_new(devices, json_pack("{s:s, s:i, s:s, s:I, s:s}", "kind", "cuda",
			                                         "index", i - a->n_cpu, "name", g->name,
			                                         "memory_bytes", (json_int_t)g->memory_bytes,
			                                         "uuid", g->uuid));
		}
		const slot_t *s = &a->slots[i];
		if (s->busy)
			json_array_append_new(ranks, json_pack("{s:s, s:i, s:i, s:i}", "job", s->job,
			                                       "attempt", s->attempt, "rank", s->rank,
			                                       "pid", (int)s->pid));
	}
	json_t *reg = json_pack("{s:s, s:o, s:o, s:s, s:s, s:I}", "node", a->node, "devices", devices, "ranks",
	                        ranks, "advertise", a->advertise, "version", RINGMASTER_VERSION,
	                        "memory_bytes", (json_int_t)a->memory_bytes);
	if (reg && a->opt->checkpoint_root && a->opt->checkpoint_root[0] == '/')
		json_object_set_new(reg, "checkpoint_root", json_string(a->opt->checkpoint_root));
	if (reg && a->opt->n_allow_program > 0) {
		int lo = a->opt->program_port_lo > 0 ? a->opt->program_port_lo : PROGRAM_PORTS_LO;
		int hi = a->opt->program_port_lo > 0 ? a->opt->program_port_hi : PROGRAM_PORTS_HI;
		json_object_set_new(reg, "programs", json_true());
		json_object_set_new(reg, "program_ports", json_pack("[i, i]", lo, hi));
	}
	s_send(a, WIRE_REGISTER, reg);
}

static void s_send_exited(agent_t *a, const slot_t *s, int exit_code, int sig)
{
	s_send(a, WIRE_RANK_EXITED,
	       json_pack("{s:s, s:i, s:i, s:i, s:i, s:s, s:i}", "job", s->job, "attempt", s->attempt,
	                 "rank", s->rank, "exit_code", exit_code, "signal", sig, "error",
	                 s->last_error, "failure", (int)rm_exit_failure(exit_code, sig)));
}

/* A RANK_EXITED for a SPAWN that never ran (bad device, fork failed). */
static void s_refuse_spawn(agent_t *a, const char *job, int attempt, int rank, const char *why)
{
	s_log(a, "cannot spawn rank %s/%d/%d: %s", job, attempt, rank, why);
	char msg[ERROR_MAX_BYTES];
	/* why may be longer than msg has room for: cut it, on purpose */
	snprintf(msg, sizeof msg, "ringworker agent: error: %.*s", (int)(sizeof msg - 32), why);
	s_send(a, WIRE_RANK_EXITED,
	       json_pack("{s:s, s:i, s:i, s:i, s:i, s:s, s:i}", "job", job, "attempt", attempt, "rank",
	                 rank, "exit_code", RM_EXIT_USAGE, "signal", 0, "error", msg, "failure",
	                 (int)RM_FAILURE_SPAWN));
}

/* Copy a string, cut to fit `n` bytes (always terminated). */
static void s_copy(char *dst, size_t n, const char *src)
{
	size_t len = strlen(src);
	if (len >= n)
		len = n - 1;
	memcpy(dst, src, len);
	dst[len] = '\0';
}

/* The wall clock, Unix microseconds: the time of a rank's log lines. */
static int64_t s_wall_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

typedef struct {
	agent_t *a;
	slot_t *s;
} line_ctx_t;

/* One complete output line of a rank (ranklog_line_fn): into the agent's log;
 * remembered when it is on stderr and says error. */
static void s_rank_line(void *cls, ranklog_stream_t stream, const char *line)
{
	line_ctx_t *c = cls;
	fprintf(c->a->log, "[rank %s/%d/%d] %s\n", c->s->job, c->s->attempt, c->s->rank, line);
	if (stream == RANKLOG_STDERR && strcasestr(line, "error"))
		s_copy(c->s->last_error, sizeof c->s->last_error, line);
}

/* Send the rank's batch of log lines when it is due, or now with `force`. */
static void s_flush_log(agent_t *a, slot_t *s, bool force)
{
	if (!ranklog_pending(&s->log) || (!force && !ranklog_due(&s->log, s_wall_us())))
		return;
	s_send(a, WIRE_LOGS, ranklog_take(&s->log, s->job, s->attempt, s->rank));
}

/* Read what the rank wrote on `stream` (at most 64 KiB a call, so that one
 * loud rank cannot starve the others; the pipe never blocks the rank for
 * long as the agent comes back at once). At EOF or on error the pipe is
 * closed. A full batch goes out at once. */
static void s_drain(agent_t *a, slot_t *s, ranklog_stream_t stream)
{
	char buf[4096];
	line_ctx_t c = {a, s};
	s->rest_until_us[stream] = fabric_now_us() + (int64_t)RANKLOG_DRAIN_INTERVAL_MS * 1000;
	for (int i = 0; i < 16; i++) {
		ssize_t n = read(s->fds[stream], buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			if (i == 0)
				s->rest_until_us[stream] = 0; /* nothing was there: no rest */
			break;
		}
		if (n <= 0) {
			ranklog_eof(&s->log, stream, s_wall_us(), s_rank_line, &c);
			close(s->fds[stream]);
			s->fds[stream] = -1;
			break;
		}
		ranklog_feed(&s->log, stream, buf, (size_t)n, s_wall_us(), s_rank_line, &c);
		if (ranklog_due(&s->log, s_wall_us()))
			s_flush_log(a, s, false);
	}
	fflush(a->log); /* once per read, not per line: a flood costs fewer writes */
}

/* A program's metrics row (program_row_fn): PROGRAM_METRICS. */
static void s_metrics_row(void *cls, json_t *row, const char *bad)
{
	const line_ctx_t *c = cls;
	(void)bad;
	s_send(c->a, WIRE_PROGRAM_METRICS, json_pack("{s:s, s:i, s:i, s:o}", "job", c->s->job, "attempt",
	                                             c->s->attempt, "rank", c->s->rank, "row", row));
}

static void s_drain_metrics(agent_t *a, slot_t *s)
{
	line_ctx_t c = {a, s};
	char label[400];
	snprintf(label, sizeof label, "agent %s: rank %s/%d/%d", a->node, s->job, s->attempt, s->rank);
	program_rank_drain(s->prog, fabric_now_us(), a->log, label, s_metrics_row, &c);
}

/* Append "NAME=value" to env, dropping any NAME= there. */
static int s_env_set(char **env, int *n, const char *name, const char *value)
{
	size_t nl = strlen(name);
	for (int i = 0; i < *n; i++) {
		if (strncmp(env[i], name, nl) == 0 && env[i][nl] == '=') {
			free(env[i]);
			env[i--] = env[--*n];
		}
	}
	char *kv;
	if (asprintf(&kv, "%s=%s", name, value) < 0)
		return -ENOMEM;
	env[(*n)++] = kv;
	env[*n] = NULL;
	return 0;
}

static void s_strv_free(char **v)
{
	if (!v)
		return;
	for (char **p = v; *p; p++)
		free(*p);
	free(v);
}

/* The rank's environment: `base` (rankenv_build's), with its thread count and the allocator
 * settings that keep glibc from returning (and re-faulting) the training
 * buffers every step; a GPU rank (`gpu` not NULL) sees only its GPU, as
 * CUDA device 0: CUDA_VISIBLE_DEVICES names it by UUID (the same GPU
 * whatever CUDA_DEVICE_ORDER says; its NVML index, which is PCI bus order,
 * where NVML gave no UUID). NULL on out-of-memory. */
static char **s_rank_env(char *const *base, int n_threads, const gpu_info_t *gpu)
{
	int n = 0;
	while (base[n])
		n++;
	char **env = calloc((size_t)n + 8, sizeof *env);
	if (!env)
		return NULL;
	int m = 0;
	for (int i = 0; i < n; i++) {
		env[m] = strdup(base[i]);
		if (!env[m])
			goto fail;
		m++;
	}
	char threads[16];
	snprintf(threads, sizeof threads, "%d", n_threads);
	if (s_env_set(env, &m, "OMP_NUM_THREADS", threads) < 0 ||
	    s_env_set(env, &m, "MALLOC_MMAP_MAX_", "0") < 0 ||
	    s_env_set(env, &m, "MALLOC_TRIM_THRESHOLD_", "100000000000") < 0)
		goto fail;
	if (gpu) {
		char visible[GPUS_UUID_BYTES];
		if (gpu->uuid[0])
			snprintf(visible, sizeof visible, "%s", gpu->uuid);
		else
			snprintf(visible, sizeof visible, "%d", gpu->index);
		if (s_env_set(env, &m, "CUDA_DEVICE_ORDER", "PCI_BUS_ID") < 0 ||
		    s_env_set(env, &m, "CUDA_VISIBLE_DEVICES", visible) < 0)
			goto fail;
	}
	return env;
fail:
	s_strv_free(env);
	return NULL;
}

static void s_child_fail(const char *what)
{
	/* Only async-signal-safe calls between fork and exec. */
	static const char pre[] = "ringworker agent: error: cannot start the rank: ";
	(void)!write(2, pre, sizeof pre - 1);
	(void)!write(2, what, strlen(what));
	(void)!write(2, "\n", 1);
	_exit(RM_EXIT_EXEC);
}

/*
 * The device slot a SPAWN `p` (of rank `rank` of `job`'s `attempt`) starts a
 * process on, or -1 when the SPAWN is answered here: ignored (a repeat),
 * refused (RANK_EXITED: shutting down, a bad job id or device, a slot with
 * a rank already waiting), taken by a parked survivor (adopt), or left
 * pending until the device's old rank is gone.
 */
static int s_spawn_slot(agent_t *a, const json_t *p, const char *job, int attempt, int rank)
{
	const json_t *dev = json_object_get(p, "device");
	const char *kind = json_string_value(json_object_get(dev, "kind"));
	json_int_t index = json_integer_value(json_object_get(dev, "index"));
	char why[512];

	bool dup = s_find(a, job, attempt, rank) != NULL;
	for (int i = 0; i < a->n_slots && !dup; i++)
		dup = a->slots[i].pending && a->slots[i].pending != p &&
		      s_pending_matches(a->slots[i].pending, job, attempt, rank);
	if (dup) {
		s_log(a, "rank %s/%d/%d already runs here; SPAWN ignored", job, attempt, rank);
		return -1;
	}
	if (a->stopping) {
		s_refuse_spawn(a, job, attempt, rank, "the agent is shutting down");
		return -1;
	}
	if (strlen(job) >= JOB_MAX_BYTES || strchr(job, '/')) {
		s_refuse_spawn(a, job, attempt, rank, "job id too long or contains '/'");
		return -1;
	}
	int slot_i = -1;
	if (kind && strcmp(kind, "cpu") == 0 && index >= 0 && index < a->n_cpu)
		slot_i = (int)index;
	else if (kind && strcmp(kind, "cuda") == 0 && index >= 0 && index < a->n_gpus)
		slot_i = a->n_cpu + (int)index;
	if (slot_i < 0) {
		char gpus[48] = "no GPU";
		if (a->n_gpus > 0)
			snprintf(gpus, sizeof gpus, "cuda:0..cuda:%d", a->n_gpus - 1);
		snprintf(why, sizeof why, "no device %s:%lld on node %s (it has cpu:0..cpu:%d and %s)",
		         kind ? kind : "?", (long long)index, a->node, a->n_cpu - 1, gpus);
		s_refuse_spawn(a, job, attempt, rank, why);
		return -1;
	}
	slot_t *s = &a->slots[slot_i];
	/* A survivor of the failed attempt `adopt`, parked in its process on
	 * this device, becomes this attempt's rank (the coordinator sends it
	 * REJOIN); if it is gone meanwhile, a new process is spawned. */
	const json_t *adopt = json_object_get(p, "adopt");
	if (json_is_integer(adopt)) {
		if (s->busy && !s->kill_at_us && s->attempt == json_integer_value(adopt) && s->rank == rank &&
		    strcmp(s->job, job) == 0) {
			s_log(a, "rank %s/%d/%d (pid %d) rejoins as attempt %d in its process", job, s->attempt,
			      rank, (int)s->pid, attempt);
			s_flush_log(a, s, true); /* what it printed so far belongs to the old attempt */
			s->attempt = attempt;
			return -1;
		}
		s_log(a, "rank %s/%lld/%d is no longer running here: spawning attempt %d afresh", job,
		      (long long)json_integer_value(adopt), rank, attempt);
	}
	if (s->busy) {
		char dev_name[32];
		s_slot_label(a, slot_i, dev_name, sizeof dev_name);
		if (s->pending) {
			snprintf(why, sizeof why, "device %s is busy with rank %s/%d/%d and rank %s/%lld/%lld waits for it",
			         dev_name, s->job, s->attempt, s->rank,
			         json_string_value(json_object_get(s->pending, "job")),
			         (long long)json_integer_value(json_object_get(s->pending, "attempt")),
			         (long long)json_integer_value(json_object_get(s->pending, "rank")));
			s_refuse_spawn(a, job, attempt, rank, why);
			return -1;
		}
		/* The coordinator placed it here, so it holds the old rank finished. */
		s->pending = json_incref((json_t *)p);
		s->pending_term_at_us = fabric_now_us() + (int64_t)PENDING_GRACE_MS * 1000;
		s_log(a, "rank %s/%d/%d waits for %s, still held by rank %s/%d/%d (pid %d)", job,
		      attempt, rank, dev_name, s->job, s->attempt, s->rank, (int)s->pid);
		return -1;
	}
	return slot_i;
}

/* The command line of a rank process (its number arguments kept in `ra`). */
typedef struct {
	char attempt[16], rank[16], world[16], timeout[16], step_timeout[16];
	const char *argv[28];
} rank_args_t;

static void s_rank_args(agent_t *a, const char *job, int attempt, int rank, int world, rank_args_t *ra)
{
	snprintf(ra->attempt, sizeof ra->attempt, "%d", attempt);
	snprintf(ra->rank, sizeof ra->rank, "%d", rank);
	snprintf(ra->world, sizeof ra->world, "%d", world);
	int k = 0;
	ra->argv[k++] = "ringworker";
	ra->argv[k++] = "rank";
	ra->argv[k++] = "--coordinator";
	ra->argv[k++] = fabric_endpoint(a->fab);
	ra->argv[k++] = "--job";
	ra->argv[k++] = job;
	ra->argv[k++] = "--attempt";
	ra->argv[k++] = ra->attempt;
	ra->argv[k++] = "--rank";
	ra->argv[k++] = ra->rank;
	ra->argv[k++] = "--world-size";
	ra->argv[k++] = ra->world;
	ra->argv[k++] = "--host";
	ra->argv[k++] = a->advertise;
	if (a->opt->data_root) {
		ra->argv[k++] = "--data-root";
		ra->argv[k++] = a->opt->data_root;
	}
	if (a->opt->checkpoint_root) {
		ra->argv[k++] = "--checkpoint-root";
		ra->argv[k++] = a->opt->checkpoint_root;
	}
	if (a->opt->tensorboard_root) {
		ra->argv[k++] = "--tensorboard-root";
		ra->argv[k++] = a->opt->tensorboard_root;
	}
	if (a->opt->peak_tflops) {
		ra->argv[k++] = "--peak-tflops";
		ra->argv[k++] = a->opt->peak_tflops;
	}
	if (a->opt->comm_timeout_ms > 0) {
		snprintf(ra->timeout, sizeof ra->timeout, "%d", a->opt->comm_timeout_ms);
		ra->argv[k++] = "--comm-timeout-ms";
		ra->argv[k++] = ra->timeout;
	}
	if (a->opt->step_timeout_ms > 0) {
		snprintf(ra->step_timeout, sizeof ra->step_timeout, "%d", a->opt->step_timeout_ms);
		ra->argv[k++] = "--step-timeout-ms";
		ra->argv[k++] = ra->step_timeout;
	}
	ra->argv[k] = NULL;
}

/* Slot `s` now runs `pid`, rank `rank` of `job`'s `attempt`, whose stdout and
 * stderr the agent reads from `out_fd` and `err_fd`. */
static void s_occupy(slot_t *s, pid_t pid, const char *job, int attempt, int rank, int out_fd, int err_fd)
{
	memset(s, 0, sizeof *s);
	s->busy = true;
	s->pid = pid;
	snprintf(s->job, sizeof s->job, "%s", job);
	s->attempt = attempt;
	s->rank = rank;
	s->fds[RANKLOG_STDOUT] = out_fd;
	s->fds[RANKLOG_STDERR] = err_fd;
	ranklog_init(&s->log);
}

/* A SPAWN with a program (program.h) on slot `s`: RANK_STARTED once it runs,
 * RANK_EXITED (failure spawn) when it may not or cannot. */
static void s_spawn_program(agent_t *a, const json_t *p, slot_t *s, const cpu_set_t *cpus, int n_threads,
                            const gpu_info_t *gpu, char *const *base)
{
	const char *job = json_string_value(json_object_get(p, "job"));
	int attempt = (int)json_integer_value(json_object_get(p, "attempt"));
	int rank = (int)json_integer_value(json_object_get(p, "rank"));
	char visible[GPUS_UUID_BYTES], why[768];
	if (gpu && gpu->uuid[0])
		snprintf(visible, sizeof visible, "%s", gpu->uuid);
	else if (gpu)
		snprintf(visible, sizeof visible, "%d", gpu->index);
	program_start_opts_t o = {a->opt->allow_program, a->opt->n_allow_program, a->opt->data_root,
	                          a->opt->checkpoint_root, n_threads, gpu ? visible : NULL, cpus,
	                          &a->old_mask, base};
	program_proc_t pr;
	if (program_start(p, &o, &pr, why, sizeof why) < 0) {
		s_refuse_spawn(a, job, attempt, rank, why);
		return;
	}
	s_occupy(s, pr.pid, job, attempt, rank, pr.out_fd, pr.err_fd);
	s->prog = program_rank_new(pr.metrics_fd); /* NULL (no memory): no metrics, the pipe stays unread */
	s_log(a, "spawned program rank %s/%d/%d, pid %d, %d threads", job, attempt, rank, (int)pr.pid, n_threads);
	s_send(a, WIRE_RANK_STARTED, json_pack("{s:s, s:i, s:i, s:i}", "job", job, "attempt", attempt, "rank",
	                                       rank, "pid", (int)pr.pid));
}

static void s_spawn(agent_t *a, const json_t *p)
{
	const char *job = json_string_value(json_object_get(p, "job"));
	int attempt = (int)json_integer_value(json_object_get(p, "attempt"));
	int rank = (int)json_integer_value(json_object_get(p, "rank"));
	int world = (int)json_integer_value(json_object_get(p, "world_size"));
	char why[512];

	int slot_i = s_spawn_slot(a, p, job, attempt, rank);
	if (slot_i < 0)
		return;
	char dev_name[32];
	s_slot_label(a, slot_i, dev_name, sizeof dev_name);
	slot_t *s = &a->slots[slot_i];

	cpu_set_t cpus;
	/* A GPU rank's CPUs: the node's CPUs split between its GPUs. */
	const gpu_info_t *gpu = slot_i >= a->n_cpu ? &a->gpus[slot_i - a->n_cpu] : NULL;
	int n_threads = gpu ? agent_cpu_share(&a->avail, slot_i - a->n_cpu, a->n_gpus, &cpus)
	                    : agent_cpu_share(&a->avail, slot_i, a->n_cpu, &cpus);
	if (n_threads < 1)
		n_threads = 1;
	/* issue 25: the agent's --env defaults, then the job's env */
	int skipped = 0;
	char **base = rankenv_build(environ, a->opt->env_defaults, json_object_get(p, "env"), &skipped);
	if (skipped)
		s_log(a, "rank %s/%d/%d: %d of the job's env variables skipped (reserved or malformed names)", job,
		      attempt, rank, skipped);
	if (base && json_object_get(p, "program")) {
		s_spawn_program(a, p, s, &cpus, n_threads, gpu, base);
		rankenv_free(base);
		return;
	}
	rank_args_t ra;
	s_rank_args(a, job, attempt, rank, world, &ra);
	const char *const *argv = ra.argv;

	char **env = base ? s_rank_env(base, n_threads, gpu) : NULL;
	rankenv_free(base);
	int pipefd[2] = {-1, -1}, errfd[2] = {-1, -1};
	int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (!env || null_fd < 0 || pipe2(pipefd, O_CLOEXEC) < 0 || pipe2(errfd, O_CLOEXEC) < 0) {
		snprintf(why, sizeof why, "cannot prepare the rank: %s", strerror(errno ? errno : ENOMEM));
		goto fail;
	}
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(why, sizeof why, "fork failed: %s", strerror(errno));
		goto fail;
	}
	if (pid == 0) {
		/* The child: async-signal-safe calls only (the agent has threads). */
		if (dup2(null_fd, 0) < 0 || dup2(pipefd[1], 1) < 0 || dup2(errfd[1], 2) < 0)
			s_child_fail("dup2 failed");
		setpgid(0, 0);
		/* A rank must not outlive its agent, even one killed with -9. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(RM_EXIT_EXEC);
		sched_setaffinity(0, sizeof cpus, &cpus);
		sigprocmask(SIG_SETMASK, &a->old_mask, NULL);
		execve(a->exe, (char *const *)argv, env);
		s_child_fail(a->exe);
	}
	/* Also here, so that a KILL right after the fork finds the group. */
	setpgid(pid, pid);
	close(pipefd[1]);
	close(errfd[1]);
	close(null_fd);
	s_strv_free(env);
	fcntl(pipefd[0], F_SETFL, fcntl(pipefd[0], F_GETFL) | O_NONBLOCK);
	fcntl(errfd[0], F_SETFL, fcntl(errfd[0], F_GETFL) | O_NONBLOCK);

	s_occupy(s, pid, job, attempt, rank, pipefd[0], errfd[0]);
	char list[64] = "";
	size_t off = 0;
	for (int i = 0; i < CPU_SETSIZE && off < sizeof list - 8; i++)
		if (CPU_ISSET(i, &cpus))
			off += (size_t)snprintf(list + off, sizeof list - off, "%s%d", off ? "," : "", i);
	s_log(a, "spawned rank %s/%d/%d of %d on %s%s%s, pid %d, cpus %s, %d threads", job,
	      attempt, rank, world, dev_name, gpu ? " " : "", gpu ? gpu->uuid : "", (int)pid, list, n_threads);
	return;
fail:
	for (int k = 0; k < 2; k++) {
		if (pipefd[k] >= 0)
			close(pipefd[k]);
		if (errfd[k] >= 0)
			close(errfd[k]);
	}
	if (null_fd >= 0)
		close(null_fd);
	s_strv_free(env);
	s_refuse_spawn(a, job, attempt, rank, why);
}

static void s_term(agent_t *a, slot_t *s)
{
	if (s->kill_at_us)
		return;
	/* The rank leads its own process group (setpgid in the child). A
	 * stopped rank (SIGSTOP: a hung one) is continued so that the SIGTERM
	 * ends it now rather than at the SIGKILL deadline. */
	if (kill(-s->pid, SIGTERM) < 0)
		kill(s->pid, SIGTERM);
	if (kill(-s->pid, SIGCONT) < 0)
		kill(s->pid, SIGCONT);
	s->kill_at_us = fabric_now_us() + (int64_t)a->kill_grace_ms * 1000;
}

static void s_kill(agent_t *a, const json_t *p)
{
	const char *job = json_string_value(json_object_get(p, "job"));
	int attempt = (int)json_integer_value(json_object_get(p, "attempt"));
	int rank = (int)json_integer_value(json_object_get(p, "rank"));
	int n = 0;
	for (int i = 0; i < a->n_slots; i++) {
		slot_t *s = &a->slots[i];
		if (!s->busy || strcmp(s->job, job) != 0)
			continue;
		/* rank -1: every rank of the job, whatever its attempt. */
		if (rank >= 0 && (s->rank != rank || s->attempt != attempt))
			continue;
		s_term(a, s);
		n++;
	}
	/* SPAWNs of the job still waiting for a device never start. */
	for (int i = 0; i < a->n_slots; i++) {
		slot_t *s = &a->slots[i];
		if (!s->pending || !s_pending_matches(s->pending, job, rank >= 0 ? attempt : -1, rank))
			continue;
		int p_attempt = (int)json_integer_value(json_object_get(s->pending, "attempt"));
		int p_rank = (int)json_integer_value(json_object_get(s->pending, "rank"));
		s_send(a, WIRE_RANK_EXITED,
		       json_pack("{s:s, s:i, s:i, s:i, s:i, s:s, s:i}", "job", job, "attempt", p_attempt,
		                 "rank", p_rank, "exit_code", -1, "signal", SIGTERM, "error", "", "failure",
		                 (int)RM_FAILURE_SIGNAL));
		json_decref(s->pending);
		s->pending = NULL;
		n++;
	}
	s_log(a, "KILL %s/%d/%d: %d rank(s) signalled", job, attempt, rank, n);
}

static void s_reap(agent_t *a)
{
	for (;;) {
		/* Peek first: a program's group is killed while the unreaped
		 * leader still holds its id (no reuse of the number). */
		siginfo_t si = {0};
		int status;
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid <= 0)
			return;
		pid_t pid = si.si_pid;
		slot_t *s = NULL;
		for (int i = 0; i < a->n_slots; i++)
			if (a->slots[i].busy && a->slots[i].pid == pid)
				s = &a->slots[i];
		if (s && s->prog)
			kill(-pid, SIGKILL); /* nothing of a program's process group outlives it */
		if (waitpid(pid, &status, 0) != pid) /* a zombie: no wait */
			return;
		if (!s)
			continue;
		if (s->prog) {
			for (int round = 0; s->prog->fd >= 0 && round < 64; round++)
				s_drain_metrics(a, s);
			program_rank_free(s->prog);
			s->prog = NULL;
		}
		for (int k = 0; k < 2; k++) {
			/* Until EOF; a pipe something else holds open (a child of the
			 * rank) is closed once what is in it has been read. */
			for (int round = 0; s->fds[k] >= 0 && round < 64; round++)
				s_drain(a, s, (ranklog_stream_t)k);
			if (s->fds[k] >= 0) {
				line_ctx_t c = {a, s};
				ranklog_eof(&s->log, (ranklog_stream_t)k, s_wall_us(), s_rank_line, &c);
				close(s->fds[k]);
				s->fds[k] = -1;
			}
		}
		/* its last lines reach the coordinator before its exit */
		s_flush_log(a, s, true);
		ranklog_clear(&s->log);
		int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
		int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
		if (sig)
			s_log(a, "rank %s/%d/%d (pid %d) killed by signal %d", s->job, s->attempt, s->rank,
			      (int)pid, sig);
		else
			s_log(a, "rank %s/%d/%d (pid %d) exited with status %d", s->job, s->attempt,
			      s->rank, (int)pid, code);
		s_send_exited(a, s, code, sig);
		s->busy = false;
		json_t *next = s->pending;
		s->pending = NULL;
		if (next) {
			s_spawn(a, next);
			json_decref(next);
		}
	}
}

/* ---- coordinator messages ---- */

static void s_on_message(agent_t *a, wire_type_t type, json_t *p)
{
	switch (type) {
	case WIRE_REGISTERED: {
		int hb = (int)json_integer_value(json_object_get(p, "heartbeat_ms"));
		int da = (int)json_integer_value(json_object_get(p, "dead_after"));
		a->heartbeat_ms = hb > 0 ? hb : 1000;
		a->dead_after = da > 0 ? da : 3;
		if (!a->registered)
			s_log(a, "registered with %s (%d cpu slots, %d GPU(s), advertise %s; heartbeat %d ms, dead after %d)",
			      fabric_endpoint(a->fab), a->n_cpu, a->n_gpus, a->advertise, a->heartbeat_ms,
			      a->dead_after);
		a->registered = true;
		fabric_backoff_reset(a->fab);
		break;
	}
	case WIRE_HEARTBEAT:
		break;
	case WIRE_SPAWN:
		s_spawn(a, p);
		break;
	case WIRE_KILL:
		s_kill(a, p);
		break;
	case WIRE_ERROR: {
		json_int_t code = json_integer_value(json_object_get(p, "code"));
		const char *detail = json_string_value(json_object_get(p, "detail"));
		/* To an agent, 404 means the coordinator does not count it as
		 * registered (it declared it dead, or restarted and forgot it):
		 * REGISTER again on the same connection. */
		if (code == 404 && a->registered) {
			s_log(a, "coordinator says ERROR 404: %s; registering again", detail);
			a->registered = false;
			s_send_register(a);
			a->retry_at_us = fabric_now_us() + (int64_t)FABRIC_BACKOFF_MIN_MS * 1000;
		} else if (code != 404) {
			s_log(a, "coordinator says ERROR %lld: %s", (long long)code, detail);
		}
		break;
	}
	default:
		s_log(a, "unexpected %s from the coordinator; ignored", wire_type_name(type));
		fabric_send_error(a->fab, 404, "an agent does not take this message type");
		break;
	}
}

static void s_read_coordinator(agent_t *a)
{
	for (;;) {
		wire_type_t type;
		json_t *p = NULL;
		char err[256];
		int rc = fabric_recv(a->fab, 0, &type, &p, err, sizeof err);
		if (rc == -EAGAIN)
			return;
		if (rc == 0) {
			s_on_message(a, type, p);
			json_decref(p);
		} else if (rc == -EPROTO || rc == -ENOENT || rc == -EMSGSIZE || rc == -EINVAL) {
			s_log(a, "refused a message from the coordinator: %s", err);
			fabric_send_error(a->fab, wire_error_code(rc), err);
		} else {
			s_log(a, "receive failed: %s", strerror(-rc));
			return;
		}
	}
}

/* Heartbeats, liveness, reconnects; SIGKILL deadlines. */
static void s_timers(agent_t *a)
{
	int64_t now = fabric_now_us();
	if (a->registered) {
		if (fabric_peer_dead(a->fab, a->heartbeat_ms, a->dead_after, now)) {
			int backoff;
			s_log(a, "no word from the coordinator for %lld ms; reconnecting",
			      (long long)((now - fabric_heard_us(a->fab)) / 1000));
			a->registered = false;
			fabric_reconnect(a->fab, &backoff);
			s_send_register(a);
			a->retry_at_us = now + (int64_t)backoff * 1000;
		} else if (now - fabric_sent_us(a->fab) >= (int64_t)a->heartbeat_ms * 1000) {
			s_send(a, WIRE_HEARTBEAT, json_pack("{s:s}", "node", a->node));
		}
	} else if (now >= a->retry_at_us) {
		int backoff;
		fabric_reconnect(a->fab, &backoff);
		s_send_register(a);
		a->retry_at_us = now + (int64_t)backoff * 1000;
		s_log(a, "no answer from %s; trying again in %d ms", fabric_endpoint(a->fab), backoff);
	}
	for (int i = 0; i < a->n_slots; i++) {
		slot_t *s = &a->slots[i];
		if (s->busy)
			s_flush_log(a, s, false);
		if (s->busy && s->pending && now >= s->pending_term_at_us && !s->kill_at_us) {
			char dev[32];
			s_slot_label(a, i, dev, sizeof dev);
			s_log(a, "rank %s/%d/%d (pid %d) still holds %s %d ms after its device was given to another rank; SIGTERM",
			      s->job, s->attempt, s->rank, (int)s->pid, dev, PENDING_GRACE_MS);
			s_term(a, s);
		}
		if (s->busy && s->kill_at_us && now >= s->kill_at_us) {
			s_log(a, "rank %s/%d/%d (pid %d) still running %d ms after SIGTERM; SIGKILL",
			      s->job, s->attempt, s->rank, (int)s->pid, a->kill_grace_ms);
			if (kill(-s->pid, SIGKILL) < 0)
				kill(s->pid, SIGKILL);
			s->kill_at_us = INT64_MAX; /* once */
		}
	}
}

static int s_poll_timeout_ms(const agent_t *a)
{
	int64_t now = fabric_now_us(), next = now + 500 * 1000;
	if (a->registered) {
		int64_t hb = fabric_sent_us(a->fab) + (int64_t)a->heartbeat_ms * 1000;
		int64_t dead = fabric_heard_us(a->fab) + (int64_t)a->heartbeat_ms * a->dead_after * 1000;
		next = hb < next ? hb : next;
		next = dead < next ? dead : next;
	} else if (a->retry_at_us < next) {
		next = a->retry_at_us;
	}
	for (int i = 0; i < a->n_slots; i++) {
		const slot_t *s = &a->slots[i];
		if (s->busy && s->kill_at_us && s->kill_at_us < next)
			next = s->kill_at_us;
		if (s->busy && s->pending && !s->kill_at_us && s->pending_term_at_us < next)
			next = s->pending_term_at_us;
		for (int k = 0; k < 2; k++)
			if (s->busy && s->fds[k] >= 0 && s->rest_until_us[k] > now && s->rest_until_us[k] < next)
				next = s->rest_until_us[k];
	}
	int64_t ms = (next - now + 999) / 1000;
	/* the rank log batches wait on the wall clock */
	int64_t wall = s_wall_us();
	for (int i = 0; i < a->n_slots; i++) {
		int64_t due = ranklog_deadline_us(&a->slots[i].log);
		if (a->slots[i].busy && due != INT64_MAX && (due - wall + 999) / 1000 < ms)
			ms = (due - wall + 999) / 1000;
	}
	return ms < 0 ? 0 : (int)ms;
}

static void s_on_signals(agent_t *a)
{
	struct signalfd_siginfo si;
	bool child = false;
	while (read(a->sig_fd, &si, sizeof si) == (ssize_t)sizeof si) {
		if (si.ssi_signo == SIGCHLD) {
			child = true;
		} else if (!a->stopping) {
			s_log(a, "%s: stopping %d rank(s)", strsignal((int)si.ssi_signo), s_n_running(a));
			a->stopping = true;
			for (int i = 0; i < a->n_slots; i++)
				if (a->slots[i].busy)
					s_term(a, &a->slots[i]);
		}
	}
	if (child)
		s_reap(a);
}

static int s_setup(agent_t *a, const agent_options_t *opt)
{
	char err[256];
	a->opt = opt;
	a->log = opt->log ? opt->log : stderr;
	a->sig_fd = -1;
	a->kill_grace_ms = opt->kill_grace_ms > 0 ? opt->kill_grace_ms : AGENT_KILL_GRACE_MS;
	a->heartbeat_ms = 1000;
	a->dead_after = 3;
	if (opt->node) {
		snprintf(a->node, sizeof a->node, "%s", opt->node);
	} else if (gethostname(a->node, sizeof a->node - 1) != 0) {
		snprintf(a->node, sizeof a->node, "localhost");
	}
	if (!a->node[0] || strchr(a->node, '/')) {
		fprintf(a->log, "ringworker agent: error: node name '%s' must be non-empty and without '/' (--node)\n",
		        a->node);
		return -EINVAL;
	}
	if (sched_getaffinity(0, sizeof a->avail, &a->avail) != 0 || CPU_COUNT(&a->avail) == 0) {
		CPU_ZERO(&a->avail);
		CPU_SET(0, &a->avail);
	}
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	a->n_slots = opt->n_devices > 0 ? opt->n_devices : (int)(online > 0 ? online : 1);
	if (a->n_slots > AGENT_MAX_DEVICES) {
		fprintf(a->log, "ringworker agent: error: --devices cpu:%d is more than %d\n", a->n_slots,
		        AGENT_MAX_DEVICES);
		return -EINVAL;
	}
	a->n_cpu = a->n_slots;
	/* measured once, before any rank runs: the memory fit's figure (issue 22) */
	a->memory_bytes = opt->memory_bytes > 0 ? opt->memory_bytes : s_host_memory();
	a->n_gpus = gpus_select(opt->gpus, a->gpus, a->gpu_note, sizeof a->gpu_note, a->log);
	if (a->n_gpus < 0)
		return -ENODEV;
	a->n_slots = a->n_cpu + a->n_gpus;
	if (a->n_slots > AGENT_MAX_DEVICES) {
		fprintf(a->log, "ringworker agent: error: --devices cpu:%d and %d GPU(s) are more than %d devices\n",
		        a->n_cpu, a->n_gpus, AGENT_MAX_DEVICES);
		return -EINVAL;
	}
	a->slots = calloc((size_t)a->n_slots, sizeof *a->slots);
	if (!a->slots)
		return -ENOMEM;
	for (int i = 0; i < a->n_slots; i++)
		a->slots[i].fds[0] = a->slots[i].fds[1] = -1;
	if (opt->rank_exe) {
		snprintf(a->exe, sizeof a->exe, "%s", opt->rank_exe);
	} else {
		ssize_t n = readlink("/proc/self/exe", a->exe, sizeof a->exe - 1);
		if (n <= 0) {
			fprintf(a->log, "ringworker agent: error: cannot read /proc/self/exe: %s\n",
			        strerror(errno));
			return -errno;
		}
		a->exe[n] = '\0';
	}
	if (opt->advertise) {
		snprintf(a->advertise, sizeof a->advertise, "%s", opt->advertise);
	} else if (agent_route_address(opt->coordinator, a->advertise, sizeof a->advertise, err,
	                               sizeof err) < 0) {
		fprintf(a->log, "ringworker agent: error: %s\n", err);
		return -EINVAL;
	}

	/* Block the signals before ZeroMQ starts its threads, so that they are
	 * delivered only through the signalfd. */
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	if (sigprocmask(SIG_BLOCK, &mask, &a->old_mask) != 0)
		return -errno;
	a->sig_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (a->sig_fd < 0) {
		fprintf(a->log, "ringworker agent: error: signalfd: %s\n", strerror(errno));
		return -errno;
	}
	a->zctx = zmq_ctx_new();
	if (!a->zctx)
		return -ENOMEM;
	char identity[300];
	snprintf(identity, sizeof identity, "agent/%s", a->node);
	a->fab = fabric_new(a->zctx, opt->coordinator, identity, err, sizeof err);
	if (!a->fab) {
		fprintf(a->log, "ringworker agent: error: %s\n", err);
		return -EINVAL;
	}
	return 0;
}

static void s_teardown(agent_t *a)
{
	fabric_free(a->fab);
	if (a->zctx)
		zmq_ctx_term(a->zctx);
	if (a->sig_fd >= 0)
		close(a->sig_fd);
	if (a->slots)
		for (int i = 0; i < a->n_slots; i++) {
			for (int k = 0; k < 2; k++)
				if (a->slots[i].fds[k] >= 0)
					close(a->slots[i].fds[k]);
			ranklog_clear(&a->slots[i].log);
			json_decref(a->slots[i].pending);
			program_rank_free(a->slots[i].prog);
		}
	free(a->slots);
}

int agent_run(const agent_options_t *opt)
{
	agent_t a = {0};
	if (s_setup(&a, opt) < 0) {
		s_teardown(&a);
		return 1;
	}
	s_log(&a, "starting: coordinator %s, %d cpu slots over %d cpus, %d GPU(s), advertise %s, ranks run %s",
	      opt->coordinator, a.n_cpu, CPU_COUNT(&a.avail), a.n_gpus, a.advertise, a.exe);
	for (int g = 0; g < a.n_gpus; g++)
		s_log(&a, "GPU cuda:%d: %s, %.1f GiB, %s (NVML index %d)", g, a.gpus[g].name,
		      (double)a.gpus[g].memory_bytes / (1024.0 * 1024.0 * 1024.0), a.gpus[g].uuid,
		      a.gpus[g].index);
	if (a.n_gpus == 0)
		s_log(&a, "no GPU advertised: %s", a.gpu_note[0] ? a.gpu_note : "none found");
	s_send_register(&a);
	a.retry_at_us = fabric_now_us() + (int64_t)FABRIC_BACKOFF_MIN_MS * 1000;

	zmq_pollitem_t *items = calloc((size_t)a.n_slots * 3 + 2, sizeof *items);
	slot_t **item_slot = calloc((size_t)a.n_slots * 3 + 2, sizeof *item_slot);
	int *item_stream = calloc((size_t)a.n_slots * 3 + 2, sizeof *item_stream);
	if (!items || !item_slot || !item_stream) {
		free(items);
		free(item_slot);
		free(item_stream);
		s_teardown(&a);
		return 1;
	}
	for (;;) {
		if (a.stopping && s_n_running(&a) == 0)
			break;
		/* Item 0 is the coordinator's socket; after a failed reconnect
		 * (fabric_socket NULL) it is a placeholder fd -1 that never fires. */
		int n = 0;
		void *sock = fabric_socket(a.fab);
		items[n++] = sock ? (zmq_pollitem_t){.socket = sock, .events = ZMQ_POLLIN}
		                  : (zmq_pollitem_t){.fd = -1, .events = 0};
		items[n++] = (zmq_pollitem_t){.fd = a.sig_fd, .events = ZMQ_POLLIN};
		int64_t now_us = fabric_now_us();
		for (int i = 0; i < a.n_slots; i++) {
			for (int k = 0; k < 2; k++) {
				if (a.slots[i].busy && a.slots[i].fds[k] >= 0 && a.slots[i].rest_until_us[k] <= now_us) {
					item_slot[n] = &a.slots[i];
					item_stream[n] = k;
					items[n++] = (zmq_pollitem_t){.fd = a.slots[i].fds[k], .events = ZMQ_POLLIN};
				}
			}
			if (a.slots[i].busy && a.slots[i].prog && a.slots[i].prog->fd >= 0) {
				item_slot[n] = &a.slots[i];
				item_stream[n] = 2; /* the metrics pipe */
				items[n++] = (zmq_pollitem_t){.fd = a.slots[i].prog->fd, .events = ZMQ_POLLIN};
			}
		}
		int rc = zmq_poll(items, n, s_poll_timeout_ms(&a));
		if (rc < 0 && errno != EINTR) {
			s_log(&a, "poll failed: %s", zmq_strerror(errno));
			break;
		}
		if (rc > 0) {
			for (int i = 2; i < n; i++)
				if (items[i].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) {
					if (item_stream[i] == 2 && item_slot[i]->prog && item_slot[i]->prog->fd >= 0)
						s_drain_metrics(&a, item_slot[i]);
					else if (item_stream[i] < 2 && item_slot[i]->fds[item_stream[i]] >= 0)
						s_drain(&a, item_slot[i], (ranklog_stream_t)item_stream[i]);
				}
			if (items[1].revents & ZMQ_POLLIN)
				s_on_signals(&a);
			if (items[0].revents & ZMQ_POLLIN)
				s_read_coordinator(&a);
		}
		s_timers(&a);
	}
	s_log(&a, "stopped");
	free(items);
	free(item_stream);
	free(item_slot);
	s_teardown(&a);
	return 0;
}
