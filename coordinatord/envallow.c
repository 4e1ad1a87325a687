/*
 * envallow: the program.env allow-list (see envallow.h).
 */
#include "envallow.h"

#include <stdio.h>
#include <string.h>

static char s_patterns[ENVALLOW_MAX_BYTES] = ENVALLOW_DEFAULT;

/* torchrun's variables and the others the agent sets for every rank
 * (docs/workers.md); RINGMASTER_* is checked by prefix. */
static const char *const s_reserved[] = {
	"MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
	"ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "GROUP_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT",
	"TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS",
	"CUDA_VISIBLE_DEVICES", NULL};

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
	for (const char *const *r = s_reserved; *r; r++)
		if (strcmp(*r, name) == 0)
			return true;
	return strncmp(name, "RINGMASTER_", 11) == 0 && strncmp(name, "RINGMASTER_USER_", 16) != 0;
}

int envallow_check(const jobspec_t *spec, char *detail, size_t detail_len, char *pointer, size_t pointer_len)
{
	for (int i = 0; i < spec->program.n_env; i++) {
		const char *name = spec->program.env_names[i];
		if (envallow_reserved(name)) {
			snprintf(detail, detail_len,
			         "program.env.%.255s is set by the agent itself for every rank (torchrun's variables, "
			         "OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES, RINGMASTER_*; docs/workers.md): leave it out",
			         name);
		} else if (!envallow_match(s_patterns, name)) {
			snprintf(detail, detail_len,
			         "program.env.%.255s is not allowed by the coordinator's env_allow (%.1000s); ask the "
			         "operator to allow it, or use a RINGMASTER_USER_ name if allowed",
			         name, s_patterns);
		} else {
			continue;
		}
		snprintf(pointer, pointer_len, "/program/env/%.255s", name);
		return 422;
	}
	return 0;
}
