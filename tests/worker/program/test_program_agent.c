/*
 * test_program_agent: a real `ringworker agent` runs program ranks (issue
 * 26) for a fake coordinator: this test binds the ROUTER the agent
 * connects to (no CURVE: the agent has no broker key), answers REGISTER,
 * and sends SPAWNs with a `program` object of tiny /bin/sh scripts beneath
 * the agent's --data-root.
 *
 *   test_program_agent RINGWORKER run
 *       REGISTER says programs and program_ports; a program SPAWN gets
 *       RANK_STARTED with the pid, two PROGRAM_METRICS rows (a bad line
 *       between them dropped), LOGS with its stdout and stderr, RANK_EXITED
 *       exit 0, in that order; the script's environment has torchrun's
 *       variables and RINGMASTER_*, not the agent's RINGWORKER_* or
 *       RINGMASTER_TOKEN; it ran in program.cwd; the checkpoint folder is
 *       0700; the child it left running is gone. A SPAWN of a program
 *       that is not allowed gets RANK_EXITED with failure "spawn".
 *   test_program_agent RINGWORKER kill
 *       a running program's metrics row arrives while it runs; KILL of a
 *       program that forked a sleep: RANK_EXITED by SIGTERM and
 *       no process of its group left; then SIGTERM to the agent while
 *       another such program runs: the agent exits and nothing is left.
 *   test_program_agent RINGWORKER gpu
 *       with fake NVML (tests/worker/gpus/fake_nvml.c) offering two GPUs, a
 *       program on cuda:1 has CUDA_VISIBLE_DEVICES of that GPU only.
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <zmq.h>

#include "check.h"
#include "exitcode.h"
#include "wire.h"

static char dir[1024];
static void *zctx, *router;
static unsigned char agent_id[WIRE_MAX_IDENTITY_BYTES];
static size_t agent_id_len;
static pid_t agent_pid = -1;

static int64_t s_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void s_write(const char *rel, const char *text, mode_t mode)
{
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/%s", dir, rel);
	FILE *f = fopen(p, "w");
	CHECK(f, "create %s", p);
	if (!f)
		exit(1);
	fputs(text, f);
	fclose(f);
	chmod(p, mode);
}

/* The first line of file `rel` (beneath dir) into buf; false when absent. */
static bool s_read(const char *rel, char *buf, size_t n)
{
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/%s", dir, rel);
	FILE *f = fopen(p, "r");
	if (!f)
		return false;
	bool ok = fgets(buf, (int)n, f) != NULL;
	fclose(f);
	if (ok)
		buf[strcspn(buf, "\n")] = '\0';
	return ok;
}

/* The next message from the agent (HEARTBEATs skipped) within timeout_ms:
 * its type, or 0 on timeout. */
static wire_type_t s_recv(json_t **ret, int timeout_ms)
{
	int64_t end = s_now_ms() + timeout_ms;
	for (;;) {
		int left = (int)(end - s_now_ms());
		if (left <= 0)
			return 0;
		zmq_setsockopt(router, ZMQ_RCVTIMEO, &left, sizeof left);
		wire_type_t type;
		json_t *p = NULL;
		char err[256];
		int rc = wire_recv(router, 0, agent_id, &agent_id_len, &type, &p, err, sizeof err);
		if (rc == -EAGAIN)
			continue;
		CHECK(rc == 0, "wire_recv: %d %s", rc, err);
		if (rc != 0)
			return 0;
		if (type == WIRE_HEARTBEAT) {
			json_decref(p);
			continue;
		}
		*ret = p;
		return type;
	}
}

static void s_send(wire_type_t type, json_t *p)
{
	CHECK(wire_send(router, agent_id, agent_id_len, type, p) == 0, "wire_send %s", wire_type_name(type));
	json_decref(p);
}

/* Start the agent with our ROUTER as its coordinator; answer its REGISTER. */
static void s_start_agent(const char *ringworker, const char *gpus)
{
	char endpoint[256], data[PATH_MAX], bin[PATH_MAX], ck[PATH_MAX], state[PATH_MAX], log[PATH_MAX];
	size_t n = sizeof endpoint;
	zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, endpoint, &n);
	snprintf(data, sizeof data, "%s/data", dir);
	snprintf(bin, sizeof bin, "%s/data/bin", dir);
	snprintf(ck, sizeof ck, "%s/ck", dir);
	snprintf(state, sizeof state, "%s/state", dir);
	snprintf(log, sizeof log, "%s/agent.log", dir);
	agent_pid = fork();
	if (agent_pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		dup2(fd, 2);
		setenv("RINGMASTER_TOKEN", "rmt_not_for_programs", 1);
		setenv("RINGWORKER_SECRET_TEST", "agent-only", 1);
		execl(ringworker, "ringworker", "agent", "--coordinator", endpoint, "--node", "n1", "--devices",
		      "cpu:2", "--gpus", gpus, "--advertise", "127.0.0.1", "--data-root", data,
		      "--checkpoint-root", ck, "--state-dir", state, "--allow-program", bin,
		      "--program-ports", "30100-30199", "--kill-grace-ms", "3000", (char *)NULL);
		_exit(127);
	}
	json_t *p = NULL;
	wire_type_t t = s_recv(&p, 15000);
	CHECK(t == WIRE_REGISTER, "REGISTER, got %d", (int)t);
	CHECK(json_is_true(json_object_get(p, "programs")), "REGISTER programs:true");
	json_t *ports = json_object_get(p, "program_ports");
	CHECK(json_integer_value(json_array_get(ports, 0)) == 30100 &&
	      json_integer_value(json_array_get(ports, 1)) == 30199, "REGISTER program_ports");
	json_decref(p);
	s_send(WIRE_REGISTERED, json_pack("{s:i, s:i}", "heartbeat_ms", 1000, "dead_after", 60));
}

static json_t *s_spawn_msg(const char *job, int rank, int device, const char *argv0, const char *script,
                           const char *cwd)
{
	return json_pack("{s:s, s:i, s:i, s:i, s:{s:s, s:i}, s:{s:[s, s], s:s?, s:{s:s}},"
	                 " s:{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:s}}",
	                 "job", job, "attempt", 1, "rank", rank, "world_size", 2, "device", "kind", "cpu",
	                 "index", device, "program", "argv", argv0, script, "cwd", cwd, "env",
	                 "RINGMASTER_USER_GREETING", "hi", "torch", "master_addr", "127.0.0.1", "master_port",
	                 30123, "local_rank", rank, "local_world_size", 2, "group_rank", 0,
	                 "restart_count", 0, "max_restarts", 3, "run_id", job);
}

/* Whether process `pid` is gone (or a zombie nobody reaped yet). */
static bool s_gone(pid_t pid)
{
	char p[64], stat[256];
	snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(p, "r");
	if (!f)
		return true;
	bool zombie = fgets(stat, sizeof stat, f) && strstr(stat, ") Z");
	fclose(f);
	return zombie;
}

/* Whether no live process (zombies aside: the container's init may reap
 * late) is in process group `pgid`. */
static bool s_group_gone(pid_t pgid)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	bool gone = true;
	while (d && gone && (e = readdir(d))) {
		char p[300], stat[512];
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(p, sizeof p, "/proc/%s/stat", e->d_name);
		FILE *f = fopen(p, "r");
		if (!f)
			continue;
		char *close_paren = fgets(stat, sizeof stat, f) ? strrchr(stat, ')') : NULL;
		char state;
		int ppid, pgrp;
		if (close_paren && sscanf(close_paren + 1, " %c %d %d", &state, &ppid, &pgrp) == 3)
			gone = !(pgrp == (int)pgid && state != 'Z');
		fclose(f);
	}
	if (d)
		closedir(d);
	return gone;
}

/* Wait up to 5 s for `pid` to be gone. */
static bool s_wait_gone(pid_t pid)
{
	for (int i = 0; i < 100 && !s_gone(pid); i++)
		usleep(50000);
	return s_gone(pid);
}

/* Whether a line of file `rel` is exactly `line`. */
static bool s_has_line(const char *rel, const char *line)
{
	char p[PATH_MAX], buf[8192];
	snprintf(p, sizeof p, "%s/%s", dir, rel);
	FILE *f = fopen(p, "r");
	bool found = false;
	while (f && !found && fgets(buf, sizeof buf, f)) {
		buf[strcspn(buf, "\n")] = '\0';
		found = strcmp(buf, line) == 0;
	}
	if (f)
		fclose(f);
	return found;
}

static const char run_script[] =
	"#!/bin/sh\n"
	"env > \"$RINGMASTER_CHECKPOINT_DIR/env.txt\"\n"
	"pwd -P > \"$RINGMASTER_CHECKPOINT_DIR/cwd.txt\"\n"
	"echo \"hello from rank $RANK of $WORLD_SIZE\"\n"
	"echo \"a line on stderr\" >&2\n"
	"echo '{\"step\": 1, \"loss\": 2.5}' >&$RINGMASTER_METRICS_FD\n"
	"echo 'this is not json' >&$RINGMASTER_METRICS_FD\n"
	"echo '{\"step\": 2, \"loss\": 2.25, \"lr\": 0.1}' >&$RINGMASTER_METRICS_FD\n"
	"sleep 300 > /dev/null 2>&1 &\n"
	"echo $! > \"$RINGMASTER_CHECKPOINT_DIR/child.pid\"\n"
	"exit 0\n";

static void test_run(const char *ringworker)
{
	s_write("data/bin/run.sh", run_script, 0755);
	s_start_agent(ringworker, "none");
	s_send(WIRE_SPAWN, s_spawn_msg("job1", 1, 0, "bin/run.sh", "--flag", "proj"));
	bool started = false, exited = false, saw_out = false, saw_err = false;
	int n_rows = 0, late = 0;
	pid_t pid = -1;
	int64_t end = s_now_ms() + 20000;
	while (!exited && s_now_ms() < end) {
		json_t *p = NULL;
		wire_type_t t = s_recv(&p, 1000);
		if (!t)
			continue;
		const char *job = json_string_value(json_object_get(p, "job"));
		CHECK(job && !strcmp(job, "job1"), "%s of job '%s'", wire_type_name(t), job);
		if (t == WIRE_RANK_STARTED) {
			started = true;
			pid = (pid_t)json_integer_value(json_object_get(p, "pid"));
			CHECK(json_integer_value(json_object_get(p, "rank")) == 1, "RANK_STARTED rank");
		} else if (t == WIRE_PROGRAM_METRICS) {
			late += !started;
			json_t *row = json_object_get(p, "row");
			n_rows++;
			CHECK(json_integer_value(json_object_get(row, "step")) == n_rows, "row %d: step", n_rows);
			CHECK(json_real_value(json_object_get(row, "loss")) == (n_rows == 1 ? 2.5 : 2.25), "row loss");
		} else if (t == WIRE_LOGS) {
			late += !started;
			size_t i;
			json_t *line;
			json_array_foreach(json_object_get(p, "lines"), i, line) {
				const char *text = json_string_value(json_object_get(line, "text"));
				const char *stream = json_string_value(json_object_get(line, "stream"));
				saw_out |= text && !strcmp(text, "hello from rank 1 of 2") && stream && !strcmp(stream, "stdout");
				saw_err |= text && !strcmp(text, "a line on stderr") && stream && !strcmp(stream, "stderr");
			}
		} else if (t == WIRE_RANK_EXITED) {
			exited = true;
			CHECK(json_integer_value(json_object_get(p, "exit_code")) == 0 &&
			      json_integer_value(json_object_get(p, "signal")) == 0, "RANK_EXITED exit 0");
		} else {
			CHECK(false, "unexpected %s", wire_type_name(t));
		}
		json_decref(p);
	}
	CHECK(started && pid > 0, "RANK_STARTED came");
	CHECK(late == 0, "logs or metrics before RANK_STARTED");
	CHECK(n_rows == 2, "2 PROGRAM_METRICS rows, got %d", n_rows);
	CHECK(saw_out && saw_err, "LOGS carry stdout (%d) and stderr (%d)", saw_out, saw_err);
	CHECK(exited, "RANK_EXITED came");

	char buf[PATH_MAX], want[PATH_MAX + 64];
	snprintf(want, sizeof want, "%s/data/proj", dir);
	CHECK(s_read("ck/job1/program/cwd.txt", buf, sizeof buf) && !strcmp(buf, want), "cwd '%s'", buf);
	struct stat st;
	snprintf(buf, sizeof buf, "%s/ck/job1/program", dir);
	CHECK(stat(buf, &st) == 0 && (st.st_mode & 0777) == 0700, "checkpoint folder 0700: %o", st.st_mode & 0777);
	const char *env = "ck/job1/program/env.txt";
	static const char *const want_lines[] = {
		"MASTER_ADDR=127.0.0.1", "MASTER_PORT=30123", "RANK=1", "LOCAL_RANK=1", "WORLD_SIZE=2",
		"LOCAL_WORLD_SIZE=2", "GROUP_RANK=0", "ROLE_RANK=1", "ROLE_WORLD_SIZE=2", "ROLE_NAME=default",
		"GROUP_WORLD_SIZE=1", "TORCHELASTIC_RESTART_COUNT=0", "TORCHELASTIC_MAX_RESTARTS=3",
		"TORCHELASTIC_RUN_ID=job1", "TORCHELASTIC_USE_AGENT_STORE=False", "RINGMASTER_JOB_ID=job1",
		"RINGMASTER_METRICS_FD=3", "RINGMASTER_USER_GREETING=hi", NULL,
	};
	for (int i = 0; want_lines[i]; i++)
		CHECK(s_has_line(env, want_lines[i]), "env has %s", want_lines[i]);
	snprintf(want, sizeof want, "RINGMASTER_CHECKPOINT_DIR=%s/ck/job1/program", dir);
	CHECK(s_has_line(env, want), "env has %s", want);
	CHECK(!s_has_line(env, "RINGMASTER_TOKEN=rmt_not_for_programs"), "the agent's token is passed");
	CHECK(!s_has_line(env, "RINGWORKER_SECRET_TEST=agent-only"), "RINGWORKER_* is passed");
	CHECK(s_read("ck/job1/program/child.pid", buf, sizeof buf), "child.pid");
	pid_t child = (pid_t)atoi(buf);
	CHECK(child > 0 && s_wait_gone(child), "the child %d the program left is gone", (int)child);

	/* not allowed: a RANK_EXITED with failure spawn, nothing started */
	s_send(WIRE_SPAWN, s_spawn_msg("job2", 0, 1, "/bin/sh", "-c", NULL));
	json_t *p = NULL;
	wire_type_t t = s_recv(&p, 10000);
	CHECK(t == WIRE_RANK_EXITED, "refused SPAWN: %s", t ? wire_type_name(t) : "timeout");
	if (t == WIRE_RANK_EXITED) {
		const char *error = json_string_value(json_object_get(p, "error"));
		CHECK(json_integer_value(json_object_get(p, "failure")) == RM_FAILURE_SPAWN, "failure spawn");
		CHECK(error && strstr(error, "not allowed") && strstr(error, "--allow-program"), "error '%s'", error);
	}
	json_decref(p);
	/* '..' in cwd */
	s_send(WIRE_SPAWN, s_spawn_msg("job3", 0, 1, "bin/run.sh", "x", "../.."));
	p = NULL;
	t = s_recv(&p, 10000);
	CHECK(t == WIRE_RANK_EXITED && strstr(json_string_value(json_object_get(p, "error")), "program.cwd"),
	      "cwd '..' refused");
	json_decref(p);
}

static const char kill_script[] =
	"#!/bin/sh\n"
	"sleep 300 > /dev/null 2>&1 &\n"
	"echo $! > \"$RINGMASTER_CHECKPOINT_DIR/child.pid\"\n"
	"echo ready\n"
	"echo '{\"step\": 7, \"loss\": 1.5}' >&$RINGMASTER_METRICS_FD\n"
	"wait\n";

/* Spawn the kill script as job `job` on cpu:`device`; its pid and child's. */
static void s_spawn_sleeper(const char *job, int device, pid_t *ret_pid, pid_t *ret_child)
{
	s_send(WIRE_SPAWN, s_spawn_msg(job, 0, device, "bin/sleeper.sh", "x", NULL));
	json_t *p = NULL;
	wire_type_t t = s_recv(&p, 10000);
	CHECK(t == WIRE_RANK_STARTED, "RANK_STARTED for %s", job);
	*ret_pid = (pid_t)json_integer_value(json_object_get(p, "pid"));
	json_decref(p);
	/* a row arrives while the program runs, not only at its exit */
	while ((t = s_recv(&p, 10000)) == WIRE_LOGS)
		json_decref(p);
	CHECK(t == WIRE_PROGRAM_METRICS, "PROGRAM_METRICS of a running program: %s", t ? wire_type_name(t) : "timeout");
	if (t)
		json_decref(p);
	char rel[256], buf[64] = "";
	snprintf(rel, sizeof rel, "ck/%s/program/child.pid", job);
	for (int i = 0; i < 200 && !s_read(rel, buf, sizeof buf); i++)
		usleep(50000);
	*ret_child = (pid_t)atoi(buf);
	CHECK(*ret_child > 0 && !s_gone(*ret_child), "the sleeper's child runs");
}

static void test_kill(const char *ringworker)
{
	s_write("data/bin/sleeper.sh", kill_script, 0755);
	s_start_agent(ringworker, "none");
	pid_t pid, child;
	s_spawn_sleeper("jobk", 0, &pid, &child);
	s_send(WIRE_KILL, json_pack("{s:s, s:i, s:i}", "job", "jobk", "attempt", 1, "rank", 0));
	json_t *p = NULL;
	wire_type_t t;
	while ((t = s_recv(&p, 10000)) == WIRE_LOGS)
		json_decref(p);
	CHECK(t == WIRE_RANK_EXITED, "RANK_EXITED after KILL: %s", t ? wire_type_name(t) : "timeout");
	CHECK(json_integer_value(json_object_get(p, "signal")) == SIGTERM, "ended by SIGTERM");
	json_decref(p);
	CHECK(s_wait_gone(child), "the program's child %d is gone after KILL", (int)child);
	CHECK(s_group_gone(pid), "no process of group %d is left", (int)pid);

	/* the agent's own stop ends the group too */
	s_spawn_sleeper("jobs", 1, &pid, &child);
	kill(agent_pid, SIGTERM);
	int status = 0;
	for (int i = 0; i < 200 && waitpid(agent_pid, &status, WNOHANG) == 0; i++)
		usleep(50000);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the agent stopped cleanly");
	agent_pid = -1;
	CHECK(s_wait_gone(child), "the program's child %d is gone after the agent stopped", (int)child);
	CHECK(s_group_gone(pid), "no process of group %d is left", (int)pid);
}

static const char gpu_script[] =
	"#!/bin/sh\n"
	"env > \"$RINGMASTER_CHECKPOINT_DIR/env.txt\"\n";

/* Under fake NVML (FAKE_NVML_GPUS, set by meson) a program on cuda:1 sees
 * that GPU only. */
static void test_gpu(const char *ringworker)
{
	s_write("data/bin/gpu.sh", gpu_script, 0755);
	s_start_agent(ringworker, "auto");
	json_t *spawn = s_spawn_msg("jobg", 0, 1, "bin/gpu.sh", "x", NULL);
	json_object_set_new(json_object_get(spawn, "device"), "kind", json_string("cuda"));
	s_send(WIRE_SPAWN, spawn);
	json_t *p = NULL;
	wire_type_t t;
	bool started = false;
	while ((t = s_recv(&p, 10000)) != 0 && t != WIRE_RANK_EXITED) {
		started |= t == WIRE_RANK_STARTED;
		json_decref(p);
	}
	CHECK(started && t == WIRE_RANK_EXITED && json_integer_value(json_object_get(p, "exit_code")) == 0,
	      "the GPU program ran and exited 0");
	json_decref(p);
	CHECK(s_has_line("ck/jobg/program/env.txt", "CUDA_VISIBLE_DEVICES=GPU-fake-b"), "its GPU only");
	CHECK(s_has_line("ck/jobg/program/env.txt", "CUDA_DEVICE_ORDER=PCI_BUS_ID"), "PCI bus order");
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: test_program_agent RINGWORKER run|kill\n");
		return 2;
	}
	char tmpl[] = "/tmp/test_program_agent.XXXXXX", real[PATH_MAX];
	if (!mkdtemp(tmpl) || !realpath(tmpl, real) || strlen(real) >= sizeof dir)
		return 1;
	memcpy(dir, real, strlen(real) + 1);
	const char *sub[] = {"data", "data/bin", "data/proj", "ck", "state", NULL};
	for (int i = 0; sub[i]; i++) {
		char p[PATH_MAX];
		snprintf(p, sizeof p, "%s/%s", dir, sub[i]);
		mkdir(p, 0700);
	}
	zctx = zmq_ctx_new();
	router = zmq_socket(zctx, ZMQ_ROUTER);
	int linger = 0;
	zmq_setsockopt(router, ZMQ_LINGER, &linger, sizeof linger);
	if (zmq_bind(router, "tcp://127.0.0.1:*") != 0) {
		fprintf(stderr, "bind: %s\n", zmq_strerror(errno));
		return 1;
	}
	if (!strcmp(argv[2], "run"))
		test_run(argv[1]);
	else if (!strcmp(argv[2], "kill"))
		test_kill(argv[1]);
	else if (!strcmp(argv[2], "gpu"))
		test_gpu(argv[1]);
	else
		return 2;
	if (agent_pid > 0) {
		kill(agent_pid, SIGTERM);
		waitpid(agent_pid, NULL, 0);
	}
	char log[PATH_MAX + 16];
	snprintf(log, sizeof log, "%s/agent.log", dir);
	if (failures) {
		fprintf(stderr, "%d check(s) failed; the agent's log:\n", failures);
		FILE *f = fopen(log, "r");
		char buf[4096];
		while (f && fgets(buf, sizeof buf, f))
			fputs(buf, stderr);
		if (f)
			fclose(f);
	}
	zmq_close(router);
	zmq_ctx_term(zctx);
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	(void)!system(cmd);
	return failures != 0;
}
