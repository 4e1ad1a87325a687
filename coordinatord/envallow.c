/*
 * envallow: the env and program.env allow-lists (see envallow.h).
 */
#include "envallow.h"

#include "jobspec_ext.h"

#include <stdio.h>
#include <string.h>

static char s_patterns[ENVALLOW_MAX_BYTES] = ENVALLOW_DEFAULT;
static char s_job_patterns[ENVALLOW_MAX_BYTES] = ENVALLOW_JOB_DEFAULT;

bool envallow_valid(const char *patterns)
{
	size_t n = strlen(patterns);
	if (n == 0 || n >= ENVALLOW_MAX_BYTES)
		return false;
	for (const char *p = patterns; *p;) {
		size_t len = strcspn(p, ",");
		if (len == 0)
			return false;
		for (size_t i = 0; i < len; i++) {
			char c = p[i];
			bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
			          (c == '*' && i == len - 1);
			if (!ok)
				return false;
		}
		p += len;
		if (*p == ',' && !*++p)
			return false; /* a trailing comma */
	}
	return true;
}

void envallow_set(const char *patterns)
{
	if (envallow_valid(patterns))
		snprintf(s_patterns, sizeof s_patterns, "%s", patterns);
}

void envallow_set_job(const char *patterns)
{
	if (envallow_valid(patterns))
		snprintf(s_job_patterns, sizeof s_job_patterns, "%s", patterns);
}

bool envallow_match(const char *patterns, const char *name)
{
	size_t nlen = strlen(name);
	for (const char *p = patterns; *p;) {
		size_t len = strcspn(p, ",");
		if (len > 0 && p[len - 1] == '*') {
			if (nlen >= len - 1 && strncmp(p, name, len - 1) == 0)
				return true;
		} else if (len == nlen && strncmp(p, name, len) == 0) {
			return true;
		}
		p += len;
		if (*p == ',')
			p++;
	}
	return false;
}

bool envallow_reserved(const char *name)
{
	return jobspec_ext_env_reserved(name); /* one list for the coordinator and the agent */
}

/* One list of names against `patterns`: 0, or 422 naming the first refused.
 * `field` is "env" or "program.env", `key` the config key of `patterns`. */
static int s_check(char *const *names, int n, const char *field, const char *key, const char *patterns,
                   char *detail, size_t detail_len, char *pointer, size_t pointer_len)
{
	for (int i = 0; i < n; i++) {
		const char *name = names[i];
		if (envallow_reserved(name)) {
			snprintf(detail, detail_len,
			         "%s.%.255s is set by the agent itself for every rank (torchrun's variables, "
			         "OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES, RINGMASTER_*; docs/workers.md): leave it out",
			         field, name);
		} else if (!envallow_match(patterns, name)) {
			snprintf(detail, detail_len,
			         "%s.%.255s is not allowed by the coordinator's %s (%.1000s); ask the "
			         "operator to allow it%s",
			         field, name, key, patterns,
			         field[0] == 'p' ? ", or use a RINGMASTER_USER_ name if allowed" : "");
		} else {
			continue;
		}
		snprintf(pointer, pointer_len, "/%s/%.255s", field[0] == 'p' ? "program/env" : "env", name);
		return 422;
	}
	return 0;
}

int envallow_check(const jobspec_t *spec, char *detail, size_t detail_len, char *pointer, size_t pointer_len)
{
	int rc = s_check(spec->env.names, spec->env.n, "env", "job_env_allow", s_job_patterns, detail, detail_len,
	                 pointer, pointer_len);
	if (rc == 0)
		rc = s_check(spec->program.env_names, spec->program.n_env, "program.env", "env_allow", s_patterns,
		             detail, detail_len, pointer, pointer_len);
	return rc;
}
