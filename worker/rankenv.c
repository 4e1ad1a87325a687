/*
 * rankenv: the layers of a rank's environment (see rankenv.h).
 */
#include "rankenv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jobspec_ext.h"

/* Whether "NAME=..." `kv` sets `name` (of `len` bytes). */
static bool s_sets(const char *kv, const char *name, size_t len)
{
	return strncmp(kv, name, len) == 0 && kv[len] == '=';
}

int rankenv_add(rankenv_defaults_t *d, const char *kv, const char *origin, char *err, size_t errlen)
{
	const char *eq = strchr(kv, '=');
	size_t len = eq ? (size_t)(eq - kv) : 0;
	char name[JOBSPEC_ENV_MAX_NAME + 1];
	if (!eq || len == 0 || len > JOBSPEC_ENV_MAX_NAME) {
		snprintf(err, errlen, "%s: wants NAME=VALUE with a variable name before '=' (got '%.80s')", origin, kv);
		return -EINVAL;
	}
	memcpy(name, kv, len);
	name[len] = '\0';
	if (!jobspec_ext_env_name_ok(name)) {
		snprintf(err, errlen, "%s: '%.80s' is not a variable name: letters, digits and '_', not starting"
		         " with a digit", origin, name);
		return -EINVAL;
	}
	if (jobspec_ext_env_reserved(name)) {
		snprintf(err, errlen, "%s: %s is set by the agent itself for every rank (torchrun's variables,"
		         " OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES, RINGMASTER_*): leave it out", origin, name);
		return -EINVAL;
	}
	char *copy = strdup(kv);
	if (!copy) {
		snprintf(err, errlen, "%s: out of memory", origin);
		return -ENOMEM;
	}
	for (int i = 0; i < d->n; i++) {
		if (s_sets(d->kv[i], name, len)) {
			free(d->kv[i]);
			d->kv[i] = copy;
			return 0;
		}
	}
	if (d->n >= RANKENV_MAX) {
		free(copy);
		snprintf(err, errlen, "%s: at most %d --env defaults", origin, RANKENV_MAX);
		return -E2BIG;
	}
	d->kv[d->n++] = copy;
	return 0;
}

int rankenv_load_file(rankenv_defaults_t *d, const char *path, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "--env-file %s: %s", path, strerror(e));
		return -e;
	}
	char *buf = malloc(RANKENV_FILE_MAX_BYTES + 1);
	size_t n = 0;
	ssize_t got = 1;
	while (buf && n <= RANKENV_FILE_MAX_BYTES && (got = read(fd, buf + n, RANKENV_FILE_MAX_BYTES + 1 - n)) > 0)
		n += (size_t)got;
	int e = errno;
	close(fd);
	if (!buf || got < 0 || n > RANKENV_FILE_MAX_BYTES) {
		snprintf(err, errlen, "--env-file %s: %s", path,
		         !buf ? "out of memory" : got < 0 ? strerror(e) : "larger than 64 KiB");
		free(buf);
		return !buf ? -ENOMEM : got < 0 ? -e : -EFBIG;
	}
	buf[n] = '\0';
	int rc = 0, line_no = 0;
	for (char *line = buf, *next; line && rc == 0; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		line_no++;
		size_t len = strlen(line);
		if (len > 0 && line[len - 1] == '\r')
			line[--len] = '\0';
		line += strspn(line, " \t");
		if (!*line || *line == '#')
			continue;
		if (strncmp(line, "export ", 7) == 0)
			line += 7 + strspn(line + 7, " \t");
		char origin[300];
		snprintf(origin, sizeof origin, "--env-file %.250s:%d", path, line_no);
		rc = rankenv_add(d, line, origin, err, errlen);
	}
	free(buf);
	return rc;
}

void rankenv_defaults_free(rankenv_defaults_t *d)
{
	for (int i = 0; i < d->n; i++)
		free(d->kv[i]);
	d->n = 0;
}

void rankenv_free(char **env)
{
	if (!env)
		return;
	for (char **p = env; *p; p++)
		free(*p);
	free(env);
}

/* Set "NAME=VALUE" `kv` (NAME of `len` bytes) in env (n entries, room for
 * one more and the NULL), replacing any entry for NAME. Takes `kv`. */
static void s_put(char **env, int *n, char *kv, size_t len)
{
	for (int i = 0; i < *n; i++) {
		if (s_sets(env[i], kv, len)) {
			free(env[i]);
			env[i] = kv;
			return;
		}
	}
	env[(*n)++] = kv;
	env[*n] = NULL;
}

char **rankenv_build(char *const *base, const rankenv_defaults_t *d, const json_t *job_env, int *ret_skipped)
{
	int n_base = 0, skipped = 0;
	while (base && base[n_base])
		n_base++;
	size_t cap = (size_t)n_base + (d ? (size_t)d->n : 0) + (job_env ? json_object_size(job_env) : 0) + 1;
	char **env = calloc(cap, sizeof *env);
	if (!env)
		return NULL;
	int n = 0;
	for (int i = 0; i < n_base; i++) {
		if (!(env[n] = strdup(base[i])))
			goto fail;
		n++;
	}
	for (int i = 0; d && i < d->n; i++) {
		char *kv = strdup(d->kv[i]);
		if (!kv)
			goto fail;
		s_put(env, &n, kv, strcspn(kv, "="));
	}
	const char *name;
	const json_t *val;
	json_object_foreach((json_t *)job_env, name, val) {
		if (!json_is_string(val) || !jobspec_ext_env_name_ok(name) || jobspec_ext_env_reserved(name) ||
		    memchr(json_string_value(val), '\0', json_string_length(val))) {
			skipped++;
			continue;
		}
		char *kv;
		if (asprintf(&kv, "%s=%s", name, json_string_value(val)) < 0)
			goto fail;
		s_put(env, &n, kv, strlen(name));
	}
	if (ret_skipped)
		*ret_skipped = skipped;
	return env;
fail:
	rankenv_free(env);
	return NULL;
}

/* Whether a communication library (or the OpenMP runtime) reads `kv`. */
static bool s_comm_var(const char *kv)
{
	static const char *const prefixes[] = {"NCCL_", "GLOO_", "CUDA_", "OMP_", NULL};
	for (const char *const *p = prefixes; *p; p++)
		if (strncmp(kv, *p, strlen(*p)) == 0)
			return true;
	return s_sets(kv, "LD_LIBRARY_PATH", 15);
}

int rankenv_log(FILE *f, const char *prefix, char *const *env)
{
	int listed = 0;
	for (char *const *p = env; p && *p; p++) {
		if (!s_comm_var(*p))
			continue;
		if (!listed)
			fprintf(f, "%senvironment:", prefix);
		fprintf(f, " %.*s", 200 + (int)strcspn(*p, "=") + 1, *p);
		listed++;
	}
	if (listed) {
		fputc('\n', f);
		fflush(f);
	}
	return listed;
}
