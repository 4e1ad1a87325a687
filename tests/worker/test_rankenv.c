/*
 * test_rankenv: worker/rankenv.c: the agent's --env defaults (names the
 * agent sets itself refused, a later value replacing an earlier one), an
 * --env-file with comments, "export " and a bad line named by its number,
 * the layers in rankenv_build (agent environ < defaults < job env;
 * reserved or malformed job names skipped), and the rank's environment
 * line.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "check.h"
#include "rankenv.h"

static const char *s_get(char **env, const char *name)
{
	size_t n = strlen(name);
	for (char **p = env; p && *p; p++)
		if (strncmp(*p, name, n) == 0 && (*p)[n] == '=')
			return *p + n + 1;
	return NULL;
}

static void test_defaults(void)
{
	rankenv_defaults_t d = {0};
	char err[512];
	CHECK(rankenv_add(&d, "NCCL_DEBUG=WARN", "--env", err, sizeof err) == 0, "add: %s", err);
	CHECK(rankenv_add(&d, "NCCL_DEBUG=INFO", "--env", err, sizeof err) == 0 && d.n == 1, "replace");
	CHECK(rankenv_add(&d, "EMPTY=", "--env", err, sizeof err) == 0, "an empty value");
	const char *bad[] = {"NOEQUALS", "=x", "1A=x", "A-B=x", "OMP_NUM_THREADS=4", "CUDA_VISIBLE_DEVICES=1",
	                     "RINGMASTER_JOB=x", "MASTER_ADDR=h"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = '\0';
		CHECK(rankenv_add(&d, bad[i], "--env", err, sizeof err) == -EINVAL && strstr(err, "--env"),
		      "'%s' refused, naming --env: %s", bad[i], err);
	}
	CHECK(d.n == 2, "refused ones not added (%d)", d.n);

	char path[] = "/tmp/rankenv-test-XXXXXX";
	int fd = mkstemp(path);
	const char text[] = "# site\n\n  export NCCL_NET_PLUGIN=/opt/tcpx/lib/libnccl-net.so\r\n"
	                    "LD_LIBRARY_PATH=/usr/local/tcpx/lib64:/usr/lib\nNCCL_DEBUG=TRACE\n";
	CHECK(fd >= 0 && write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1), "write %s", path);
	close(fd);
	CHECK(rankenv_load_file(&d, path, err, sizeof err) == 0, "load: %s", err);
	CHECK(d.n == 4, "4 defaults (%d)", d.n);
	fd = open(path, O_WRONLY | O_TRUNC);
	const char badtext[] = "A=1\n# fine\nOMP_NUM_THREADS=2\n";
	CHECK(fd >= 0 && write(fd, badtext, sizeof badtext - 1) == (ssize_t)(sizeof badtext - 1), "rewrite");
	close(fd);
	CHECK(rankenv_load_file(&d, path, err, sizeof err) == -EINVAL && strstr(err, ":3:"),
	      "the bad line named by its number: %s", err);
	unlink(path);
	CHECK(rankenv_load_file(&d, path, err, sizeof err) == -ENOENT && strstr(err, path), "a missing file: %s",
	      err);

	/* the layers: base < defaults < job env; the job's reserved names skipped */
	char *base[] = {"PATH=/bin", "NCCL_DEBUG=BASE", "LD_LIBRARY_PATH=/base", NULL};
	json_t *job = json_pack("{s:s, s:s, s:s, s:i, s:s}", "NCCL_DEBUG", "JOB", "GLOO_DEVICE_TRANSPORT", "TCP",
	                        "OMP_NUM_THREADS", "64", "NCCL_BAD_TYPE", 3, "bad-name", "x");
	int skipped = -1;
	char **env = rankenv_build(base, &d, job, &skipped);
	CHECK(env != NULL, "build");
	CHECK(s_get(env, "PATH") && strcmp(s_get(env, "PATH"), "/bin") == 0, "the agent's own kept");
	CHECK(s_get(env, "NCCL_DEBUG") && strcmp(s_get(env, "NCCL_DEBUG"), "JOB") == 0, "the job wins: %s",
	      s_get(env, "NCCL_DEBUG"));
	CHECK(s_get(env, "LD_LIBRARY_PATH") && strcmp(s_get(env, "LD_LIBRARY_PATH"), "/usr/local/tcpx/lib64:/usr/lib") == 0,
	      "a default over the agent's environ");
	CHECK(s_get(env, "GLOO_DEVICE_TRANSPORT") && s_get(env, "EMPTY") && !s_get(env, "OMP_NUM_THREADS"),
	      "job names, an empty default, a reserved job name skipped");
	CHECK(skipped == 3, "skipped %d (reserved, not a string, not a name)", skipped);
	int count = 0;
	for (char **p = env; *p; p++)
		count += strncmp(*p, "NCCL_DEBUG=", 11) == 0;
	CHECK(count == 1, "NCCL_DEBUG once (%d)", count);

	/* the rank's line */
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int listed = rankenv_log(f, "r: ", env);
	fclose(f);
	CHECK(listed == 4 && strncmp(buf, "r: environment: ", 16) == 0 && strstr(buf, " NCCL_DEBUG=JOB") &&
	          strstr(buf, " GLOO_DEVICE_TRANSPORT=TCP") && !strstr(buf, "PATH=/bin") && buf[len - 1] == '\n',
	      "line (%d): %s", listed, buf);
	free(buf);
	char *none[] = {"PATH=/bin", NULL};
	f = open_memstream(&buf, &len);
	CHECK(rankenv_log(f, "r: ", none) == 0, "nothing to list");
	fclose(f);
	CHECK(len == 0, "no line without variables: '%s'", buf);
	free(buf);
	rankenv_free(env);
	json_decref(job);
	rankenv_defaults_free(&d);
}

int main(void)
{
	test_defaults();
	if (failures == 0)
		printf("ok\n");
	return failures != 0;
}
