/*
 * fsutil: see fsutil.h. fs_mkdir_p() walks the path from its first
 * component, creating each missing prefix with mkdir(2); an existing prefix
 * (EEXIST) is checked with stat(2) so that a file in the way is refused
 * here, with -ENOTDIR, rather than later by whoever opens a file inside it.
 */
#include "fsutil.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Creates the folder `dir` unless a folder is already there. */
static int mkdir_one(const char *dir, mode_t mode)
{
	if (mkdir(dir, mode) == 0)
		return 0;
	int e = errno;
	struct stat st;
	if (e != EEXIST)
		return -e;
	if (stat(dir, &st) != 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int fs_mkdir_p(const char *path, mode_t mode)
{
	if (!path || !path[0])
		return -EINVAL;
	char *buf = strdup(path);
	if (!buf)
		return -ENOMEM;
	int rc = 0;
	for (char *p = buf + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		if (p[-1] != '/') { /* skip the empty components of "a//b" and "a/" */
			char was = *p;
			*p = '\0';
			rc = mkdir_one(buf, mode);
			*p = was;
			if (rc < 0)
				break;
		}
		if (*p == '\0')
			break;
	}
	free(buf);
	return rc;
}

int fs_mkdir_parent(const char *path, mode_t mode)
{
	if (!path || !path[0])
		return -EINVAL;
	const char *slash = strrchr(path, '/');
	if (!slash || slash == path)
		return 0;
	char *dir = strndup(path, (size_t)(slash - path));
	if (!dir)
		return -ENOMEM;
	int rc = fs_mkdir_p(dir, mode);
	free(dir);
	return rc;
}

bool fs_path_beneath(const char *path)
{
	if (!path || !path[0] || path[0] == '/')
		return false;
	for (const char *c = path; *c;) {
		size_t n = strcspn(c, "/");
		if (n == 2 && c[0] == '.' && c[1] == '.')
			return false;
		c += n;
		while (*c == '/')
			c++;
	}
	return true;
}
