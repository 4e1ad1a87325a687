/*
 * data: memory-mapped token sources (nanoGPT, llm.c, text), the seeded
 * window order, and the split of global batches over ranks. See data.h for
 * the sampling contract.
 */
#include "data.h"

#include "beneath.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
	char *path;
	const uint8_t *map;    /* whole file, or NULL for an empty one */
	size_t map_bytes;
	const uint8_t *tokens; /* first token byte inside map */
	uint64_t n_tokens;
	uint64_t first;        /* index of its first token in the stream */
	int token_bytes;       /* 1 text, 2 uint16 (nanogpt, llmc version 1), 4 uint32 (uint32, llmc version 2) */
} data_file_t;

struct data_source {
	data_format_t format;
	size_t n_files;
	data_file_t *files;
	uint64_t n_tokens;
};

static int s_fail(char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int s_fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

const char *data_format_name(data_format_t f)
{
	switch (f) {
	case DATA_FORMAT_NANOGPT: return "nanogpt";
	case DATA_FORMAT_LLMC: return "llmc";
	case DATA_FORMAT_TEXT: return "text";
	case DATA_FORMAT_UINT32: return "uint32";
	}
	return "invalid";
}

static uint32_t s_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static bool s_has_glob_chars(const char *s)
{
	return strpbrk(s, "*?[") != NULL;
}

/* Why a path was refused, as a phrase. */
static const char *s_open_error(int e)
{
	switch (e) {
	case EXDEV:
		return "it leaves the data root (an absolute path, a '..' component or a symbolic"
		       " link that points outside): give a path inside the agent's --data-root";
	case ELOOP:
		return "too many symbolic links, or a link into /proc";
	default:
		return strerror(e);
	}
}

/* Map one file and check its header and size. Fills f->map, tokens, n_tokens.
 * f->path is relative to `root` (NULL: as given). Messages name the path as
 * the spec gives it and say what is wrong, never what the bytes are. */
static int s_map_file(data_file_t *f, const char *root, data_format_t format, const char *field,
                      char *err, size_t errlen)
{
	int fd = -1;
	int orc = beneath_open(root, f->path, O_RDONLY | O_NONBLOCK, &fd);
	if (orc < 0)
		return s_fail(err, errlen, orc == -EXDEV || orc == -ELOOP ? -EXDEV : orc,
			      "%s: cannot open '%s': %s", field, f->path, s_open_error(-orc));
	errno = 0;
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		int e = errno;
		if (e == 0)
			e = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
		close(fd);
		return s_fail(err, errlen, -e, "%s: cannot read '%s': %s", field, f->path, strerror(e));
	}
	size_t size = (size_t)st.st_size;
	if (size > 0) {
		void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (p == MAP_FAILED) {
			int e = errno;
			close(fd);
			return s_fail(err, errlen, e == ENOMEM ? -ENOMEM : -e, "%s: cannot map '%s': %s",
				      field, f->path, strerror(e));
		}
		madvise(p, size, MADV_RANDOM);
		f->map = p;
		f->map_bytes = size;
	}
	close(fd);

	switch (format) {
	case DATA_FORMAT_TEXT:
		f->tokens = f->map;
		f->n_tokens = size;
		f->token_bytes = 1;
		return 0;
	case DATA_FORMAT_NANOGPT:
	case DATA_FORMAT_UINT32: {
		const int w = format == DATA_FORMAT_UINT32 ? 4 : 2;
		if (size % (size_t)w != 0)
			return s_fail(err, errlen, -EINVAL,
				      "%s: '%s' is truncated: %zu bytes is not a whole number of uint%d tokens",
				      field, f->path, size, 8 * w);
		f->tokens = f->map;
		f->n_tokens = size / (size_t)w;
		f->token_bytes = w;
		return 0;
	}
	case DATA_FORMAT_LLMC: {
		if (size < DATA_LLMC_HEADER_BYTES)
			return s_fail(err, errlen, -EINVAL,
				      "%s: '%s' is too short for an llm.c shard header (%zu bytes, needs %d)",
				      field, f->path, size, DATA_LLMC_HEADER_BYTES);
		uint32_t magic = s_le32(f->map), version = s_le32(f->map + 4);
		int32_t count = (int32_t)s_le32(f->map + 8);
		/* Neither the magic nor the version is printed: the file may not
		 * be a shard at all, and its first bytes are its contents. */
		if (magic != DATA_LLMC_MAGIC)
			return s_fail(err, errlen, -EINVAL,
				      "%s: '%s' does not start with the llm.c shard magic (%d): not an"
				      " llm.c shard (for flat uint16 tokens use data.format \"nanogpt\")",
				      field, f->path, DATA_LLMC_MAGIC);
		/* the version is llm.c's token width: 1 uint16 (GPT-2), 2 uint32 (Llama 3) */
		if (version != DATA_LLMC_VERSION && version != DATA_LLMC_VERSION_UINT32)
			return s_fail(err, errlen, -EINVAL,
				      "%s: '%s' has an llm.c shard version other than %d (uint16 tokens) and"
				      " %d (uint32 tokens), the ones this reader supports", field, f->path,
				      DATA_LLMC_VERSION, DATA_LLMC_VERSION_UINT32);
		f->token_bytes = version == DATA_LLMC_VERSION_UINT32 ? 4 : 2;
		if (count < 0)
			return s_fail(err, errlen, -EINVAL,
				      "%s: '%s' is corrupt: its header's token count is negative", field,
				      f->path);
		uint64_t want = DATA_LLMC_HEADER_BYTES + (uint64_t)f->token_bytes * (uint64_t)count;
		if (want != size)
			return s_fail(err, errlen, -EINVAL,
				      "%s: '%s' is corrupt or truncated: its header says %" PRId32
				      " tokens (%" PRIu64 " bytes) but the file has %zu bytes",
				      field, f->path, count, want, size);
		f->tokens = f->map + DATA_LLMC_HEADER_BYTES;
		f->n_tokens = (uint64_t)count;
		return 0;
	}
	}
	return s_fail(err, errlen, -EINVAL, "%s: unknown data format %d", field, (int)format);
}

/* Linear scan: every token id must be < vocab_size. */
/* Token i of a mapped file (little-endian, the file's width). */
static uint32_t s_token(const data_file_t *f, uint64_t i)
{
	const uint8_t *p = f->tokens + (size_t)f->token_bytes * i;
	switch (f->token_bytes) {
	case 1: return p[0];
	case 2: return (uint32_t)p[0] | (uint32_t)p[1] << 8;
	default: return s_le32(p);
	}
}

/* Linear scan: every token id must be < vocab_size. */
static int s_check_tokens(const data_file_t *f, int vocab_size, const char *field, char *err,
                          size_t errlen)
{
	size_t header = (size_t)(f->tokens - f->map);
	if (f->token_bytes == 1 && vocab_size >= 256)
		return 0;
	if (f->token_bytes == 2 && vocab_size >= 65536)
		return 0;
	for (uint64_t i = 0; i < f->n_tokens; i++) {
		uint32_t t = s_token(f, i);
		if (t < (uint32_t)vocab_size)
			continue;
		if (f->token_bytes == 1)
			return s_fail(err, errlen, -EINVAL,
				      "%s: '%s' has a byte at offset %" PRIu64
				      " that is not below model.vocab_size (%d)",
				      field, f->path, i, vocab_size);
		return s_fail(err, errlen, -EINVAL,
			      "%s: '%s' has a token id at byte offset %" PRIu64
			      " (token %" PRIu64 ") that is not below model.vocab_size (%d)",
			      field, f->path, header + (uint64_t)f->token_bytes * i, i, vocab_size);
	}
	return 0;
}

static int s_cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* `s` with glob(3)'s special characters escaped (a root folder's name is
 * taken literally). malloc'ed, NULL when out of memory. */
static char *s_glob_escape(const char *s)
{
	char *out = malloc(2 * strlen(s) + 1), *o = out;
	if (!out)
		return NULL;
	for (; *s; s++) {
		if (strchr("*?[]\\", *s))
			*o++ = '\\';
		*o++ = *s;
	}
	*o = '\0';
	return out;
}

/* The folders of `pattern` before its first component with a wildcard,
 * opened beneath `root`: 0, or beneath_open's error. */
static int s_check_prefix(const char *root, const char *pattern)
{
	char prefix[4096];
	size_t end = 0; /* bytes of the components without wildcards */
	for (size_t i = 0; pattern[i];) {
		size_t n = strcspn(pattern + i, "/");
		if (memchr(pattern + i, '*', n) || memchr(pattern + i, '?', n) || memchr(pattern + i, '[', n))
			break;
		i += n;
		if (!pattern[i])
			break; /* the last component has no wildcard: no folder to check */
		end = i;
		while (pattern[i] == '/')
			i++;
	}
	if (end == 0)
		return 0;
	if (end >= sizeof prefix)
		return -ENAMETOOLONG;
	memcpy(prefix, pattern, end);
	prefix[end] = '\0';
	int fd = -1;
	int rc = beneath_open(root, prefix, O_PATH | O_DIRECTORY, &fd);
	if (fd >= 0)
		close(fd);
	return rc;
}

/* Expand `pattern` beneath `root` (NULL: as given) into *g; the matches are
 * made relative to the root again. 0 or a data error in err. */
static int s_expand(const char *root, const char *pattern, const char *field, glob_t *g,
                    char *err, size_t errlen)
{
	char *full = NULL;
	size_t skip = 0;
	if (root) {
		if (!beneath_path_ok(pattern))
			return s_fail(err, errlen, -EXDEV,
				      "%s: the pattern '%s' leaves the data root (an absolute path or a"
				      " '..' component): give a pattern inside the agent's --data-root",
				      field, pattern);
		/* The folders before the first wildcard must resolve beneath the
		 * root before glob(3) lists anything: "etc/pass*" through a link
		 * to /etc is refused without looking into /etc (so the answer
		 * does not tell whether a file there matches). */
		int prc = s_check_prefix(root, pattern);
		if (prc < 0)
			return s_fail(err, errlen, prc == -EXDEV || prc == -ELOOP ? -EXDEV : prc,
				      "%s: the pattern '%s' %s", field, pattern,
				      prc == -EXDEV || prc == -ELOOP
					      ? "leaves the data root through a symbolic link: give a pattern"
						" inside the agent's --data-root"
					      : "names a folder that cannot be opened");
		char *esc = s_glob_escape(root);
		size_t n = esc ? strlen(esc) + strlen(pattern) + 2 : 0;
		full = esc ? malloc(n) : NULL;
		if (!full) {
			free(esc);
			return s_fail(err, errlen, -ENOMEM, "%s: out of memory", field);
		}
		snprintf(full, n, "%s/%s", esc, pattern);
		free(esc);
		skip = strlen(root) + 1; /* each match starts with the root's name and '/' */
	}
	int grc = glob(full ? full : pattern, GLOB_ERR, NULL, g);
	free(full);
	if (grc == GLOB_NOMATCH || (grc == 0 && g->gl_pathc == 0))
		return s_fail(err, errlen, -ENOENT, "%s: no file matches the pattern '%s'", field,
			      pattern);
	if (grc == GLOB_NOSPACE)
		return s_fail(err, errlen, -ENOMEM, "%s: out of memory expanding '%s'", field, pattern);
	if (grc != 0)
		return s_fail(err, errlen, -EIO, "%s: cannot read the directories of '%s'", field,
			      pattern);
	for (size_t i = 0; i < g->gl_pathc; i++) {
		char *m = g->gl_pathv[i];
		if (strlen(m) < skip)
			return s_fail(err, errlen, -EIO, "%s: cannot expand '%s'", field, pattern);
		memmove(m, m + skip, strlen(m + skip) + 1);
	}
	/* glob sorts by the locale's collation; sort bytewise so the order is
	 * the same everywhere. */
	qsort(g->gl_pathv, g->gl_pathc, sizeof *g->gl_pathv, s_cmp_str);
	return 0;
}

int data_source_open(const char *root, const char *pattern, data_format_t format, int vocab_size,
                     const char *field, data_source_t **ret_src, char *err, size_t errlen)
{
	if (!field)
		field = "data";
	data_source_t *src = calloc(1, sizeof *src);
	if (!src)
		return s_fail(err, errlen, -ENOMEM, "%s: out of memory", field);
	src->format = format;

	int rc = 0;
	glob_t g = {0};
	bool globbed = false;
	char **paths = NULL;
	size_t n_paths = 0;

	if (s_has_glob_chars(pattern)) {
		globbed = true;
		rc = s_expand(root, pattern, field, &g, err, errlen);
		if (rc < 0)
			goto fail;
		paths = g.gl_pathv;
		n_paths = g.gl_pathc;
	} else {
		paths = (char **)&pattern;
		n_paths = 1;
	}

	src->files = calloc(n_paths, sizeof *src->files);
	if (!src->files) {
		rc = s_fail(err, errlen, -ENOMEM, "%s: out of memory", field);
		goto fail;
	}
	for (size_t i = 0; i < n_paths; i++) {
		data_file_t *f = &src->files[i];
		f->path = strdup(paths[i]);
		if (!f->path) {
			rc = s_fail(err, errlen, -ENOMEM, "%s: out of memory", field);
			goto fail;
		}
		src->n_files++;
		rc = s_map_file(f, root, format, field, err, errlen);
		if (rc == -EXDEV && globbed) /* never name a match outside the root */
			rc = s_fail(err, errlen, -EXDEV,
				    "%s: a match of the pattern '%s' leaves the data root through a"
				    " symbolic link: give a pattern inside the agent's --data-root",
				    field, pattern);
		if (rc < 0)
			goto fail;
		rc = s_check_tokens(f, vocab_size, field, err, errlen);
		if (rc < 0)
			goto fail;
		f->first = src->n_tokens;
		src->n_tokens += f->n_tokens;
	}
	if (globbed)
		globfree(&g);
	*ret_src = src;
	return 0;

fail:
	if (globbed)
		globfree(&g);
	data_source_free(src);
	return rc;
}

void data_source_free(data_source_t *src)
{
	if (!src)
		return;
	for (size_t i = 0; i < src->n_files; i++) {
		if (src->files[i].map)
			munmap((void *)src->files[i].map, src->files[i].map_bytes);
		free(src->files[i].path);
	}
	free(src->files);
	free(src);
}

uint64_t data_source_num_tokens(const data_source_t *src)
{
	return src->n_tokens;
}

size_t data_source_num_files(const data_source_t *src)
{
	return src->n_files;
}

const char *data_source_file(const data_source_t *src, size_t i)
{
	return i < src->n_files ? src->files[i].path : NULL;
}

/* The file holding stream token `pos` (binary search on first). */
static size_t s_file_of(const data_source_t *src, uint64_t pos)
{
	size_t lo = 0, hi = src->n_files; /* answer in [lo, hi) */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (src->files[mid].first <= pos)
			lo = mid;
		else
			hi = mid;
	}
	/* Skip empty files that share `first` with the next one. */
	while (lo + 1 < src->n_files && src->files[lo].n_tokens == 0)
		lo++;
	return lo;
}

void data_source_read(const data_source_t *src, uint64_t pos, size_t n, int32_t *out)
{
	size_t fi = s_file_of(src, pos);
	while (n > 0) {
		const data_file_t *f = &src->files[fi];
		uint64_t off = pos - f->first;
		uint64_t avail = f->n_tokens > off ? f->n_tokens - off : 0;
		size_t take = avail < n ? (size_t)avail : n;
		if (f->token_bytes == 1) {
			for (size_t i = 0; i < take; i++)
				out[i] = f->tokens[off + i];
		} else if (f->token_bytes == 2) {
			const uint8_t *p = f->tokens + 2 * off;
			for (size_t i = 0; i < take; i++)
				out[i] = (int32_t)((unsigned)p[2 * i] | (unsigned)p[2 * i + 1] << 8);
		} else { /* checked below vocab_size <= JOBSPEC_MAX_VOCAB: fits int32 */
			for (size_t i = 0; i < take; i++)
				out[i] = (int32_t)s_token(f, off + i);
		}
		out += take;
		pos += take;
		n -= take;
		fi++;
	}
}

/* SplitMix64's finaliser: a good 64-bit mixer. */
static uint64_t s_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

#define FEISTEL_ROUNDS 6

uint64_t data_permute(uint64_t i, uint64_t n, uint64_t key)
{
	if (n <= 1)
		return 0;
	/* half: bits per half, so the domain 4^half >= n. */
	int half = 1;
	while (half < 32 && ((uint64_t)1 << (2 * half)) < n)
		half++;
	const uint64_t mask = ((uint64_t)1 << half) - 1;
	uint64_t k[FEISTEL_ROUNDS];
	for (int r = 0; r < FEISTEL_ROUNDS; r++)
		k[r] = s_mix(key ^ s_mix((uint64_t)r + 1));
	uint64_t x = i;
	do {
		uint64_t left = x >> half, right = x & mask;
		for (int r = 0; r < FEISTEL_ROUNDS; r++) {
			uint64_t t = left ^ (s_mix(right ^ k[r]) & mask);
			left = right;
			right = t;
		}
		x = left << half | right;
	} while (x >= n); /* cycle-walk: a bijection on the domain stays one on [0, n) */
	return x;
}

int data_sampler_init(data_sampler_t *s, const data_source_t *src, int T, uint64_t seed,
                      const char *field, char *err, size_t errlen)
{
	uint64_t n = data_source_num_tokens(src);
	if (T < 1 || n < (uint64_t)T + 1)
		return s_fail(err, errlen, -EINVAL,
			      "model.seq_len (%d) is longer than the data: %s has %" PRIu64
			      " tokens, needs at least %d (seq_len + 1)",
			      T, field ? field : "data", n, T + 1);
	s->src = src;
	s->T = T;
	s->seed = seed;
	s->n_windows = (n - 1) / (uint64_t)T;
	return 0;
}

uint64_t data_sampler_window(const data_sampler_t *s, uint64_t index)
{
	uint64_t epoch = index / s->n_windows;
	uint64_t key = s_mix(s_mix(s->seed) ^ epoch);
	return data_permute(index % s->n_windows, s->n_windows, key);
}

static void s_window_get(const data_sampler_t *s, uint64_t w, int32_t *inputs, int32_t *targets)
{
	uint64_t pos = w * (uint64_t)s->T;
	data_source_read(s->src, pos, (size_t)s->T, inputs);
	/* targets are the inputs shifted by one: reuse, then read the last token */
	memcpy(targets, inputs + 1, (size_t)(s->T - 1) * sizeof *targets);
	data_source_read(s->src, pos + (uint64_t)s->T, 1, targets + s->T - 1);
}

void data_sampler_get(const data_sampler_t *s, uint64_t index, int32_t *inputs, int32_t *targets)
{
	s_window_get(s, data_sampler_window(s, index), inputs, targets);
}

uint64_t data_global_batch_size(const data_layout_t *l)
{
	return (uint64_t)l->batch_size * (uint64_t)l->grad_accum * (uint64_t)l->world_size;
}

uint64_t data_sample_index(const data_layout_t *l, uint64_t g, int k, int b)
{
	uint64_t local = (uint64_t)k * (uint64_t)l->batch_size + (uint64_t)b;
	return g * data_global_batch_size(l) + local * (uint64_t)l->world_size + (uint64_t)l->rank;
}

void data_loader_init(data_loader_t *l, const data_sampler_t *sampler, const data_layout_t *layout)
{
	l->sampler = *sampler;
	l->layout = *layout;
	l->cursor = 0;
}

void data_loader_micro_batch(const data_loader_t *l, int k, int32_t *inputs, int32_t *targets)
{
	const data_layout_t *lay = &l->layout;
	const size_t T = (size_t)l->sampler.T;
	for (int b = 0; b < lay->batch_size; b++) {
		uint64_t local = (uint64_t)k * (uint64_t)lay->batch_size + (uint64_t)b;
		uint64_t idx = l->cursor + local * (uint64_t)lay->world_size + (uint64_t)lay->rank;
		data_sampler_get(&l->sampler, idx, inputs + (size_t)b * T, targets + (size_t)b * T);
	}
}

void data_loader_advance(data_loader_t *l)
{
	l->cursor += data_global_batch_size(&l->layout);
}

uint64_t data_loader_cursor(const data_loader_t *l)
{
	return l->cursor;
}

void data_loader_seek(data_loader_t *l, uint64_t cursor)
{
	l->cursor = cursor;
}

void data_val_batch(const data_sampler_t *val, int n_batches, int B, int k, int32_t *inputs,
                    int32_t *targets)
{
	const uint64_t rows = (uint64_t)n_batches * (uint64_t)B;
	const size_t T = (size_t)val->T;
	for (int b = 0; b < B; b++) {
		uint64_t j = (uint64_t)k * (uint64_t)B + (uint64_t)b;
		uint64_t w;
		if (rows <= val->n_windows) {
			/* floor(j * n_windows / rows) without overflowing: j < rows */
			w = j * (val->n_windows / rows) + j * (val->n_windows % rows) / rows;
		} else {
			w = j % val->n_windows;
		}
		s_window_get(val, w, inputs + (size_t)b * T, targets + (size_t)b * T);
	}
}
