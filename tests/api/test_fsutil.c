/*
 * test_fsutil: fs_mkdir_p() and fs_mkdir_parent() on real folders under a
 * fresh temporary folder: nested creation with the requested mode, an
 * existing folder (0, nothing changed), repeated and trailing slashes, a
 * file in the way as the path itself or as one of its parents (-ENOTDIR,
 * nothing created past it), a folder it may not write in (-EACCES, when not
 * root), empty and NULL paths (-EINVAL), and the parent-only variant.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"
#include "check.h"

static char tmpdir[256];

static const char *in_tmp(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s/%s", tmpdir, name);
	return buf;
}

static int is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

static void make_file(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0, "creating %s: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
}

static void test_nested(void)
{
	char p[512], q[512];
	int rc = fs_mkdir_p(in_tmp(p, sizeof p, "a/b/c/d"), 0750);
	CHECK(rc == 0, "nested: %d", rc);
	CHECK(is_dir(in_tmp(q, sizeof q, "a")) && is_dir(in_tmp(q, sizeof q, "a/b")) &&
	      is_dir(in_tmp(q, sizeof q, "a/b/c")) && is_dir(p), "every level is a folder");
	struct stat st;
	CHECK(stat(p, &st) == 0 && (st.st_mode & 07777) == (0750 & ~(mode_t)022),
	      "mode %o, want 0750 under umask 022", (unsigned)(st.st_mode & 07777));

	/* Existing: 0, and what is inside is left alone. */
	make_file(in_tmp(q, sizeof q, "a/b/c/d/keep"));
	CHECK(fs_mkdir_p(p, 0700) == 0, "existing path");
	CHECK(exists(q), "existing folder's content kept");
	CHECK(stat(p, &st) == 0 && (st.st_mode & 07777) == 0750, "existing folder's mode unchanged");

	/* Repeated and trailing slashes. */
	CHECK(fs_mkdir_p(in_tmp(p, sizeof p, "s//t///u/"), 0755) == 0, "slashes");
	CHECK(is_dir(in_tmp(q, sizeof q, "s/t/u")), "s/t/u made");

	/* Relative paths work from the current folder. */
	char cwd[512];
	CHECK(getcwd(cwd, sizeof cwd) != NULL, "getcwd");
	CHECK(chdir(tmpdir) == 0, "chdir");
	CHECK(fs_mkdir_p("rel/x", 0755) == 0, "relative");
	CHECK(is_dir(in_tmp(q, sizeof q, "rel/x")), "rel/x made");
	CHECK(fs_mkdir_p("/", 0755) == 0, "the root folder exists");
	CHECK(chdir(cwd) == 0, "chdir back");
}

static void test_in_the_way(void)
{
	char p[512], q[512];
	make_file(in_tmp(q, sizeof q, "file"));
	int rc = fs_mkdir_p(q, 0755);
	CHECK(rc == -ENOTDIR, "the path is a file: %d (%s)", rc, strerror(-rc));
	rc = fs_mkdir_p(in_tmp(p, sizeof p, "file/sub/deeper"), 0755);
	CHECK(rc == -ENOTDIR, "a parent is a file: %d (%s)", rc, strerror(-rc));
	CHECK(!exists(p), "nothing created past the file");

	/* A symbolic link to a folder is a folder; a dangling one is in the way. */
	CHECK(symlink(in_tmp(q, sizeof q, "a"), in_tmp(p, sizeof p, "link")) == 0, "symlink");
	CHECK(fs_mkdir_p(in_tmp(p, sizeof p, "link/b/new"), 0755) == 0, "through a link");
	CHECK(is_dir(in_tmp(q, sizeof q, "a/b/new")), "made through the link");
	CHECK(symlink(in_tmp(q, sizeof q, "nowhere"), in_tmp(p, sizeof p, "dangling")) == 0, "symlink");
	rc = fs_mkdir_p(p, 0755);
	CHECK(rc == -ENOENT, "dangling link: %d (%s)", rc, strerror(-rc));

	if (geteuid() != 0) { /* root may write anywhere */
		CHECK(fs_mkdir_p(in_tmp(p, sizeof p, "locked"), 0555) == 0, "locked folder");
		rc = fs_mkdir_p(in_tmp(p, sizeof p, "locked/inside"), 0755);
		CHECK(rc == -EACCES, "no write permission: %d (%s)", rc, strerror(-rc));
		CHECK(chmod(in_tmp(p, sizeof p, "locked"), 0755) == 0, "unlock");
	}
}

static void test_bad_args(void)
{
	CHECK(fs_mkdir_p("", 0755) == -EINVAL, "empty path");
	CHECK(fs_mkdir_p(NULL, 0755) == -EINVAL, "NULL path");
	CHECK(fs_mkdir_parent("", 0755) == -EINVAL, "empty path (parent)");
	CHECK(fs_mkdir_parent(NULL, 0755) == -EINVAL, "NULL path (parent)");
}

static void test_parent(void)
{
	char p[512], q[512];
	CHECK(fs_mkdir_parent(in_tmp(p, sizeof p, "db/sub/x.db"), 0750) == 0, "parent");
	CHECK(is_dir(in_tmp(q, sizeof q, "db/sub")), "db/sub made");
	CHECK(!exists(p), "the file itself is not made");
	CHECK(fs_mkdir_parent(p, 0750) == 0, "parent again");
	CHECK(fs_mkdir_parent("x.db", 0750) == 0, "no folder part");
	CHECK(fs_mkdir_parent("/x.db", 0750) == 0, "in the root folder");
	make_file(in_tmp(q, sizeof q, "plain"));
	int rc = fs_mkdir_parent(in_tmp(p, sizeof p, "plain/x.db"), 0750);
	CHECK(rc == -ENOTDIR, "parent is a file: %d (%s)", rc, strerror(-rc));
}

/* fs_path_beneath: the text rule for a path that must stay beneath a root. */
static void test_beneath(void)
{
	static const char *const ok[] = {"a", "a/b", "./a", "a//b/", "a..b", "c..", "..c", ".hidden", "a/./b"};
	static const char *const no[] = {"", "/etc/passwd", "..", "../x", "a/..", "a/../b", "a//..//b", "/"};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
		CHECK(fs_path_beneath(ok[i]), "'%s' is beneath", ok[i]);
	for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
		CHECK(!fs_path_beneath(no[i]), "'%s' is not beneath", no[i]);
	CHECK(!fs_path_beneath(NULL), "NULL is not beneath");
}

int main(void)
{
	umask(022);
	const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	snprintf(tmpdir, sizeof tmpdir, "%s/test-fsutil-XXXXXX", base);
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	test_nested();
	test_in_the_way();
	test_bad_args();
	test_parent();
	test_beneath();
	char cmd[512];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	return failures != 0;
}
