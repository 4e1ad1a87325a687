/*
 * beneath: open a path so that it resolves inside a root folder (see
 * beneath.h). openat2(2) when the kernel has it, else a component walk.
 */
#include "beneath.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fsutil.h"

#ifndef SYS_openat2
#define SYS_openat2 437 /* the same number on every architecture */
#endif

#define WALK_MAX_DEPTH 128 /* folders deep below the root */
#define WALK_MAX_LINKS 40  /* links followed in one path, as the kernel allows */

bool beneath_path_ok(const char *path)
{
	return fs_path_beneath(path);
}

/* The next component of *rest into comp (NAME_MAX + 1 bytes); *rest moves
 * past it. Sets *last when nothing but slashes follows. -ENAMETOOLONG. */
static int s_next(const char **rest, char *comp, bool *last)
{
	const char *r = *rest;
	size_t n = strcspn(r, "/");
	if (n > NAME_MAX)
		return -ENAMETOOLONG;
	memcpy(comp, r, n);
	comp[n] = '\0';
	r += n;
	const char *p = r;
	while (*p == '/')
		p++;
	*last = *p == '\0';
	*rest = r;
	return 0;
}

/* A link's target spliced before the rest of the path: a new string in
 * *work (the old one freed), *rest pointing at its start. */
static int s_splice(int dir_fd, const char *name, const char *rest, char **work, const char **ret_rest)
{
	char target[PATH_MAX];
	ssize_t n = readlinkat(dir_fd, name, target, sizeof target - 1);
	if (n < 0)
		return -errno;
	target[n] = '\0';
	if (target[0] == '/')
		return -EXDEV; /* an absolute link: it cannot be told to stay inside */
	size_t len = (size_t)n + 1 + strlen(rest) + 1;
	char *s = malloc(len);
	if (!s)
		return -ENOMEM;
	memcpy(s, target, (size_t)n);
	s[n] = '/';
	strcpy(s + n + 1, rest);
	free(*work);
	*work = s;
	*ret_rest = s;
	return 0;
}

/* The walk from root_fd (borrowed). Every folder it enters is opened with
 * O_NOFOLLOW relative to the one before, so a link swapped in between the
 * check and the open fails (ELOOP) instead of being followed. */
static int s_walk(int root_fd, const char *path, int flags, int *ret_fd)
{
	int fds[WALK_MAX_DEPTH + 1];
	int depth = 0, links = 0, rc = 0;
	fds[0] = root_fd;
	char *work = strdup(path);
	if (!work)
		return -ENOMEM;
	const char *rest = work;
	char comp[NAME_MAX + 1];
	for (;;) {
		while (*rest == '/')
			rest++;
		if (!*rest) { /* "dir/" or ".": the folder reached is the answer */
			int fd = openat(fds[depth], ".", flags | O_CLOEXEC);
			rc = fd < 0 ? -errno : 0;
			if (fd >= 0)
				*ret_fd = fd;
			break;
		}
		bool last;
		if ((rc = s_next(&rest, comp, &last)) < 0)
			break;
		if (strcmp(comp, ".") == 0)
			continue;
		if (strcmp(comp, "..") == 0) {
			if (depth == 0) {
				rc = -EXDEV;
				break;
			}
			close(fds[depth--]);
			continue;
		}
		struct stat st;
		if (fstatat(fds[depth], comp, &st, AT_SYMLINK_NOFOLLOW) != 0) {
			rc = -errno;
			break;
		}
		if (S_ISLNK(st.st_mode)) {
			if (++links > WALK_MAX_LINKS) {
				rc = -ELOOP;
				break;
			}
			if ((rc = s_splice(fds[depth], comp, rest, &work, &rest)) < 0)
				break;
			continue;
		}
		if (last) {
			int fd = openat(fds[depth], comp, flags | O_NOFOLLOW | O_CLOEXEC);
			rc = fd < 0 ? -errno : 0;
			if (fd >= 0)
				*ret_fd = fd;
			break;
		}
		if (depth == WALK_MAX_DEPTH) {
			rc = -ENAMETOOLONG;
			break;
		}
		int fd = openat(fds[depth], comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			rc = -errno;
			break;
		}
		fds[++depth] = fd;
	}
	while (depth > 0)
		close(fds[depth--]);
	free(work);
	return rc;
}

static int s_open(const char *root, const char *path, int flags, bool force_walk, int *ret_fd)
{
	if (!root) {
		int fd = open(path, flags | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		*ret_fd = fd;
		return 0;
	}
	if (!beneath_path_ok(path))
		return -EXDEV;
	int root_fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root_fd < 0)
		return -errno;
	int rc = -ENOSYS;
	if (!force_walk) {
		struct open_how how = {
			.flags = (unsigned long long)(flags | O_CLOEXEC),
			.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
		};
		long fd = syscall(SYS_openat2, root_fd, path, &how, sizeof how);
		rc = fd < 0 ? -errno : 0;
		if (fd >= 0)
			*ret_fd = (int)fd;
	}
	/* ENOSYS: a kernel before 5.6 (or a sandbox that hides the call): the
	 * walk gives the same answer, one openat per component. */
	if (rc == -ENOSYS)
		rc = s_walk(root_fd, path, flags, ret_fd);
	close(root_fd);
	return rc;
}

int beneath_open(const char *root, const char *path, int flags, int *ret_fd)
{
	return s_open(root, path, flags, false, ret_fd);
}

int beneath_open_walk(const char *root, const char *path, int flags, int *ret_fd)
{
	return s_open(root, path, flags, true, ret_fd);
}
