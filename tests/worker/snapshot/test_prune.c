/*
 * test_prune: the folder side of retention the trainer and the rank use
 * (api/snapshot.c's snap_list_steps and snap_prune), on real folders:
 * listing sees committed `step-N` folders only (not `.tmp`, `.deleting`,
 * non-canonical names or files); pruning keeps the keep_last newest and the
 * multiples of keep_every, deletes the rest, reports what it deleted (at
 * most max_deleted of them, and says how many it listed), and finishes an
 * interrupted delete.
 */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "snapshot.h"

static char base[256];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static void make_dir(const char *name)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", base, name);
	CHECK(mkdir(path, 0755) == 0, "mkdir");
	char file[600];
	snprintf(file, sizeof file, "%s/manifest.json", path);
	FILE *f = fopen(file, "w");
	CHECK(f != NULL, "a file inside");
	if (f)
		fclose(f);
}

static bool exists(const char *name)
{
	char path[512];
	struct stat st;
	snprintf(path, sizeof path, "%s/%s", base, name);
	return stat(path, &st) == 0;
}

static int cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

int main(void)
{
	const char *tmpdir = getenv("TMPDIR");
	snprintf(base, sizeof base, "%s/test-prune-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	char name[SNAP_DIRNAME_MAX], err[512];
	const int64_t steps[] = {10, 20, 30, 40, 50, 60};
	for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
		make_dir(snap_step_dirname(steps[i], name, sizeof name));
	char odd[64];
	snprintf(odd, sizeof odd, "%s.tmp", snap_step_dirname(70, name, sizeof name));
	make_dir(odd);
	snprintf(odd, sizeof odd, "%s.deleting", snap_step_dirname(5, name, sizeof name));
	make_dir(odd);
	make_dir("step-7"); /* not snap_step_dirname's form: never ours */
	make_dir("other");

	int64_t *listed = NULL;
	int n = snap_list_steps(base, &listed, err, sizeof err);
	CHECK(n == 6, "six committed folders listed");
	if (n == 6) {
		qsort(listed, 6, sizeof *listed, cmp);
		CHECK(memcmp(listed, steps, sizeof steps) == 0, "their steps");
	}
	free(listed);

	/* keep the 2 newest and multiples of 20; max_deleted 1 lists one only */
	int64_t deleted[4] = {0};
	int got = snap_prune(base, 2, 20, deleted, 1, err, sizeof err);
	CHECK(got == 1, "two deleted (10 and 30), one listed: %d", got);
	CHECK(deleted[0] == 10 || deleted[0] == 30, "the one listed is one of them");
	CHECK(!exists(snap_step_dirname(10, name, sizeof name)), "step 10 gone");
	CHECK(!exists(snap_step_dirname(30, name, sizeof name)), "step 30 gone");
	CHECK(exists(snap_step_dirname(20, name, sizeof name)), "step 20 kept (keep_every)");
	CHECK(exists(snap_step_dirname(40, name, sizeof name)), "step 40 kept (keep_every)");
	CHECK(exists(snap_step_dirname(50, name, sizeof name)), "step 50 kept (newest)");
	CHECK(exists(snap_step_dirname(60, name, sizeof name)), "step 60 kept (newest)");
	snprintf(odd, sizeof odd, "%s.deleting", snap_step_dirname(5, name, sizeof name));
	CHECK(!exists(odd), "the interrupted delete finished");
	snprintf(odd, sizeof odd, "%s.tmp", snap_step_dirname(70, name, sizeof name));
	CHECK(exists(odd), "a .tmp folder is not touched");
	CHECK(exists("step-7") && exists("other"), "foreign folders are not touched");

	got = snap_prune(base, 2, 20, deleted, 4, err, sizeof err);
	CHECK(got == 0, "nothing more to delete");
	make_dir(snap_step_dirname(70, name, sizeof name));
	make_dir(snap_step_dirname(80, name, sizeof name));
	got = snap_prune(base, 2, 0, deleted, 4, err, sizeof err);
	CHECK(got == 4, "keep_last 2 alone: 20, 40, 50, 60 deleted: %d", got);
	qsort(deleted, 4, sizeof *deleted, cmp);
	CHECK(deleted[0] == 20 && deleted[1] == 40 && deleted[2] == 50 && deleted[3] == 60,
	      "and listed");

	char missing[300];
	snprintf(missing, sizeof missing, "%s/no-such-job", base);
	n = snap_list_steps(missing, &listed, err, sizeof err);
	CHECK(n == -ENOENT && strstr(err, "no-such-job") != NULL, "a missing folder: -ENOENT naming it");
	CHECK(snap_prune(missing, 1, 0, deleted, 4, err, sizeof err) == -ENOENT, "prune: -ENOENT");

	if (failures == 0)
		nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	else
		fprintf(stderr, "test files kept in %s\n", base);
	printf("%s: %d failure(s)\n", failures ? "FAIL" : "ok", failures);
	return failures != 0;
}
