/*
 * program: a user's program as a rank (see program.h): the allow check,
 * the environment, the metrics pipe's lines, and the fork.
 */
#include "program.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "beneath.h"
#include "exitcode.h"
#include "fsutil.h"

extern char **environ;

#define ARGV_MAX 256

/* Whether the canonical path `real` is an allowed file or lies beneath an
 * allowed folder. */
static bool s_allowed(const char *const *allow, int n_allow, const char *real)
{
	for (int i = 0; i < n_allow; i++) {
		char a[PATH_MAX];
		struct stat st;
		if (!allow[i] || !realpath(allow[i], a) || stat(a, &st) != 0)
			continue;
		size_t n = strlen(a);
		if (S_ISDIR(st.st_mode)) {
			if (strcmp(a, "/") == 0 || (strncmp(real, a, n) == 0 && real[n] == '/'))
				return true;
		} else if (strcmp(real, a) == 0) {
			return true;
		}
	}
	return false;
}

/* The canonical path of an open fd (its /proc/self/fd link). */
static int s_fd_path(int fd, char *buf, size_t len)
{
	char proc[64];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(proc, buf, len - 1);
	if (n <= 0 || (size_t)n >= len - 1)
		return -ENAMETOOLONG;
	buf[n] = '\0';
	return 0;
}

/* argv[0] without '/': the first executable regular file along `path_env`
 * (absolute folders only), canonicalised into `real`. */
static int s_path_lookup(const char *name, const char *path_env, char *real)
{
	const char *p = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
	while (*p) {
		const char *end = strchr(p, ':');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (n > 0 && p[0] == '/') {
			char cand[PATH_MAX];
			struct stat st;
			if (snprintf(cand, sizeof cand, "%.*s/%s", (int)n, p, name) < (int)sizeof cand &&
			    stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0 &&
			    realpath(cand, real))
				return 0;
		}
		p += n;
		if (*p == ':')
			p++;
	}
	return -ENOENT;
}

int program_resolve_argv0(const char *const *allow, int n_allow, const char *data_root,
                          const char *argv0, const char *path_env, char *ret_path, size_t path_len,
                          char *err, size_t errlen)
{
	char real[PATH_MAX];
	if (!argv0 || !argv0[0]) {
		snprintf(err, errlen, "program.argv[0] is empty");
		return -EINVAL;
	}
	if (n_allow <= 0) {
		snprintf(err, errlen, "this agent runs no programs: start it with --allow-program PATH "
		         "(program.argv[0] '%.200s')", argv0);
		return -EPERM;
	}
	if (argv0[0] == '/') {
		if (!realpath(argv0, real)) {
			int e = errno;
			snprintf(err, errlen, "program.argv[0] '%.200s': %s", argv0, strerror(e));
			return -e;
		}
	} else if (strchr(argv0, '/')) {
		int fd;
		int rc = beneath_open(data_root ? data_root : ".", argv0, O_RDONLY, &fd);
		if (rc < 0) {
			snprintf(err, errlen, "program.argv[0] '%.200s' %s the data root%s", argv0,
			         rc == -EXDEV || rc == -ELOOP ? "leads out of" : "is not found beneath",
			         rc == -EXDEV || rc == -ELOOP ? " (no '..', no absolute link)" : "");
			return rc == -ELOOP ? -EXDEV : rc;
		}
		rc = s_fd_path(fd, real, sizeof real);
		close(fd);
		if (rc < 0) {
			snprintf(err, errlen, "program.argv[0] '%.200s': path too long", argv0);
			return rc;
		}
	} else if (s_path_lookup(argv0, path_env, real) < 0) {
		snprintf(err, errlen, "program.argv[0] '%.200s' is not found in the agent's PATH", argv0);
		return -ENOENT;
	}
	if (!s_allowed(allow, n_allow, real)) {
		snprintf(err, errlen, "program.argv[0] '%.200s' (%.200s) is not allowed on this agent "
		         "(ringworker agent --allow-program)", argv0, real);
		return -EPERM;
	}
	struct stat st;
	if (stat(real, &st) != 0 || !S_ISREG(st.st_mode) || access(real, X_OK) != 0) {
		snprintf(err, errlen, "program.argv[0] '%.200s' is not an executable file", argv0);
		return -EACCES;
	}
	if (strlen(real) >= path_len) {
		snprintf(err, errlen, "program.argv[0] '%.200s': path too long", argv0);
		return -ENAMETOOLONG;
	}
	memcpy(ret_path, real, strlen(real) + 1);
	return 0;
}

int program_open_cwd(const char *data_root, const char *cwd, int *ret_fd, char *err, size_t errlen)
{
	const char *root = data_root ? data_root : ".";
	int fd, rc;
	if (!cwd || !cwd[0]) {
		fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		rc = fd < 0 ? -errno : 0;
	} else {
		rc = beneath_open(root, cwd, O_RDONLY | O_DIRECTORY, &fd);
	}
	if (rc < 0) {
		snprintf(err, errlen, "program.cwd '%.200s': %s", cwd ? cwd : "",
		         rc == -EXDEV || rc == -ELOOP ? "leads out of the data root (no '..', no absolute path, no link out)"
		                                      : strerror(-rc));
		return rc == -ELOOP ? -EXDEV : rc;
	}
	*ret_fd = fd;
	return 0;
}

void program_strv_free(char **v)
{
	if (!v)
		return;
	for (char **p = v; *p; p++)
		free(*p);
	free(v);
}

/* The variables the agent sets itself: dropped from the agent's own
 * environment before they are set. */
static const char *const s_own[] = {
	"MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
	"GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "GROUP_WORLD_SIZE",
	"TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
	"TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS", NULL,
};

static bool s_name_is(const char *kv, const char *name)
{
	size_t n = strlen(name);
	return strncmp(kv, name, n) == 0 && kv[n] == '=';
}

/* Whether the agent's variable `kv` stays out of a program's environment. */
static bool s_dropped(const char *kv, bool cuda)
{
	if (strncmp(kv, "RINGWORKER_", 11) == 0 || strncmp(kv, "RINGMASTER_", 11) == 0)
		return true;
	if (cuda && (s_name_is(kv, "CUDA_VISIBLE_DEVICES") || s_name_is(kv, "CUDA_DEVICE_ORDER")))
		return true;
	for (int i = 0; s_own[i]; i++)
		if (s_name_is(kv, s_own[i]))
			return true;
	return false;
}

typedef struct {
	char **v;
	int n, cap;
} strv_t;

/* Set NAME=value, replacing an earlier NAME. */
static int s_put(strv_t *e, const char *name, const char *value)
{
	for (int i = 0; i < e->n; i++)
		if (s_name_is(e->v[i], name)) {
			free(e->v[i]);
			e->v[i] = e->v[--e->n];
			e->v[e->n] = NULL;
			break;
		}
	if (e->n + 1 >= e->cap)
		return -ENOMEM;
	if (asprintf(&e->v[e->n], "%s=%s", name, value) < 0)
		return -ENOMEM;
	e->v[++e->n] = NULL;
	return 0;
}

static int s_put_int(strv_t *e, const char *name, long long value)
{
	char buf[32];
	snprintf(buf, sizeof buf, "%lld", value);
	return s_put(e, name, buf);
}

/* [A-Za-z_][A-Za-z0-9_]*, at most 256 bytes (the coordinator checks the
 * same; checked again so that no "A=B" name slips into the environment). */
static bool s_env_name_ok(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > 256 || (name[0] >= '0' && name[0] <= '9'))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
			return false;
	}
	return true;
}

/* The torch object's integer `name` (>= 0) into *ret; -EINVAL naming it. */
static int s_torch_int(const json_t *torch, const char *name, long long *ret, char *err, size_t errlen)
{
	const json_t *v = json_object_get(torch, name);
	if (!json_is_integer(v) || json_integer_value(v) < 0) {
		snprintf(err, errlen, "SPAWN torch.%s must be an integer >= 0", name);
		return -EINVAL;
	}
	*ret = (long long)json_integer_value(v);
	return 0;
}

char **program_env(char *const *base, const json_t *spawn, const program_env_opts_t *o, char *err,
                   size_t errlen)
{
	const json_t *torch = json_object_get(spawn, "torch");
	const json_t *penv = json_object_get(json_object_get(spawn, "program"), "env");
	const char *job = json_string_value(json_object_get(spawn, "job"));
	const char *addr = json_string_value(json_object_get(torch, "master_addr"));
	const char *run_id = json_string_value(json_object_get(torch, "run_id"));
	long long port, lrank, lws, grank, restarts, max_restarts, gws;
	json_int_t rank = json_integer_value(json_object_get(spawn, "rank"));
	json_int_t world = json_integer_value(json_object_get(spawn, "world_size"));
	if (!json_is_object(torch) || !job || !addr || !run_id) {
		snprintf(err, errlen, "SPAWN needs job and torch{master_addr, run_id, ...} for a program");
		return NULL;
	}
	if (s_torch_int(torch, "master_port", &port, err, errlen) < 0 ||
	    s_torch_int(torch, "local_rank", &lrank, err, errlen) < 0 ||
	    s_torch_int(torch, "local_world_size", &lws, err, errlen) < 0 ||
	    s_torch_int(torch, "group_rank", &grank, err, errlen) < 0 ||
	    s_torch_int(torch, "restart_count", &restarts, err, errlen) < 0 ||
	    s_torch_int(torch, "max_restarts", &max_restarts, err, errlen) < 0)
		return NULL;
	if (lws < 1 || port < 1 || port > 65535) {
		snprintf(err, errlen, "SPAWN torch.%s is out of range", lws < 1 ? "local_world_size" : "master_port");
		return NULL;
	}
	/* torchrun's GROUP_WORLD_SIZE is the node count; the coordinator may
	 * send it, else every node holds local_world_size ranks */
	if (json_object_get(torch, "group_world_size")) {
		if (s_torch_int(torch, "group_world_size", &gws, err, errlen) < 0)
			return NULL;
	} else {
		gws = ((long long)world + lws - 1) / lws;
	}
	if (penv && !json_is_object(penv)) {
		snprintf(err, errlen, "SPAWN program.env must be an object");
		return NULL;
	}
	int n_base = 0;
	while (base && base[n_base])
		n_base++;
	strv_t e = {NULL, 0, n_base + 32 + (int)json_object_size(penv) + 1};
	e.v = calloc((size_t)e.cap, sizeof *e.v);
	if (!e.v)
		goto oom;
	for (int i = 0; i < n_base; i++) {
		if (s_dropped(base[i], o->cuda_visible != NULL))
			continue;
		if (!(e.v[e.n] = strdup(base[i])))
			goto oom;
		e.n++;
	}
	int rc = 0;
	rc |= s_put(&e, "MASTER_ADDR", addr);
	rc |= s_put_int(&e, "MASTER_PORT", port);
	rc |= s_put_int(&e, "RANK", (long long)rank);
	rc |= s_put_int(&e, "LOCAL_RANK", lrank);
	rc |= s_put_int(&e, "WORLD_SIZE", (long long)world);
	rc |= s_put_int(&e, "LOCAL_WORLD_SIZE", lws);
	rc |= s_put_int(&e, "GROUP_RANK", grank);
	rc |= s_put_int(&e, "ROLE_RANK", (long long)rank);
	rc |= s_put_int(&e, "ROLE_WORLD_SIZE", (long long)world);
	rc |= s_put(&e, "ROLE_NAME", "default");
	rc |= s_put_int(&e, "GROUP_WORLD_SIZE", gws);
	rc |= s_put_int(&e, "TORCHELASTIC_RESTART_COUNT", restarts);
	rc |= s_put_int(&e, "TORCHELASTIC_MAX_RESTARTS", max_restarts);
	rc |= s_put(&e, "TORCHELASTIC_RUN_ID", run_id);
	rc |= s_put(&e, "TORCHELASTIC_USE_AGENT_STORE", "False");
	rc |= s_put_int(&e, "OMP_NUM_THREADS", o->n_threads > 0 ? o->n_threads : 1);
	if (o->cuda_visible) {
		rc |= s_put(&e, "CUDA_DEVICE_ORDER", "PCI_BUS_ID");
		rc |= s_put(&e, "CUDA_VISIBLE_DEVICES", o->cuda_visible);
	}
	if (o->checkpoint_dir)
		rc |= s_put(&e, "RINGMASTER_CHECKPOINT_DIR", o->checkpoint_dir);
	rc |= s_put(&e, "RINGMASTER_JOB_ID", job);
	rc |= s_put_int(&e, "RINGMASTER_METRICS_FD", o->metrics_fd);
	if (rc)
		goto oom;
	const char *name;
	const json_t *val;
	json_object_foreach((json_t *)penv, name, val) {
		if (!s_env_name_ok(name)) {
			snprintf(err, errlen, "SPAWN program.env has a bad name (letters, digits and '_', not first a digit)");
			program_strv_free(e.v);
			return NULL;
		}
		if (!json_is_string(val)) {
			snprintf(err, errlen, "SPAWN program.env.%.100s must be a string", name);
			program_strv_free(e.v);
			return NULL;
		}
		if (s_put(&e, name, json_string_value(val)) < 0)
			goto oom;
	}
	return e.v;
oom:
	snprintf(err, errlen, "out of memory building the program's environment");
	program_strv_free(e.v);
	return NULL;
}

/* ---- the metrics fd ---- */

static const char *const s_optional[] = {"val_loss", "lr", "grad_norm", "tokens_per_s", "ms", "mfu", NULL};

int program_metrics_parse(const char *line, size_t len, json_t **ret_row, char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *in = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	json_t *row = NULL;
	if (!in || !json_is_object(in)) {
		snprintf(err, errlen, "not a JSON object");
		goto fail;
	}
	const json_t *step = json_object_get(in, "step");
	const json_t *loss = json_object_get(in, "loss");
	if (!json_is_integer(step) || json_integer_value(step) < 0) {
		snprintf(err, errlen, "\"step\" must be an integer >= 0");
		goto fail;
	}
	if (!json_is_number(loss) || !isfinite(json_number_value(loss))) {
		snprintf(err, errlen, "\"loss\" must be a finite number");
		goto fail;
	}
	row = json_pack("{s:I, s:f}", "step", json_integer_value(step), "loss", json_number_value(loss));
	if (!row) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	for (int i = 0; s_optional[i]; i++) {
		const json_t *v = json_object_get(in, s_optional[i]);
		if (!v)
			continue;
		if (!json_is_number(v) || !isfinite(json_number_value(v))) {
			snprintf(err, errlen, "\"%s\" must be a finite number", s_optional[i]);
			goto fail;
		}
		json_object_set_new(row, s_optional[i], json_real(json_number_value(v)));
	}
	json_decref(in);
	*ret_row = row;
	return 0;
fail:
	json_decref(in);
	json_decref(row);
	return -EINVAL;
}

void program_metrics_init(program_metrics_t *m)
{
	memset(m, 0, sizeof *m);
}

/* One complete line in m->buf. */
static void s_metrics_line(program_metrics_t *m, int64_t now_us, program_row_fn fn, void *cls)
{
	size_t i = 0;
	while (i < m->len && (m->buf[i] == ' ' || m->buf[i] == '\t' || m->buf[i] == '\r'))
		i++;
	if (i == m->len)
		return; /* blank */
	char why[128];
	json_t *row;
	if (program_metrics_parse(m->buf, m->len, &row, why, sizeof why) < 0) {
		m->n_bad++;
		fn(cls, NULL, why);
		return;
	}
	if (now_us - m->window_start_us >= 1000000) {
		m->window_start_us = now_us;
		m->window_rows = 0;
	}
	if (m->window_rows >= PROGRAM_METRICS_RATE_ROWS) {
		m->n_rate_dropped++;
		json_decref(row);
		return;
	}
	m->window_rows++;
	fn(cls, row, NULL);
}

void program_metrics_feed(program_metrics_t *m, const char *buf, size_t n, int64_t now_us,
                          program_row_fn fn, void *cls)
{
	while (n > 0) {
		const char *nl = memchr(buf, '\n', n);
		size_t chunk = nl ? (size_t)(nl - buf) : n;
		if (!m->cut) {
			if (m->len + chunk > PROGRAM_METRICS_LINE_MAX_BYTES) {
				m->cut = true;
				m->len = 0;
			} else {
				memcpy(m->buf + m->len, buf, chunk);
				m->len += chunk;
			}
		}
		if (!nl)
			return;
		if (m->cut) {
			char why[96];
			snprintf(why, sizeof why, "line longer than %d bytes", PROGRAM_METRICS_LINE_MAX_BYTES);
			m->n_bad++;
			fn(cls, NULL, why);
		} else {
			s_metrics_line(m, now_us, fn, cls);
		}
		m->len = 0;
		m->cut = false;
		buf += chunk + 1;
		n -= chunk + 1;
	}
}

int program_metrics_read(program_metrics_t *m, int fd, int64_t now_us, program_row_fn fn, void *cls)
{
	char buf[4096];
	for (int i = 0; i < 16; i++) {
		ssize_t n = read(fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return 0;
		if (n <= 0)
			return 1;
		program_metrics_feed(m, buf, (size_t)n, now_us, fn, cls);
	}
	return 0;
}

program_rank_t *program_rank_new(int fd)
{
	program_rank_t *r = calloc(1, sizeof *r);
	if (r) {
		program_metrics_init(&r->m);
		r->fd = fd;
	}
	return r;
}

void program_rank_free(program_rank_t *r)
{
	if (!r)
		return;
	if (r->fd >= 0)
		close(r->fd);
	free(r);
}

typedef struct {
	program_rank_t *r;
	FILE *log;
	const char *label;
	program_row_fn fn;
	void *cls;
} drain_ctx_t;

static void s_drain_row(void *cls, json_t *row, const char *bad)
{
	drain_ctx_t *c = cls;
	if (row) {
		c->fn(c->cls, row, NULL);
	} else if (!c->r->told_bad) {
		c->r->told_bad = true;
		fprintf(c->log, "%s: metrics line dropped: %s (later bad lines are dropped silently)\n", c->label,
		        bad ? bad : "unreadable");
	}
}

void program_rank_drain(program_rank_t *r, int64_t now_us, FILE *log, const char *label, program_row_fn fn,
                        void *cls)
{
	drain_ctx_t c = {r, log, label, fn, cls};
	if (r->fd >= 0 && program_metrics_read(&r->m, r->fd, now_us, s_drain_row, &c) > 0) {
		close(r->fd);
		r->fd = -1;
	}
	if (r->m.n_rate_dropped > 0 && !r->told_rate) {
		r->told_rate = true;
		fprintf(log, "%s: more than %d metrics lines a second; the rest of each second are dropped\n",
		        label, PROGRAM_METRICS_RATE_ROWS);
	}
}

/* ---- the process ---- */

static void s_child_fail(const char *what)
{
	/* async-signal-safe calls only between fork and exec */
	static const char pre[] = "ringworker agent: error: cannot start the program: ";
	(void)!write(2, pre, sizeof pre - 1);
	(void)!write(2, what, strlen(what));
	(void)!write(2, "\n", 1);
	_exit(RM_EXIT_EXEC);
}

/* The SPAWN's program.argv as a NULL-terminated array of borrowed strings. */
static const char **s_argv(const json_t *argv, char *err, size_t errlen)
{
	size_t n = json_array_size(argv);
	if (!json_is_array(argv) || n < 1 || n > ARGV_MAX) {
		snprintf(err, errlen, "SPAWN program.argv must be an array of 1 to %d strings", ARGV_MAX);
		return NULL;
	}
	const char **v = calloc(n + 1, sizeof *v);
	if (!v) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		v[i] = json_string_value(json_array_get(argv, i));
		if (!v[i]) {
			snprintf(err, errlen, "SPAWN program.argv[%zu] must be a string", i);
			free(v);
			return NULL;
		}
	}
	return v;
}

static void s_close(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

int program_start(const json_t *spawn, const program_start_opts_t *o, program_proc_t *ret, char *err,
                  size_t errlen)
{
	const json_t *prog = json_object_get(spawn, "program");
	const char *job = json_string_value(json_object_get(spawn, "job"));
	const char *cwd = json_string_value(json_object_get(prog, "cwd"));
	char exe[PATH_MAX], ckpt[PATH_MAX];
	int cwd_fd = -1, null_fd = -1, out[2] = {-1, -1}, errp[2] = {-1, -1}, met[2] = {-1, -1};
	char **env = NULL;
	int rc;
	if (!job || !strcmp(job, ".") || !strcmp(job, "..") || strchr(job, '/')) {
		snprintf(err, errlen, "SPAWN job must be a plain name");
		return -EINVAL;
	}
	const char **argv = s_argv(json_object_get(prog, "argv"), err, errlen);
	if (!argv)
		return -EINVAL;
	rc = program_resolve_argv0(o->allow, o->n_allow, o->data_root, argv[0], getenv("PATH"), exe,
	                           sizeof exe, err, errlen);
	if (rc < 0)
		goto fail;
	rc = program_open_cwd(o->data_root, cwd, &cwd_fd, err, errlen);
	if (rc < 0)
		goto fail;
	if (o->checkpoint_root) {
		snprintf(ckpt, sizeof ckpt, "%s/%s/program", o->checkpoint_root, job);
		rc = fs_mkdir_p(ckpt, 0700);
		if (rc < 0) {
			snprintf(err, errlen, "cannot create the checkpoint folder %.200s: %s", ckpt, strerror(-rc));
			goto fail;
		}
	}
	program_env_opts_t eo = {o->n_threads, o->cuda_visible, o->checkpoint_root ? ckpt : NULL,
	                         PROGRAM_METRICS_FD};
	env = program_env(o->base_env ? o->base_env : environ, spawn, &eo, err, errlen);
	if (!env) {
		rc = -EINVAL;
		goto fail;
	}
	null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null_fd < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0 ||
	    pipe2(met, O_CLOEXEC) < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot prepare the program: %s", strerror(errno));
		goto fail;
	}
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		rc = -errno;
		snprintf(err, errlen, "fork failed: %s", strerror(errno));
		goto fail;
	}
	if (pid == 0) {
		if (fchdir(cwd_fd) < 0)
			s_child_fail("cannot enter program.cwd");
		if (dup2(null_fd, 0) < 0 || dup2(out[1], 1) < 0 || dup2(errp[1], 2) < 0)
			s_child_fail("dup2 failed");
		/* the metrics pipe on PROGRAM_METRICS_FD, without close-on-exec */
		if (met[1] == PROGRAM_METRICS_FD ? fcntl(met[1], F_SETFD, 0) < 0
		                                 : dup2(met[1], PROGRAM_METRICS_FD) < 0)
			s_child_fail("dup2 failed");
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(RM_EXIT_EXEC);
		if (o->cpus)
			sched_setaffinity(0, sizeof *o->cpus, o->cpus);
		if (o->sigmask)
			sigprocmask(SIG_SETMASK, o->sigmask, NULL);
		execve(exe, (char *const *)argv, env);
		s_child_fail(exe);
	}
	/* also here, so that a KILL right after the fork finds the group */
	setpgid(pid, pid);
	s_close(&out[1]);
	s_close(&errp[1]);
	s_close(&met[1]);
	s_close(&null_fd);
	s_close(&cwd_fd);
	program_strv_free(env);
	free(argv);
	for (int i = 0; i < 3; i++) {
		int fd = i == 0 ? out[0] : i == 1 ? errp[0] : met[0];
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	}
	*ret = (program_proc_t){pid, out[0], errp[0], met[0]};
	return 0;
fail:
	for (int k = 0; k < 2; k++) {
		s_close(&out[k]);
		s_close(&errp[k]);
		s_close(&met[k]);
	}
	s_close(&null_fd);
	s_close(&cwd_fd);
	program_strv_free(env);
	free(argv);
	return rc < 0 ? rc : -EINVAL;
}
