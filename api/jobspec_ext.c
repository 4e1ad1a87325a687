/*
 * jobspec_ext: the spec's env and tensorboard sections (see jobspec_ext.h).
 */
#include "jobspec_ext.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"
#include "jobspec_internal.h"

#define DEFAULT_TB_DIR "tensorboard"

/* What a value is, for "(got ...)". */
static const char *s_kind(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER:
	case JSON_REAL: return "a number";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	case JSON_NULL: return "null";
	default: return "an unexpected value";
	}
}

bool jobspec_ext_env_name_ok(const char *name)
{
	size_t len = strlen(name);
	if (len == 0 || len > JOBSPEC_ENV_MAX_NAME)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
		if (!alpha && (i == 0 || c < '0' || c > '9'))
			return false;
	}
	return true;
}

/* torchrun's variables and the others the agent sets for every rank;
 * RINGMASTER_* is checked by prefix. */
static const char *const s_reserved[] = {
	"MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
	"ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "GROUP_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT",
	"TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS",
	"CUDA_VISIBLE_DEVICES", NULL};

bool jobspec_ext_env_reserved(const char *name)
{
	for (const char *const *r = s_reserved; *r; r++)
		if (strcmp(*r, name) == 0)
			return true;
	return strncmp(name, "RINGMASTER_", 11) == 0 && strncmp(name, "RINGMASTER_USER_", 16) != 0;
}

int jobspec_ext_check_env(const json_t *env, const char *field, const char *pointer, jobspec_error_t *err)
{
	if (!env)
		return 0;
	if (!json_is_object(env))
		return s_fail(err, pointer, "%s must be an object of names to string values (got %s)", field,
		              s_kind(env));
	if (json_object_size(env) > JOBSPEC_ENV_MAX)
		return s_fail(err, pointer, "%s must have at most %d names (got %zu)", field, JOBSPEC_ENV_MAX,
		              json_object_size(env));
	const char *name;
	const json_t *val;
	json_object_foreach((json_t *)env, name, val) {
		char at[sizeof err->pointer], shown[80];
		s_excerpt(name, strlen(name), shown, sizeof shown, 64);
		if (!jobspec_ext_env_name_ok(name)) /* keys hold no NUL: jobspec_parse refuses \u0000 */
			return s_fail(err, pointer,
			              "%s name \"%s\" is not a variable name: letters, digits and '_', not starting"
			              " with a digit, at most %d bytes",
			              field, shown, JOBSPEC_ENV_MAX_NAME);
		snprintf(at, sizeof at, "%s/%.200s", pointer, name);
		size_t len = json_is_string(val) ? json_string_length(val) : 0;
		if (!json_is_string(val) || len > JOBSPEC_ENV_MAX_VALUE || memchr(json_string_value(val), '\0', len)) {
			char got[64];
			if (json_is_string(val))
				snprintf(got, sizeof got, "%zu bytes or a NUL byte", len);
			else
				snprintf(got, sizeof got, "%s", s_kind(val));
			return s_fail(err, at, "%s.%s must be a string of at most %d bytes without NUL (got %s)",
			              field, shown, JOBSPEC_ENV_MAX_VALUE, got);
		}
	}
	return 0;
}

/* tensorboard.dir as given, or the default; NULL when the value is bad. */
static const char *s_tb_dir(const json_t *tb)
{
	const json_t *dir = json_object_get(tb, "dir");
	if (!dir)
		return DEFAULT_TB_DIR;
	return json_is_string(dir) ? json_string_value(dir) : NULL;
}

static int s_read_tensorboard(const json_t *doc, jobspec_error_t *err)
{
	const json_t *tb = json_object_get(doc, "tensorboard");
	if (!tb)
		return 0;
	if (json_object_get(doc, "program"))
		return s_fail(err, "/tensorboard",
		              "a program job has no tensorboard section: the program writes its own event files"
		              " (leave tensorboard out)");
	if (!json_is_object(tb))
		return s_fail(err, "/tensorboard", "tensorboard must be an object such as {\"dir\": \"runs\"} (got %s)",
		              s_kind(tb));
	const char *key;
	const json_t *v;
	json_object_foreach((json_t *)tb, key, v) {
		if (strcmp(key, "dir") != 0) {
			char shown[80], at[sizeof err->pointer];
			s_excerpt(key, strlen(key), shown, sizeof shown, 64);
			snprintf(at, sizeof at, "/tensorboard/%.200s", key);
			return s_fail(err, at, "unknown field tensorboard.%s: tensorboard has only dir", shown);
		}
	}
	const char *dir = s_tb_dir(tb);
	const json_t *jdir = json_object_get(tb, "dir");
	size_t len = jdir && json_is_string(jdir) ? json_string_length(jdir) : strlen(DEFAULT_TB_DIR);
	if (!dir || len < 1 || len > JOBSPEC_PATH_MAX_BYTES || memchr(dir, '\0', len))
		return s_fail(err, "/tensorboard/dir",
		              "tensorboard.dir must be a string of 1 to %d bytes without NUL (got %s)",
		              JOBSPEC_PATH_MAX_BYTES, dir ? "another length or a NUL byte" : s_kind(jdir));
	if (!fs_path_beneath(dir)) {
		char shown[96];
		s_excerpt(dir, strlen(dir), shown, sizeof shown, 80);
		return s_fail(err, "/tensorboard/dir",
		              "tensorboard.dir must be a path relative to the agent's --tensorboard-root (else its"
		              " --checkpoint-root), without '..' components (got '%s')",
		              shown);
	}
	return 0;
}

int jobspec_ext_read(const json_t *doc, jobspec_error_t *err)
{
	int rc = jobspec_ext_check_env(json_object_get(doc, "env"), "env", "/env", err);
	return rc < 0 ? rc : s_read_tensorboard(doc, err);
}

int jobspec_ext_copy(const json_t *doc, jobspec_t *spec)
{
	const json_t *env = json_object_get(doc, "env"), *tb = json_object_get(doc, "tensorboard");
	size_t n = env ? json_object_size(env) : 0;
	if (n > 0) {
		spec->env.names = calloc(n + 1, sizeof(char *));
		spec->env.values = calloc(n + 1, sizeof(char *));
		if (!spec->env.names || !spec->env.values)
			return -ENOMEM;
		const char *name;
		const json_t *val;
		json_object_foreach((json_t *)env, name, val) {
			int k = spec->env.n;
			spec->env.names[k] = strdup(name);
			spec->env.values[k] = strdup(json_string_value(val));
			spec->env.n++; /* counted before the check: jobspec_ext_free frees both */
			if (!spec->env.names[k] || !spec->env.values[k])
				return -ENOMEM;
		}
	}
	if (tb && !(spec->tensorboard.dir = strdup(s_tb_dir(tb))))
		return -ENOMEM;
	return 0;
}

int jobspec_ext_render(const jobspec_t *spec, json_t *doc)
{
	int bad = 0;
	if (spec->env.n > 0) {
		json_t *env = json_object();
		for (int i = 0; env && i < spec->env.n; i++)
			bad |= json_object_set_new(env, spec->env.names[i], json_string(spec->env.values[i]));
		bad |= json_object_set_new(doc, "env", env);
	}
	if (spec->tensorboard.dir)
		bad |= json_object_set_new(doc, "tensorboard", json_pack("{s:s}", "dir", spec->tensorboard.dir));
	return bad ? -1 : 0;
}

void jobspec_ext_free(jobspec_t *spec)
{
	for (int i = 0; spec->env.names && i < spec->env.n; i++) {
		free(spec->env.names[i]);
		free(spec->env.values[i]);
	}
	free(spec->env.names);
	free(spec->env.values);
	free(spec->tensorboard.dir);
	memset(&spec->env, 0, sizeof spec->env);
	memset(&spec->tensorboard, 0, sizeof spec->tensorboard);
}
