/*
 * tboard: TensorBoard event files (see tboard.h).
 */
#include "tboard.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fsutil.h"

#define EVENT_MAX_BYTES 4096 /* one encoded event at most (16 scalars of 64-byte tags fit) */

struct tboard {
	int fd;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint8_t *queue; /* TBOARD_QUEUE_BYTES: framed records waiting (under mu) */
	size_t queued;
	uint8_t *out;   /* TBOARD_QUEUE_BYTES: what the writer thread writes now */
	bool stop;
	int64_t dropped;
	char error[256]; /* the first write error; "" none (under mu) */
};

/* ---- CRC-32C: the bitwise table of the reflected polynomial ---- */

static uint32_t s_table[256];
static pthread_once_t s_table_once = PTHREAD_ONCE_INIT;

static void s_table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		s_table[i] = c;
	}
}

uint32_t tboard_crc32c(const void *data, size_t n)
{
	pthread_once(&s_table_once, s_table_init);
	const uint8_t *p = data;
	uint32_t c = 0xffffffffu;
	for (size_t i = 0; i < n; i++)
		c = s_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
	return c ^ 0xffffffffu;
}

uint32_t tboard_mask(uint32_t crc)
{
	return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---- the protobuf wire format, as much as Event needs ---- */

typedef struct {
	uint8_t *p;
	size_t len, cap;
	bool over;
} s_buf_t;

static void s_bytes(s_buf_t *b, const void *data, size_t n)
{
	if (b->over || n > b->cap - b->len) {
		b->over = true;
		return;
	}
	memcpy(b->p + b->len, data, n);
	b->len += n;
}

static void s_varint(s_buf_t *b, uint64_t v)
{
	uint8_t tmp[10];
	size_t n = 0;
	do {
		tmp[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
	s_bytes(b, tmp, n);
}

/* A field's key: (number << 3) | wire type (0 varint, 1 fixed64, 2
 * length-delimited, 5 fixed32). */
static void s_key(s_buf_t *b, unsigned field, unsigned wire_type)
{
	s_varint(b, (uint64_t)field << 3 | wire_type);
}

static void s_le(s_buf_t *b, uint64_t v, size_t n)
{
	uint8_t tmp[8];
	for (size_t i = 0; i < n; i++)
		tmp[i] = (uint8_t)(v >> (8 * i));
	s_bytes(b, tmp, n);
}

static void s_string(s_buf_t *b, unsigned field, const char *s, size_t n)
{
	s_key(b, field, 2);
	s_varint(b, n);
	s_bytes(b, s, n);
}

/* Summary.Value {tag = 1, simple_value = 2 (float)} into b. */
static void s_value(s_buf_t *b, const char *tag, float value)
{
	uint32_t bits;
	memcpy(&bits, &value, sizeof bits);
	s_string(b, 1, tag, strlen(tag));
	s_key(b, 2, 5);
	s_le(b, bits, 4);
}

size_t tboard_encode_event(uint8_t *buf, size_t cap, double wall_time, int64_t step, const char *file_version,
                           const tboard_scalar_t *v, int n)
{
	if (n < 0 || n > TBOARD_MAX_SCALARS || (n > 0 && !v))
		return 0;
	for (int i = 0; i < n; i++) {
		size_t tl = v[i].tag ? strlen(v[i].tag) : 0;
		if (tl < 1 || tl > TBOARD_MAX_TAG)
			return 0;
	}
	s_buf_t b = {buf, 0, cap, false};
	uint64_t bits;
	memcpy(&bits, &wall_time, sizeof bits);
	s_key(&b, 1, 1); /* Event.wall_time: double */
	s_le(&b, bits, 8);
	if (step != 0) {
		s_key(&b, 2, 0); /* Event.step: int64 (two's complement varint) */
		s_varint(&b, (uint64_t)step);
	}
	if (file_version) {
		s_string(&b, 3, file_version, strlen(file_version)); /* Event.file_version */
		return b.over ? 0 : b.len;
	}
	/* Event.summary = 5, a Summary of one Value (Summary.value = 1) per
	 * scalar; each nested message is encoded first to learn its length */
	uint8_t summary[EVENT_MAX_BYTES], value[TBOARD_MAX_TAG + 32];
	s_buf_t sb = {summary, 0, sizeof summary, false};
	for (int i = 0; i < n; i++) {
		s_buf_t vb = {value, 0, sizeof value, false};
		s_value(&vb, v[i].tag, (float)v[i].value);
		s_key(&sb, 1, 2);
		s_varint(&sb, vb.len);
		s_bytes(&sb, value, vb.len);
	}
	s_key(&b, 5, 2);
	s_varint(&b, sb.len);
	s_bytes(&b, summary, sb.len);
	return b.over || sb.over ? 0 : b.len;
}

void tboard_frame(const uint8_t *payload, size_t n, uint8_t *out)
{
	for (int i = 0; i < 8; i++)
		out[i] = (uint8_t)((uint64_t)n >> (8 * i));
	uint32_t lc = tboard_mask(tboard_crc32c(out, 8));
	for (int i = 0; i < 4; i++)
		out[8 + i] = (uint8_t)(lc >> (8 * i));
	memcpy(out + 12, payload, n);
	uint32_t dc = tboard_mask(tboard_crc32c(payload, n));
	for (int i = 0; i < 4; i++)
		out[12 + n + i] = (uint8_t)(dc >> (8 * i));
}

int tboard_job_dir(const char *spec_dir, const char *tb_root, const char *ckpt_root, const char *job, char *out,
                   size_t len)
{
	const char *root = tb_root ? tb_root : spec_dir ? ckpt_root : NULL;
	if (!root || !root[0])
		return -ENOENT;
	if (!job || !fs_path_beneath(job) || strchr(job, '/') || strcmp(job, ".") == 0 ||
	    (spec_dir && !fs_path_beneath(spec_dir)))
		return -EINVAL;
	int n = spec_dir ? snprintf(out, len, "%s/%s/%s", root, spec_dir, job) : snprintf(out, len, "%s/%s", root, job);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* ---- the file and its writer thread ---- */

static int s_write_all(int fd, const uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static void *s_writer(void *arg)
{
	tboard_t *tb = arg;
	pthread_mutex_lock(&tb->mu);
	for (;;) {
		while (tb->queued == 0 && !tb->stop)
			pthread_cond_wait(&tb->cv, &tb->mu);
		if (tb->queued == 0 && tb->stop)
			break;
		/* take the queue: the trainer goes on filling the other buffer */
		uint8_t *mine = tb->queue;
		size_t n = tb->queued;
		tb->queue = tb->out;
		tb->out = mine;
		tb->queued = 0;
		bool failed = tb->error[0] != '\0';
		pthread_mutex_unlock(&tb->mu);
		int rc = failed ? 0 : s_write_all(tb->fd, mine, n);
		pthread_mutex_lock(&tb->mu);
		if (rc < 0 && !tb->error[0])
			snprintf(tb->error, sizeof tb->error, "%s", strerror(-rc));
		if (rc < 0 || failed) {
			/* count the records lost: each is 16 bytes of framing + its length */
			for (size_t off = 0; off + 16 <= n; tb->dropped++) {
				uint64_t len = 0;
				for (int i = 0; i < 8; i++)
					len |= (uint64_t)mine[off + i] << (8 * i);
				off += 16 + len;
			}
		}
	}
	pthread_mutex_unlock(&tb->mu);
	return NULL;
}

/* Queue one framed record of payload `p` (n bytes); false when full. */
static bool s_enqueue(tboard_t *tb, const uint8_t *p, size_t n)
{
	bool ok;
	pthread_mutex_lock(&tb->mu);
	ok = tb->queued + n + 16 <= TBOARD_QUEUE_BYTES;
	if (ok) {
		tboard_frame(p, n, tb->queue + tb->queued);
		tb->queued += n + 16;
		pthread_cond_signal(&tb->cv);
	} else {
		tb->dropped++;
	}
	pthread_mutex_unlock(&tb->mu);
	return ok;
}

static double s_unix_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

tboard_t *tboard_open(const char *dir, char *ret_path, size_t path_len, char *err, size_t errlen)
{
	static atomic_int s_files;
	int rc = fs_mkdir_p(dir, 0755);
	if (rc < 0) {
		snprintf(err, errlen, "cannot create the TensorBoard folder %s: %s", dir, strerror(-rc));
		return NULL;
	}
	char host[256] = "localhost", path[4096 + 512];
	gethostname(host, sizeof host - 1);
	for (char *h = host; *h; h++)
		if (*h == '/')
			*h = '_';
	double now = s_unix_now();
	snprintf(path, sizeof path, "%s/events.out.tfevents.%lld.%s.%d.%d", dir, (long long)now, host, (int)getpid(),
	         atomic_fetch_add(&s_files, 1));
	tboard_t *tb = calloc(1, sizeof *tb);
	if (!tb || !(tb->queue = malloc(TBOARD_QUEUE_BYTES)) || !(tb->out = malloc(TBOARD_QUEUE_BYTES))) {
		snprintf(err, errlen, "out of memory for the TensorBoard writer");
		goto fail_mem;
	}
	tb->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (tb->fd < 0) {
		snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
		goto fail_mem;
	}
	pthread_mutex_init(&tb->mu, NULL);
	pthread_cond_init(&tb->cv, NULL);
	uint8_t payload[128];
	size_t n = tboard_encode_event(payload, sizeof payload, now, 0, TBOARD_FILE_VERSION, NULL, 0);
	s_enqueue(tb, payload, n);
	if ((rc = pthread_create(&tb->thread, NULL, s_writer, tb)) != 0) {
		snprintf(err, errlen, "cannot start the TensorBoard writer thread: %s", strerror(rc));
		close(tb->fd);
		unlink(path);
		pthread_mutex_destroy(&tb->mu);
		pthread_cond_destroy(&tb->cv);
		goto fail_mem;
	}
	if (ret_path)
		snprintf(ret_path, path_len, "%s", path);
	return tb;
fail_mem:
	if (tb) {
		free(tb->queue);
		free(tb->out);
	}
	free(tb);
	return NULL;
}

void tboard_scalars(tboard_t *tb, int64_t step, double wall_time, const tboard_scalar_t *v, int n)
{
	if (!tb)
		return;
	tboard_scalar_t finite[TBOARD_MAX_SCALARS];
	int k = 0;
	for (int i = 0; i < n && k < TBOARD_MAX_SCALARS; i++)
		if (isfinite(v[i].value))
			finite[k++] = v[i];
	uint8_t payload[EVENT_MAX_BYTES];
	size_t len = tboard_encode_event(payload, sizeof payload, wall_time, step, NULL, finite, k);
	if (len == 0) {
		pthread_mutex_lock(&tb->mu);
		tb->dropped++;
		pthread_mutex_unlock(&tb->mu);
		return;
	}
	s_enqueue(tb, payload, len);
}

int64_t tboard_close(tboard_t *tb, char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = '\0';
	if (!tb)
		return 0;
	pthread_mutex_lock(&tb->mu);
	tb->stop = true;
	pthread_cond_signal(&tb->cv);
	pthread_mutex_unlock(&tb->mu);
	pthread_join(tb->thread, NULL);
	int64_t dropped = tb->dropped;
	if (err && errlen)
		snprintf(err, errlen, "%s", tb->error);
	close(tb->fd);
	pthread_mutex_destroy(&tb->mu);
	pthread_cond_destroy(&tb->cv);
	free(tb->queue);
	free(tb->out);
	free(tb);
	return dropped;
}

tboard_t *tboard_open_job(const char *spec_dir, const char *tb_root, const char *ckpt_root, const char *job,
                          FILE *log)
{
	char dir[4096 + 600], path[sizeof dir + 300], err[sizeof path + 200];
	int rc = tboard_job_dir(spec_dir, tb_root, ckpt_root, job, dir, sizeof dir);
	if (rc == -ENOENT && spec_dir)
		fprintf(log, "ringworker rank: warning: no TensorBoard files: the spec asks for tensorboard.dir"
		        " '%.200s' but the agent has neither --tensorboard-root nor --checkpoint-root\n", spec_dir);
	else if (rc < 0 && rc != -ENOENT)
		fprintf(log, "ringworker rank: warning: no TensorBoard files: %s\n", strerror(-rc));
	if (rc < 0)
		return NULL;
	tboard_t *tb = tboard_open(dir, path, sizeof path, err, sizeof err);
	if (tb)
		fprintf(log, "ringworker rank: TensorBoard events go to %s\n", path);
	else
		fprintf(log, "ringworker rank: warning: no TensorBoard files: %s\n", err);
	return tb;
}

void tboard_close_job(tboard_t *tb, FILE *log)
{
	char err[256];
	int64_t dropped = tboard_close(tb, err, sizeof err);
	if (dropped > 0)
		fprintf(log, "ringworker rank: warning: %lld TensorBoard events not written (%s)\n", (long long)dropped,
		        err[0] ? err : "the disk was slower than the steps");
}
