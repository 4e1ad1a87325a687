/*
 * test_program: the pure parts of a program rank (worker/program.c, issue
 * 26), on real files in a temporary folder.
 *
 *   env      program_env for a SPAWN: every torchrun variable with its
 *            value, RINGMASTER_* set, program.env on top, the agent's
 *            RINGWORKER_* / RINGMASTER_TOKEN not passed, no name twice, a
 *            bad torch field named
 *   argv0    program_resolve_argv0: an allowed absolute file, a file beneath
 *            an allowed folder, a symlink out of it refused, a sibling
 *            folder sharing the prefix refused, relative beneath the data
 *            root, '..' and a link out refused, PATH lookup, nothing
 *            allowed, not executable
 *   cwd      program_open_cwd: beneath the data root, default, '..', an
 *            absolute path and a link out refused
 *   metrics  program_metrics_parse and program_metrics_feed: valid rows,
 *            invalid JSON, missing step, non-finite loss, a line over the
 *            cap, lines split across reads, the 100 rows/s cap
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "check.h"
#include "program.h"

static char root[1024]; /* the temporary folder, canonical */

static void s_path(char *buf, const char *rel)
{
	snprintf(buf, PATH_MAX, "%s/%s", root, rel);
}

static void s_file(const char *rel, mode_t mode)
{
	char p[PATH_MAX];
	s_path(p, rel);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, mode);
	CHECK(fd >= 0, "create %s", p);
	(void)!write(fd, "#!/bin/sh\nexit 0\n", 17);
	close(fd);
	chmod(p, mode);
}

static void s_dir(const char *rel)
{
	char p[PATH_MAX];
	s_path(p, rel);
	CHECK(mkdir(p, 0755) == 0, "mkdir %s", p);
}

static void s_link(const char *target, const char *rel)
{
	char p[PATH_MAX];
	s_path(p, rel);
	CHECK(symlink(target, p) == 0, "symlink %s", p);
}

/* The value of NAME in env, NULL when absent; counts its occurrences. */
static const char *s_get(char **env, const char *name, int *ret_count)
{
	const char *v = NULL;
	size_t n = strlen(name);
	*ret_count = 0;
	for (char **e = env; *e; e++)
		if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') {
			v = *e + n + 1;
			(*ret_count)++;
		}
	return v;
}

static void s_expect(char **env, const char *name, const char *want)
{
	int count;
	const char *got = s_get(env, name, &count);
	if (!want) {
		CHECK(!got, "%s is passed (%s) but must not be", name, got);
		return;
	}
	CHECK(got && strcmp(got, want) == 0, "%s = '%s', want '%s'", name, got ? got : "(unset)", want);
	CHECK(count == 1, "%s appears %d times", name, count);
}

static void test_env(void)
{
	json_t *spawn = json_loads(
		"{\"job\": \"j-42\", \"attempt\": 3, \"rank\": 3, \"world_size\": 4,"
		" \"device\": {\"kind\": \"cpu\", \"index\": 1},"
		" \"program\": {\"argv\": [\"/usr/bin/python3\", \"ddp.py\"], \"cwd\": null,"
		"              \"env\": {\"NCCL_DEBUG\": \"INFO\", \"RINGMASTER_USER_X\": \"y\"}},"
		" \"torch\": {\"master_addr\": \"10.0.0.7\", \"master_port\": 29511, \"local_rank\": 1,"
		"            \"local_world_size\": 2, \"group_rank\": 1, \"restart_count\": 2,"
		"            \"max_restarts\": 3, \"run_id\": \"j-42\"}}",
		0, NULL);
	CHECK(spawn, "spawn JSON");
	char *base[] = {"PATH=/usr/bin:/bin", "HOME=/home/u", "RINGWORKER_KEYS_DIR=/var/lib/keys",
	                "RINGMASTER_TOKEN=rmt_secret", "RINGMASTER_JOB_ID=stale", "RANK=99",
	                "MASTER_PORT=1", "OMP_NUM_THREADS=64", "CUDA_VISIBLE_DEVICES=0,1", NULL};
	program_env_opts_t o = {.n_threads = 4, .cuda_visible = NULL, .checkpoint_dir = "/ck/j-42/program",
	                        .metrics_fd = 3};
	char err[256] = "";
	char **env = program_env(base, spawn, &o, err, sizeof err);
	CHECK(env, "program_env: %s", err);
	if (env) {
		s_expect(env, "MASTER_ADDR", "10.0.0.7");
		s_expect(env, "MASTER_PORT", "29511");
		s_expect(env, "RANK", "3");
		s_expect(env, "LOCAL_RANK", "1");
		s_expect(env, "WORLD_SIZE", "4");
		s_expect(env, "LOCAL_WORLD_SIZE", "2");
		s_expect(env, "GROUP_RANK", "1");
		s_expect(env, "ROLE_RANK", "3");
		s_expect(env, "ROLE_WORLD_SIZE", "4");
		s_expect(env, "ROLE_NAME", "default");
		s_expect(env, "GROUP_WORLD_SIZE", "2");
		s_expect(env, "TORCHELASTIC_RESTART_COUNT", "2");
		s_expect(env, "TORCHELASTIC_MAX_RESTARTS", "3");
		s_expect(env, "TORCHELASTIC_RUN_ID", "j-42");
		s_expect(env, "TORCHELASTIC_USE_AGENT_STORE", "False");
		s_expect(env, "OMP_NUM_THREADS", "4");
		s_expect(env, "RINGMASTER_CHECKPOINT_DIR", "/ck/j-42/program");
		s_expect(env, "RINGMASTER_JOB_ID", "j-42");
		s_expect(env, "RINGMASTER_METRICS_FD", "3");
		s_expect(env, "NCCL_DEBUG", "INFO");
		s_expect(env, "RINGMASTER_USER_X", "y");
		s_expect(env, "PATH", "/usr/bin:/bin");
		s_expect(env, "HOME", "/home/u");
		/* a cpu slot leaves the agent's CUDA_VISIBLE_DEVICES alone */
		s_expect(env, "CUDA_VISIBLE_DEVICES", "0,1");
		s_expect(env, "RINGWORKER_KEYS_DIR", NULL);
		s_expect(env, "RINGMASTER_TOKEN", NULL);
		program_strv_free(env);
	}

	/* a GPU slot: its GPU only; no checkpoint root: no RINGMASTER_CHECKPOINT_DIR */
	o.cuda_visible = "GPU-1234";
	o.checkpoint_dir = NULL;
	env = program_env(base, spawn, &o, err, sizeof err);
	CHECK(env, "program_env (gpu): %s", err);
	if (env) {
		s_expect(env, "CUDA_VISIBLE_DEVICES", "GPU-1234");
		s_expect(env, "CUDA_DEVICE_ORDER", "PCI_BUS_ID");
		s_expect(env, "RINGMASTER_CHECKPOINT_DIR", NULL);
		program_strv_free(env);
	}

	/* the coordinator's group_world_size wins over the estimate */
	json_object_set_new(json_object_get(spawn, "torch"), "group_world_size", json_integer(3));
	env = program_env(base, spawn, &o, err, sizeof err);
	if (env) {
		s_expect(env, "GROUP_WORLD_SIZE", "3");
		program_strv_free(env);
	}

	/* a program.env name that would smuggle another variable in */
	static const char *const bad_names[] = {"A=B", "", "1X", "X Y", NULL};
	for (int i = 0; bad_names[i]; i++) {
		json_t *pe = json_object_get(json_object_get(spawn, "program"), "env");
		json_object_set_new(pe, bad_names[i], json_string("v"));
		env = program_env(base, spawn, &o, err, sizeof err);
		CHECK(!env && strstr(err, "program.env"), "env name '%s': %s", bad_names[i], err);
		program_strv_free(env);
		json_object_del(pe, bad_names[i]);
	}

	/* a missing or mistyped torch field is named */
	json_object_set_new(json_object_get(spawn, "torch"), "master_port", json_string("29500"));
	env = program_env(base, spawn, &o, err, sizeof err);
	CHECK(!env && strstr(err, "torch.master_port"), "a string master_port: '%s'", err);
	program_strv_free(env);
	json_object_del(spawn, "torch");
	env = program_env(base, spawn, &o, err, sizeof err);
	CHECK(!env && strstr(err, "torch"), "no torch object: '%s'", err);
	program_strv_free(env);
	json_decref(spawn);
}

/* resolve argv0 with allow list {a0, a1} (NULLs skipped); the errno. */
static int s_resolve(const char *a0, const char *a1, const char *data_root, const char *argv0,
                     const char *path_env, char *ret, char *err)
{
	const char *allow[2];
	int n = 0;
	if (a0)
		allow[n++] = a0;
	if (a1)
		allow[n++] = a1;
	return program_resolve_argv0(allow, n, data_root, argv0, path_env, ret, PATH_MAX, err, 256);
}

static void test_argv0(void)
{
	char allowed[PATH_MAX], one[PATH_MAX], data[PATH_MAX], want[PATH_MAX], got[PATH_MAX], err[256],
		arg[PATH_MAX], path_env[2 * PATH_MAX + 2];
	s_dir("allowed");
	s_dir("allowed2");
	s_dir("outside");
	s_dir("data");
	s_dir("data/bin");
	s_file("allowed/prog", 0755);
	s_file("allowed/notes.txt", 0644);
	s_file("allowed2/prog", 0755);
	s_file("outside/prog", 0755);
	s_file("one", 0755);
	s_file("data/bin/run", 0755);
	s_link("../outside/prog", "allowed/link");
	s_link("prog", "allowed/inner");
	s_link("../outside", "data/esc");
	s_path(allowed, "allowed");
	s_path(one, "one");
	s_path(data, "data");

	/* an allowed file, as is */
	int rc = s_resolve(one, NULL, data, one, NULL, got, err);
	CHECK(rc == 0 && strcmp(got, one) == 0, "allowed file: %d %s", rc, err);
	/* beneath an allowed folder; a link that stays inside it */
	s_path(arg, "allowed/prog");
	rc = s_resolve(allowed, NULL, data, arg, NULL, got, err);
	CHECK(rc == 0 && strcmp(got, arg) == 0, "beneath allowed folder: %d %s", rc, err);
	s_path(arg, "allowed/inner");
	s_path(want, "allowed/prog");
	rc = s_resolve(allowed, NULL, data, arg, NULL, got, err);
	CHECK(rc == 0 && strcmp(got, want) == 0, "link inside the folder: %d %s", rc, err);
	/* a symlink out of the allowed folder */
	s_path(arg, "allowed/link");
	rc = s_resolve(allowed, NULL, data, arg, NULL, got, err);
	CHECK(rc == -EPERM && strstr(err, "not allowed") && strstr(err, "argv[0]"), "link out: %d %s", rc, err);
	/* a sibling folder whose name starts like the allowed one */
	s_path(arg, "allowed2/prog");
	rc = s_resolve(allowed, NULL, data, arg, NULL, got, err);
	CHECK(rc == -EPERM, "allowed2 is not beneath allowed: %d %s", rc, err);
	/* an allowed file does not allow its neighbours */
	s_path(arg, "outside/prog");
	rc = s_resolve(one, NULL, data, arg, NULL, got, err);
	CHECK(rc == -EPERM, "a file elsewhere: %d %s", rc, err);
	/* nothing allowed at all */
	rc = s_resolve(NULL, NULL, data, one, NULL, got, err);
	CHECK(rc == -EPERM && strstr(err, "--allow-program"), "no --allow-program: %d %s", rc, err);
	/* allowed, but not executable */
	s_path(arg, "allowed/notes.txt");
	rc = s_resolve(allowed, NULL, data, arg, NULL, got, err);
	CHECK(rc == -EACCES, "not executable: %d %s", rc, err);

	/* relative with a '/': beneath the data root */
	s_path(want, "data/bin/run");
	rc = s_resolve(data, NULL, data, "bin/run", NULL, got, err);
	CHECK(rc == 0 && strcmp(got, want) == 0, "relative beneath data root: %d %s (%s)", rc, err, got);
	rc = s_resolve(allowed, NULL, data, "bin/run", NULL, got, err);
	CHECK(rc == -EPERM, "relative, found but not allowed: %d %s", rc, err);
	rc = s_resolve(root, NULL, data, "../outside/prog", NULL, got, err);
	CHECK(rc == -EXDEV && strstr(err, "out of the data root"), "'..': %d %s", rc, err);
	rc = s_resolve(root, NULL, data, "esc/prog", NULL, got, err);
	CHECK(rc == -EXDEV, "a link out of the data root: %d %s", rc, err);
	rc = s_resolve(root, NULL, data, "bin/none", NULL, got, err);
	CHECK(rc == -ENOENT, "missing: %d %s", rc, err);

	/* without '/': PATH (absolute folders only, first match) */
	snprintf(path_env, sizeof path_env, "relative/dir:%s/outside:%s", root, allowed);
	rc = s_resolve(allowed, NULL, data, "prog", path_env, got, err);
	CHECK(rc == -EPERM, "PATH: the first match (outside/prog) is not allowed: %d %s", rc, err);
	snprintf(path_env, sizeof path_env, "%s/data:%s", root, allowed);
	s_path(want, "allowed/prog");
	rc = s_resolve(allowed, NULL, data, "prog", path_env, got, err);
	CHECK(rc == 0 && strcmp(got, want) == 0, "PATH lookup: %d %s", rc, err);
	rc = s_resolve(allowed, NULL, data, "no-such-program", path_env, got, err);
	CHECK(rc == -ENOENT && strstr(err, "PATH"), "not in PATH: %d %s", rc, err);
	rc = s_resolve(allowed, one, data, "sh", "/bin:/usr/bin", got, err);
	CHECK(rc == -EPERM, "sh is not allowed: %d %s", rc, err);
}

static void test_cwd(void)
{
	char data[PATH_MAX], err[256];
	int fd = -1;
	s_dir("data/proj");
	s_path(data, "data");
	int rc = program_open_cwd(data, "proj", &fd, err, sizeof err);
	CHECK(rc == 0 && fd >= 0, "cwd proj: %d %s", rc, err);
	if (fd >= 0)
		close(fd);
	rc = program_open_cwd(data, NULL, &fd, err, sizeof err);
	CHECK(rc == 0, "default cwd: %d %s", rc, err);
	if (rc == 0)
		close(fd);
	const char *bad[] = {"../outside", "esc", "proj/../../outside", "/tmp", NULL};
	for (int i = 0; bad[i]; i++) {
		rc = program_open_cwd(data, bad[i], &fd, err, sizeof err);
		CHECK(rc == -EXDEV && strstr(err, "program.cwd"), "cwd '%s': %d %s", bad[i], rc, err);
	}
	rc = program_open_cwd(data, "nowhere", &fd, err, sizeof err);
	CHECK(rc == -ENOENT && strstr(err, "program.cwd"), "cwd nowhere: %d %s", rc, err);
}

typedef struct {
	int rows, bad;
	json_t *last;
	char why[128];
} sink_t;

static void s_sink(void *cls, json_t *row, const char *bad)
{
	sink_t *k = cls;
	if (row) {
		k->rows++;
		json_decref(k->last);
		k->last = row;
	} else {
		k->bad++;
		snprintf(k->why, sizeof k->why, "%s", bad);
	}
}

static void test_metrics(void)
{
	char err[128];
	json_t *row = NULL;
	const char *ok = "{\"step\": 10, \"loss\": 2.5, \"lr\": 0.001, \"mfu\": 0.3, \"extra\": \"x\"}";
	int rc = program_metrics_parse(ok, strlen(ok), &row, err, sizeof err);
	CHECK(rc == 0, "valid line: %s", err);
	if (rc == 0) {
		CHECK(json_integer_value(json_object_get(row, "step")) == 10, "step");
		CHECK(json_real_value(json_object_get(row, "loss")) == 2.5, "loss");
		CHECK(json_real_value(json_object_get(row, "mfu")) == 0.3, "mfu");
		CHECK(!json_object_get(row, "extra"), "unknown keys are not forwarded");
		json_decref(row);
	}
	const char *integer_loss = "{\"step\": 0, \"loss\": 3}";
	rc = program_metrics_parse(integer_loss, strlen(integer_loss), &row, err, sizeof err);
	CHECK(rc == 0, "an integer loss is a number: %s", err);
	if (rc == 0)
		json_decref(row);
	static const struct {
		const char *line, *why;
	} bad[] = {
		{"{\"step\": 1, \"loss\": 2.5", "JSON"},
		{"not json at all", "JSON"},
		{"[1, 2]", "JSON object"},
		{"{\"loss\": 2.5}", "step"},
		{"{\"step\": -1, \"loss\": 2.5}", "step"},
		{"{\"step\": 1.5, \"loss\": 2.5}", "step"},
		{"{\"step\": 1}", "loss"},
		{"{\"step\": 1, \"loss\": \"nan\"}", "loss"},
		{"{\"step\": 1, \"loss\": NaN}", "JSON"},
		{"{\"step\": 1, \"loss\": 1e999}", "JSON"},
		{"{\"step\": 1, \"loss\": 2.0, \"lr\": \"fast\"}", "lr"},
		{"{\"step\": 1, \"step\": 2, \"loss\": 2.0}", "JSON"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		row = NULL;
		rc = program_metrics_parse(bad[i].line, strlen(bad[i].line), &row, err, sizeof err);
		CHECK(rc == -EINVAL && !row && strstr(err, bad[i].why), "'%s': %d '%s'", bad[i].line, rc, err);
		CHECK(!strstr(err, "fast") && !strstr(err, "nan"), "the reason echoes the line: '%s'", err);
	}

	/* the stream: split reads, a blank line, an over-long line, a bad one */
	program_metrics_t m;
	sink_t k = {0};
	program_metrics_init(&m);
	const char *a = "{\"step\": 1, \"lo", *b = "ss\": 2.0}\n\n  \n{\"step\": 2, \"loss\": 1.5}\nnope\n";
	program_metrics_feed(&m, a, strlen(a), 1000, s_sink, &k);
	CHECK(k.rows == 0, "no row before the newline");
	program_metrics_feed(&m, b, strlen(b), 1000, s_sink, &k);
	CHECK(k.rows == 2 && k.bad == 1, "split lines: %d rows, %d bad", k.rows, k.bad);
	CHECK(json_integer_value(json_object_get(k.last, "step")) == 2, "the last row is step 2");
	size_t big_n = PROGRAM_METRICS_LINE_MAX_BYTES + 100;
	char *big = malloc(big_n + 1);
	memset(big, ' ', big_n);
	memcpy(big, "{\"step\": 3, \"loss\": 1.0}", 24); /* valid JSON, padded past the cap */
	big[big_n] = '\n';
	program_metrics_feed(&m, big, 1000, 1000, s_sink, &k);
	program_metrics_feed(&m, big + 1000, big_n + 1 - 1000, 1000, s_sink, &k);
	CHECK(k.rows == 2 && k.bad == 2 && strstr(k.why, "longer"), "over-long line: %d rows, %d bad (%s)",
	      k.rows, k.bad, k.why);
	free(big);
	const char *after = "{\"step\": 4, \"loss\": 1.0}\n";
	program_metrics_feed(&m, after, strlen(after), 1000, s_sink, &k);
	CHECK(k.rows == 3, "a line after the over-long one counts");
	CHECK(m.n_bad == 2, "n_bad %lld", (long long)m.n_bad);

	/* at most PROGRAM_METRICS_RATE_ROWS rows a second */
	program_metrics_init(&m);
	sink_t r = {0};
	for (int i = 0; i < PROGRAM_METRICS_RATE_ROWS + 50; i++) {
		char line[64];
		int n = snprintf(line, sizeof line, "{\"step\": %d, \"loss\": 1.0}\n", i);
		program_metrics_feed(&m, line, (size_t)n, 5000000, s_sink, &r);
	}
	CHECK(r.rows == PROGRAM_METRICS_RATE_ROWS && m.n_rate_dropped == 50, "rate: %d rows, %lld dropped",
	      r.rows, (long long)m.n_rate_dropped);
	program_metrics_feed(&m, after, strlen(after), 6000001, s_sink, &r);
	CHECK(r.rows == PROGRAM_METRICS_RATE_ROWS + 1, "the next second passes again");
	json_decref(k.last);
	json_decref(r.last);
}

int main(int argc, char **argv)
{
	char tmpl[] = "/tmp/test_program.XXXXXX", real[PATH_MAX];
	if (!mkdtemp(tmpl) || !realpath(tmpl, real) || strlen(real) >= sizeof root) {
		perror("mkdtemp");
		return 1;
	}
	memcpy(root, real, strlen(real) + 1);
	const char *only = argc > 1 ? argv[1] : "all";
	if (!strcmp(only, "all") || !strcmp(only, "env"))
		test_env();
	if (!strcmp(only, "all") || !strcmp(only, "argv0") || !strcmp(only, "cwd"))
		test_argv0();
	if (!strcmp(only, "all") || !strcmp(only, "cwd"))
		test_cwd();
	if (!strcmp(only, "all") || !strcmp(only, "metrics"))
		test_metrics();
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
	(void)!system(cmd);
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	return failures != 0;
}
