/*
 * curve: the broker's key pair and its ZAP handler (see curve.h).
 */
#include "curve.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include "clock.h"
#include "log.h"
#include "store_keys.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define REFUSAL_SLOTS 64
#define REFUSAL_EVERY_US (60LL * 1000 * 1000)
#define REFUSAL_LINES_PER_MINUTE 60 /* in all: a peer making new keys cannot flood the log */

struct curve {
	void *zap;
	store_t *st;
};

/* ---- the key pair ---- */

/* Read a 40-character Z85 key from `path` (surrounding whitespace allowed).
 * `secret`: the file must not be readable by group or others. */
static int read_key(const char *path, bool secret, char out[CURVE_Z85_BYTES], char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat sb;
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		snprintf(err, errlen, "%s is not a regular file", path);
		return -EINVAL;
	}
	if (secret && (sb.st_mode & 077)) {
		close(fd);
		snprintf(err, errlen, "%s is readable by other users (mode %04o): chmod 600 it, or delete it to "
		         "make a new key pair (every agent must then enroll again)", path, (unsigned)(sb.st_mode & 07777));
		return -EPERM;
	}
	char buf[128];
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n < 0) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
		return -EIO;
	}
	buf[n] = '\0';
	char *s = buf;
	while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')
		s++;
	size_t len = strcspn(s, " \n\t\r");
	uint8_t raw[32];
	if (len != 40 || (s[40] = '\0', !zmq_z85_decode(raw, s))) {
		snprintf(err, errlen, "%s does not hold a Z85 CURVE key (40 characters)", path);
		return -EINVAL;
	}
	memcpy(out, s, CURVE_Z85_BYTES);
	return 0;
}

/* Write `key` and a newline to a new file `path` with `mode`. */
static int write_key(const char *path, const char *key, mode_t mode, char *err, size_t errlen)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot create %s: %s", path, strerror(e));
		return -e;
	}
	char line[CURVE_Z85_BYTES + 1];
	int n = snprintf(line, sizeof line, "%s\n", key);
	bool ok = write(fd, line, (size_t)n) == n && fsync(fd) == 0;
	int e = errno;
	close(fd);
	if (!ok) {
		unlink(path);
		snprintf(err, errlen, "cannot write %s: %s", path, strerror(e));
		return -e;
	}
	return 0;
}

int curve_broker_keys(const char *db_path, char ret_public[CURVE_Z85_BYTES],
                      char ret_secret[CURVE_Z85_BYTES], char *err, size_t errlen)
{
	char dir[4096], key_path[4200], pub_path[4200];
	snprintf(dir, sizeof dir, "%s", db_path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*(slash == dir ? slash + 1 : slash) = '\0';
	else
		snprintf(dir, sizeof dir, ".");
	snprintf(key_path, sizeof key_path, "%s/broker.key", dir);
	snprintf(pub_path, sizeof pub_path, "%s/broker.pub", dir);

	char pub[CURVE_Z85_BYTES], sec[CURVE_Z85_BYTES];
	int r = read_key(key_path, true, sec, err, errlen);
	if (r == -ENOENT) {
		if (zmq_curve_keypair(pub, sec) != 0) {
			snprintf(err, errlen, "cannot make a CURVE key pair: %s (is libzmq built with curve?)",
			         zmq_strerror(zmq_errno()));
			return -ENOTSUP;
		}
		unlink(pub_path); /* a stale public key of no secret */
		r = write_key(key_path, sec, 0600, err, errlen);
		if (r < 0)
			return r;
		log_info("broker: created the broker's CURVE key pair %s (secret, 0600) and %s", key_path, pub_path);
	} else if (r < 0) {
		if (!err[0])
			snprintf(err, errlen, "cannot open %s: %s", key_path, strerror(-r));
		return r;
	}
	if (zmq_curve_public(pub, sec) != 0) {
		snprintf(err, errlen, "%s: cannot derive the public key: %s", key_path, zmq_strerror(zmq_errno()));
		return -EINVAL;
	}
	char stored[CURVE_Z85_BYTES];
	char perr[256] = "";
	r = read_key(pub_path, false, stored, perr, sizeof perr);
	if (r == 0 && strcmp(stored, pub) != 0) {
		log_warn("broker: %s does not match broker.key: written again", pub_path);
		unlink(pub_path);
		r = -ENOENT;
	}
	if (r == -ENOENT && write_key(pub_path, pub, 0644, err, errlen) < 0)
		return -EIO;
	memcpy(ret_public, pub, CURVE_Z85_BYTES);
	memcpy(ret_secret, sec, CURVE_Z85_BYTES);
	return 0;
}

int curve_server_setup(void *router, const char *secret)
{
	int one = 1;
	if (zmq_setsockopt(router, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
	    zmq_setsockopt(router, ZMQ_CURVE_SECRETKEY, secret, 40) != 0)
		return -zmq_errno();
	/* every handshake goes through the ZAP handler (no silent admission) */
	if (zmq_setsockopt(router, ZMQ_ZAP_DOMAIN, "ringmaster", 10) != 0)
		return -zmq_errno();
	return 0;
}

/* ---- refusals, rate-limited ---- */

typedef struct {
	char who[64];
	int64_t last_us;
} refusal_t;

static refusal_t s_refusals[REFUSAL_SLOTS];
static int64_t s_window_us; /* the current minute of the overall cap */
static int s_window_lines, s_suppressed;

void curve_log_refusal(const char *who, const char *fmt, ...)
{
	int64_t now = clock_mono_us();
	refusal_t *slot = NULL, *oldest = &s_refusals[0];
	for (int i = 0; i < REFUSAL_SLOTS; i++) {
		if (strncmp(s_refusals[i].who, who, sizeof s_refusals[i].who - 1) == 0 && s_refusals[i].who[0]) {
			slot = &s_refusals[i];
			break;
		}
		if (s_refusals[i].last_us < oldest->last_us)
			oldest = &s_refusals[i];
	}
	if (slot && now - slot->last_us < REFUSAL_EVERY_US)
		return;
	if (!slot) {
		slot = oldest;
		snprintf(slot->who, sizeof slot->who, "%s", who);
	}
	slot->last_us = now;
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	log_warn("broker auth: %s", line);
}

/* Whether a refusal of a key nobody enrolled may be logged: at most
 * REFUSAL_LINES_PER_MINUTE a minute in all, since such a peer can make a
 * new key for every connection; one line then counts the rest. */
static bool unknown_budget(void)
{
	int64_t now = clock_mono_us();
	if (now - s_window_us >= REFUSAL_EVERY_US) {
		if (s_suppressed)
			log_warn("broker auth: %d more refusal(s) of unknown keys in the last minute were not logged",
			         s_suppressed);
		s_window_us = now;
		s_window_lines = s_suppressed = 0;
	}
	if (++s_window_lines > REFUSAL_LINES_PER_MINUTE) {
		s_suppressed++;
		return false;
	}
	return true;
}

/* ---- ZAP (RFC 27) ---- */

curve_t *curve_new(void *zctx, store_t *st, char *err, size_t errlen)
{
	curve_t *c = calloc(1, sizeof *c);
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	c->st = st;
	c->zap = zmq_socket(zctx, ZMQ_REP);
	int linger = 0;
	if (!c->zap || zmq_setsockopt(c->zap, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
	    zmq_bind(c->zap, ZAP_ENDPOINT) != 0) {
		snprintf(err, errlen, "cannot bind the ZAP handler on %s: %s", ZAP_ENDPOINT, zmq_strerror(zmq_errno()));
		curve_free(c);
		return NULL;
	}
	return c;
}

void curve_free(curve_t *c)
{
	if (!c)
		return;
	if (c->zap)
		zmq_close(c->zap);
	free(c);
}

void *curve_zap_socket(curve_t *c)
{
	return c->zap;
}

/* The decision for one handshake: status "200" or "400", its text and the
 * User-Id. */
static void decide(curve_t *c, const char *mechanism, const uint8_t *client_key, size_t key_len,
                   const char *address, const char **ret_status, char *text, size_t tlen, char *user, size_t ulen)
{
	*ret_status = "400";
	user[0] = '\0';
	if (strcmp(mechanism, "CURVE") != 0 || key_len != 32) {
		snprintf(text, tlen, "CURVE required");
		if (unknown_budget())
			curve_log_refusal(address, "refused a %s handshake from %s: the broker requires CURVE", mechanism,
		                  address);
		return;
	}
	char z85[CURVE_Z85_BYTES];
	zmq_z85_encode(z85, client_key, 32);
	store_key_t k;
	int64_t now = clock_wall_us();
	int r = store_key_by_public(c->st, z85, &k);
	if (r == 0 && !k.revoked_at_us) {
		*ret_status = "200";
		snprintf(text, tlen, "OK");
		snprintf(user, ulen, "agent:%lld", (long long)k.id);
		store_key_touch(c->st, k.id, now);
		return;
	}
	if (r == 0) {
		snprintf(text, tlen, "key revoked");
		curve_log_refusal(z85, "refused key %s (id %lld, \"%s\") from %s: revoked", z85, (long long)k.id, k.name,
		                  address);
		return;
	}
	if (r == -ENOENT && store_join_token_live(c->st, now) == 1) {
		*ret_status = "200";
		snprintf(text, tlen, "OK: enroll");
		snprintf(user, ulen, "pending:%s", z85);
		return;
	}
	snprintf(text, tlen, "key not enrolled");
	if (unknown_budget())
		curve_log_refusal(z85, "refused key %s from %s: not enrolled (ringctl worker enroll prints a join token; "
	                  "an admin can also add the key)", z85, address);
}

static void frame_str(zmq_msg_t *m, char *out, size_t n)
{
	size_t len = zmq_msg_size(m);
	if (len >= n)
		len = n - 1;
	memcpy(out, zmq_msg_data(m), len);
	out[len] = '\0';
}

void curve_handle_zap(curve_t *c)
{
	for (int k = 0; k < 64; k++) {
		zmq_msg_t parts[8];
		int n = 0;
		bool more = true;
		while (more) {
			zmq_msg_t m;
			zmq_msg_init(&m);
			if (zmq_msg_recv(&m, c->zap, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
				zmq_msg_close(&m);
				for (int i = 0; i < n; i++)
					zmq_msg_close(&parts[i]);
				return;
			}
			more = zmq_msg_more(&m);
			if (n < 8)
				parts[n++] = m;
			else
				zmq_msg_close(&m);
		}
		char version[16] = "", request_id[256] = "", address[128] = "", mechanism[32] = "";
		if (n >= 6) {
			frame_str(&parts[0], version, sizeof version);
			frame_str(&parts[1], request_id, sizeof request_id);
			frame_str(&parts[3], address, sizeof address);
			frame_str(&parts[5], mechanism, sizeof mechanism);
		}
		const char *status = "400";
		char text[64] = "malformed ZAP request", user[96] = "";
		if (n >= 6 && strcmp(version, "1.0") == 0)
			decide(c, mechanism, n >= 7 ? zmq_msg_data(&parts[6]) : NULL, n >= 7 ? zmq_msg_size(&parts[6]) : 0,
			       address, &status, text, sizeof text, user, sizeof user);
		/* reply: version, request id (as received), status, text, user id, metadata */
		zmq_send(c->zap, "1.0", 3, ZMQ_SNDMORE);
		if (n >= 2)
			zmq_send(c->zap, zmq_msg_data(&parts[1]), zmq_msg_size(&parts[1]), ZMQ_SNDMORE);
		else
			zmq_send(c->zap, "", 0, ZMQ_SNDMORE);
		zmq_send(c->zap, status, 3, ZMQ_SNDMORE);
		zmq_send(c->zap, text, strlen(text), ZMQ_SNDMORE);
		zmq_send(c->zap, user, strlen(user), ZMQ_SNDMORE);
		zmq_send(c->zap, "", 0, 0);
		for (int i = 0; i < n; i++)
			zmq_msg_close(&parts[i]);
	}
}

void curve_peer_parse(const char *user_id, curve_peer_t *ret)
{
	memset(ret, 0, sizeof *ret);
	if (!user_id || !user_id[0])
		return;
	if (strncmp(user_id, "agent:", 6) == 0) {
		char *end;
		long long id = strtoll(user_id + 6, &end, 10);
		if (*end == '\0' && id > 0) {
			ret->kind = CURVE_PEER_AGENT;
			ret->key_id = id;
		}
	} else if (strncmp(user_id, "pending:", 8) == 0 && strlen(user_id + 8) == 40) {
		ret->kind = CURVE_PEER_PENDING;
		memcpy(ret->public_key, user_id + 8, CURVE_Z85_BYTES);
	}
}
