/*
 * test_program: the program jobs' pure parts (issue 26): the env_allow
 * patterns and the names always refused (envallow.c), placement caps, the
 * MASTER_PORT pick and SPAWN's torch values (program.c), on hand-built
 * agents and attempts, without sockets or SQL.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envallow.h"
#include "program.h"
#include "check.h"

static void test_envallow(void)
{
	CHECK(envallow_valid(ENVALLOW_DEFAULT), "the default is valid");
	CHECK(envallow_valid("A") && envallow_valid("A*,B_2"), "plain names");
	static const char *const bad[] = {"", ",", "A,", ",A", "A**", "*A", "A*B", "A B", "A;B", "A=1", "Ä"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CHECK(!envallow_valid(bad[i]), "invalid pattern list '%s'", bad[i]);
	CHECK(envallow_match(ENVALLOW_DEFAULT, "NCCL_DEBUG"), "prefix");
	CHECK(envallow_match(ENVALLOW_DEFAULT, "NCCL_"), "prefix, empty rest");
	CHECK(envallow_match(ENVALLOW_DEFAULT, "LD_LIBRARY_PATH"), "exact");
	CHECK(!envallow_match(ENVALLOW_DEFAULT, "LD_LIBRARY_PATHX"), "exact is exact");
	CHECK(!envallow_match(ENVALLOW_DEFAULT, "LD_PRELOAD"), "not listed");
	CHECK(!envallow_match(ENVALLOW_DEFAULT, "NCCL"), "shorter than the prefix");
	CHECK(!envallow_match(ENVALLOW_DEFAULT, "PATH"), "PATH is not allowed by default");
	CHECK(envallow_match("X*", "X") && !envallow_match("X*", "Y"), "one pattern");
	static const char *const reserved[] = {"MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE",
	                                       "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE",
	                                       "ROLE_NAME", "GROUP_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT",
	                                       "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
	                                       "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS",
	                                       "CUDA_VISIBLE_DEVICES", "RINGMASTER_JOB_ID", "RINGMASTER_METRICS_FD",
	                                       "RINGMASTER_CHECKPOINT_DIR", "RINGMASTER_TOKEN"};
	for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
		CHECK(envallow_reserved(reserved[i]), "%s is the agent's", reserved[i]);
	CHECK(!envallow_reserved("RINGMASTER_USER_X") && !envallow_reserved("NCCL_DEBUG") &&
	              !envallow_reserved("OMP_PROC_BIND"),
	      "user names are not reserved");

	jobspec_t s;
	jobspec_error_t err;
	const char *doc = "{\"program\": {\"argv\": [\"x\"], \"env\": {\"NCCL_DEBUG\": \"INFO\", \"LD_PRELOAD\": \"/x.so\"}}}";
	CHECK(jobspec_parse(doc, strlen(doc), &s, &err) == 0, "parse");
	char detail[2048], pointer[300];
	CHECK(envallow_check(&s, detail, sizeof detail, pointer, sizeof pointer) == 422, "LD_PRELOAD refused");
	CHECK(strcmp(pointer, "/program/env/LD_PRELOAD") == 0, "pointer %s", pointer);
	CHECK(strstr(detail, "env_allow") != NULL && strstr(detail, "/x.so") == NULL, "detail names the list, not the value: %s",
	      detail);
	envallow_set("LD_*");
	CHECK(envallow_check(&s, detail, sizeof detail, pointer, sizeof pointer) == 422 &&
	              strcmp(pointer, "/program/env/NCCL_DEBUG") == 0,
	      "with LD_* only, NCCL_DEBUG is refused: %s", pointer);
	envallow_set("NCCL_*,LD_PRELOAD");
	CHECK(envallow_check(&s, detail, sizeof detail, pointer, sizeof pointer) == 0, "both allowed");
	envallow_set("bad list,");
	CHECK(envallow_check(&s, detail, sizeof detail, pointer, sizeof pointer) == 0, "an invalid list is ignored");
	envallow_set(ENVALLOW_DEFAULT);
	jobspec_free(&s);
}

/* n agents named n1..nN with `devs` cpus each (devices unowned). */
static void agents_init(agent_t *a, int n, int devs, device_t *pool)
{
	for (int i = 0; i < n; i++) {
		memset(&a[i], 0, sizeof a[i]);
		snprintf(a[i].node, sizeof a[i].node, "n%d", i + 1);
		a[i].devices = pool + i * devs;
		a[i].n_devices = devs;
		for (int d = 0; d < devs; d++)
			a[i].devices[d] = (device_t){.kind = KIND_CPU, .index = d};
		a[i].port_lo = 30000;
		a[i].port_hi = 30002;
		a[i].alive = true;
	}
}

static void test_cap_and_ports(void)
{
	agent_t ag[3];
	device_t pool[12];
	agents_init(ag, 3, 4, pool);
	ag[1].programs = ag[2].programs = true;
	agent_t *alive[3] = {&ag[0], &ag[1], &ag[2]};
	jobspec_t s;
	jobspec_error_t err;
	const char *doc = "{\"program\": {\"argv\": [\"x\"]}, \"parallel\": {\"world_size\": 2, \"ranks_per_node\": 1}}";
	CHECK(jobspec_parse(doc, strlen(doc), &s, &err) == 0, "parse");
	int n_free[3] = {4, 4, 3};
	long total = -1;
	CHECK(program_cap_free(alive, 3, &s, KIND_CPU, n_free, &total) == 2, "two agents allow programs");
	CHECK(n_free[0] == 0 && n_free[1] == 1 && n_free[2] == 1 && total == 2, "capped: %d %d %d total %ld", n_free[0],
	      n_free[1], n_free[2], total);
	s.parallel.ranks_per_node = 0;
	int n_free2[3] = {4, 4, 3};
	program_cap_free(alive, 3, &s, KIND_CPU, n_free2, &total);
	CHECK(n_free2[0] == 0 && n_free2[1] == 4 && n_free2[2] == 3 && total == 8, "no limit: %d %d %d total %ld",
	      n_free2[0], n_free2[1], n_free2[2], total);
	jobspec_t builtin;
	const char *bdoc = "{\"data\": {\"train\": \"a\"}}";
	CHECK(jobspec_parse(bdoc, strlen(bdoc), &builtin, &err) == 0, "parse builtin");
	int n_free3[3] = {4, 4, 3};
	CHECK(program_cap_free(alive, 3, &builtin, KIND_CPU, n_free3, &total) == -1 && n_free3[0] == 4,
	      "a built-in job is not touched");
	jobspec_free(&builtin);

	/* ports: attempts holding 30000 and 30001 on n2, one on n3 */
	fabric_t f;
	memset(&f, 0, sizeof f);
	f.attempts = (smap_t)SMAP_INIT;
	rank_rt_t rk[4][2];
	attempt_t at[4];
	for (int i = 0; i < 4; i++) {
		memset(&at[i], 0, sizeof at[i]);
		memset(rk[i], 0, sizeof rk[i]);
		snprintf(at[i].job_id, sizeof at[i].job_id, "j-%d", i);
		at[i].program = true;
		at[i].world_size = 2;
		at[i].ranks = rk[i];
		rk[i][0].agent = rk[i][1].agent = i == 2 ? &ag[2] : &ag[1];
		at[i].master_port = 30000 + (i == 1);
	}
	CHECK(program_pick_port(&f, &ag[1], NULL) == 30000, "nothing held: the lowest");
	smap_put(&f.attempts, "j-0", &at[0], NULL);
	smap_put(&f.attempts, "j-2", &at[2], NULL);
	CHECK(program_pick_port(&f, &ag[1], NULL) == 30001, "30000 held on n2");
	CHECK(program_pick_port(&f, &ag[2], NULL) == 30001, "30000 held on n3 too");
	smap_put(&f.attempts, "j-1", &at[1], NULL);
	CHECK(program_pick_port(&f, &ag[1], NULL) == 30002, "30000 and 30001 held");
	CHECK(program_pick_port(&f, &ag[1], &at[0]) == 30002, "a restart of j-0 gets a new port");
	at[3].master_port = 30002;
	smap_put(&f.attempts, "j-3", &at[3], NULL);
	CHECK(program_pick_port(&f, &ag[1], NULL) == -ENOSPC, "all held");
	CHECK(program_pick_port(&f, &ag[1], &at[0]) == 30000, "range full: the restart keeps its own port");
	CHECK(program_pick_port(&f, &ag[0], NULL) == 30000, "another node's ports are its own");
	smap_free(&f.attempts);

	/* SPAWN's torch: ranks 0, 1 on n2, rank 2 on n3, rank 3 on n2 */
	jobspec_t ps;
	const char *pdoc = "{\"program\": {\"argv\": [\"a\", \"b\"], \"env\": {\"NCCL_X\": \"1\"}}, \"parallel\": {\"world_size\": 4}}";
	CHECK(jobspec_parse(pdoc, strlen(pdoc), &ps, &err) == 0, "parse");
	rank_rt_t r4[4];
	memset(r4, 0, sizeof r4);
	attempt_t a4;
	memset(&a4, 0, sizeof a4);
	snprintf(a4.job_id, sizeof a4.job_id, "j-four");
	a4.program = true;
	a4.world_size = 4;
	a4.ranks = r4;
	a4.spec = ps;
	a4.master_port = 30001;
	a4.restarts = 2;
	a4.max_restarts = 3;
	r4[0].agent = r4[1].agent = r4[3].agent = &ag[1];
	r4[2].agent = &ag[2];
	snprintf(ag[1].advertise, sizeof ag[1].advertise, "10.1.2.3");
	static const int want[4][4] = {{0, 3, 0}, {1, 3, 0}, {0, 1, 1}, {2, 3, 0}}; /* local_rank, local_world, group_rank */
	for (int r = 0; r < 4; r++) {
		json_t *sp = json_object();
		program_spawn_fields(&a4, r, sp);
		json_t *t = json_object_get(sp, "torch"), *p = json_object_get(sp, "program");
		CHECK(json_integer_value(json_object_get(t, "local_rank")) == want[r][0] &&
		              json_integer_value(json_object_get(t, "local_world_size")) == want[r][1] &&
		              json_integer_value(json_object_get(t, "group_rank")) == want[r][2],
		      "rank %d torch %s", r, json_dumps(t, JSON_COMPACT));
		CHECK(strcmp(json_string_value(json_object_get(t, "master_addr")), "10.1.2.3") == 0 &&
		              json_integer_value(json_object_get(t, "master_port")) == 30001 &&
		              json_integer_value(json_object_get(t, "restart_count")) == 2 &&
		              json_integer_value(json_object_get(t, "max_restarts")) == 3 &&
		              strcmp(json_string_value(json_object_get(t, "run_id")), "j-four") == 0,
		      "rank %d torch common values", r);
		CHECK(json_array_size(json_object_get(p, "argv")) == 2 && json_is_null(json_object_get(p, "cwd")) &&
		              strcmp(json_string_value(json_object_get(json_object_get(p, "env"), "NCCL_X")), "1") == 0,
		      "program object");
		json_decref(sp);
	}
	json_t *none = json_object();
	a4.program = false;
	program_spawn_fields(&a4, 0, none);
	CHECK(json_object_size(none) == 0, "a built-in attempt's SPAWN has no program fields");
	json_decref(none);
	jobspec_free(&ps);
	jobspec_free(&s);
}

int main(void)
{
	test_envallow();
	test_cap_and_ports();
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("ok\n");
	return 0;
}
