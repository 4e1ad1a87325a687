/*
 * Replays inputs through LLVMFuzzerTestOneInput without libFuzzer, so that
 * the corpus runs in `meson test` with any compiler. Arguments are files or
 * directories (their regular files, in name order). Each input is copied to
 * a buffer of exactly its size so that AddressSanitizer sees any overread.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int s_replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return -1;
	}
	size_t cap = 4096, len = 0;
	uint8_t *buf = malloc(cap);
	for (;;) {
		if (len == cap) {
			cap *= 2;
			uint8_t *nbuf = realloc(buf, cap);
			if (!nbuf) {
				free(buf);
				fclose(f);
				return -1;
			}
			buf = nbuf;
		}
		size_t n = fread(buf + len, 1, cap - len, f);
		if (n == 0)
			break;
		len += n;
	}
	int bad = ferror(f);
	fclose(f);
	if (bad) {
		fprintf(stderr, "%s: read error\n", path);
		free(buf);
		return -1;
	}
	uint8_t *exact = malloc(len ? len : 1);
	if (len)
		memcpy(exact, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(exact, len);
	free(exact);
	return 0;
}

static int s_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int s_replay_dir(const char *dir, int *n_inputs)
{
	DIR *d = opendir(dir);
	if (!d) {
		perror(dir);
		return -1;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			names = realloc(names, cap * sizeof(*names));
		}
		names[n++] = strdup(e->d_name);
	}
	closedir(d);
	if (n)
		qsort(names, n, sizeof(*names), s_cmp);
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		char path[4096];
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
			if (s_replay_file(path) < 0)
				rc = -1;
			else
				(*n_inputs)++;
		}
		free(names[i]);
	}
	free(names);
	return rc;
}

int main(int argc, char **argv)
{
	int n_inputs = 0, rc = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) < 0) {
			perror(argv[i]);
			rc = 1;
		} else if (S_ISDIR(st.st_mode)) {
			if (s_replay_dir(argv[i], &n_inputs) < 0)
				rc = 1;
		} else if (s_replay_file(argv[i]) < 0) {
			rc = 1;
		} else {
			n_inputs++;
		}
	}
	printf("replayed %d inputs\n", n_inputs);
	if (n_inputs == 0)
		rc = 1;
	return rc;
}
