/*
 * comm_kv_dir: a comm_kv_t on a directory (see comm_kv_dir.h).
 */
#include "comm_kv_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void s_path(const char *dir, const char *key, char *out, size_t n)
{
	int len = snprintf(out, n, "%s/k_", dir);
	for (const char *k = key; *k && (size_t)len + 1 < n; k++)
		out[len++] = *k == '/' ? '_' : *k;
	out[len] = '\0';
}

static int s_set(void *ctx, const char *key, const void *value, size_t n)
{
	const char *dir = ctx;
	char path[4096], tmp[4200];
	s_path(dir, key, path, sizeof path);
	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return -errno;
	const char *p = value;
	size_t left = n;
	while (left > 0) {
		ssize_t w = write(fd, p, left);
		if (w < 0) {
			int e = errno;
			close(fd);
			unlink(tmp);
			return -e;
		}
		p += w;
		left -= (size_t)w;
	}
	if (close(fd) < 0 || rename(tmp, path) < 0) {
		int e = errno;
		unlink(tmp);
		return -e;
	}
	return 0;
}

static double s_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int s_get(void *ctx, const char *key, int timeout_ms, void **ret_value, size_t *ret_n)
{
	const char *dir = ctx;
	char path[4096];
	s_path(dir, key, path, sizeof path);
	double deadline = s_now_ms() + timeout_ms;
	for (;;) {
		int fd = open(path, O_RDONLY);
		if (fd >= 0) {
			struct stat st;
			if (fstat(fd, &st) < 0) {
				int e = errno;
				close(fd);
				return -e;
			}
			size_t n = (size_t)st.st_size;
			char *buf = malloc(n ? n : 1);
			if (!buf) {
				close(fd);
				return -ENOMEM;
			}
			size_t got = 0;
			while (got < n) {
				ssize_t r = read(fd, buf + got, n - got);
				if (r <= 0) {
					int e = r < 0 ? errno : EIO;
					free(buf);
					close(fd);
					return -e;
				}
				got += (size_t)r;
			}
			close(fd);
			*ret_value = buf;
			*ret_n = n;
			return 0;
		}
		if (errno != ENOENT)
			return -errno;
		if (s_now_ms() >= deadline)
			return -ETIMEDOUT;
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
}

comm_kv_t comm_kv_dir_make(const char *dir)
{
	comm_kv_t kv = {.ctx = (void *)dir, .set = s_set, .get = s_get};
	return kv;
}
