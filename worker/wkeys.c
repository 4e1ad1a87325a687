/*
 * wkeys: the agent's keys in its state folder (see wkeys.h).
 */
#include "wkeys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>
#include <zmq.h>

#include "fsutil.h"

int wkeys_state_dir(const char *dir, char *out, size_t n, char *err, size_t errlen)
{
	const char *env = getenv("STATE_DIRECTORY"), *home = getenv("HOME");
	if (dir && dir[0])
		snprintf(out, n, "%s", dir);
	else if (env && env[0])
		snprintf(out, n, "%.*s", (int)strcspn(env, ":"), env); /* systemd: the first one */
	else if (home && home[0])
		snprintf(out, n, "%s/.local/state/ringworker", home);
	else
		snprintf(out, n, "ringworker-state");
	int r = fs_mkdir_p(out, 0700);
	if (r < 0) {
		snprintf(err, errlen, "cannot create the state folder %s: %s (see --state-dir)", out, strerror(-r));
		return r;
	}
	return 0;
}

/* Read up to `n` - 1 bytes of `dir`/`name`; refuse a group/other readable
 * file when `secret`. */
static int read_file(const char *dir, const char *name, bool secret, char *buf, size_t n)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat sb;
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || (secret && (sb.st_mode & 077))) {
		close(fd);
		return -EPERM;
	}
	ssize_t got = read(fd, buf, n - 1);
	close(fd);
	if (got < 0)
		return -EIO;
	buf[got] = '\0';
	return 0;
}

static int write_file(const char *dir, const char *name, const char *text, mode_t mode, char *err, size_t errlen)
{
	char path[4200], tmp[4300];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	unlink(tmp);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(e));
		return -e;
	}
	size_t len = strlen(text);
	bool ok = write(fd, text, len) == (ssize_t)len && fsync(fd) == 0;
	int e = errno;
	close(fd);
	if (!ok || rename(tmp, path) != 0) {
		e = ok ? errno : e;
		unlink(tmp);
		snprintf(err, errlen, "cannot write %s: %s", path, strerror(e));
		return -e;
	}
	return 0;
}

static bool z85_key_ok(const char *z)
{
	uint8_t raw[32];
	return strlen(z) == 40 && zmq_z85_decode(raw, z) != NULL;
}

int wkeys_load_or_create(const char *dir, fabric_keys_t *keys, bool *ret_created, char *err, size_t errlen)
{
	char buf[256];
	*ret_created = false;
	int r = read_file(dir, "agent.key", true, buf, sizeof buf);
	if (r == -ENOENT) {
		char pub[41], sec[41], text[100];
		if (zmq_curve_keypair(pub, sec) != 0) {
			snprintf(err, errlen, "cannot make a CURVE key pair: %s", zmq_strerror(errno));
			return -ENOTSUP;
		}
		snprintf(text, sizeof text, "%s\n%s\n", pub, sec);
		r = write_file(dir, "agent.key", text, 0600, err, errlen);
		sodium_memzero(text, sizeof text);
		if (r < 0)
			return r;
		snprintf(text, sizeof text, "%s\n", pub);
		if (write_file(dir, "agent.pub", text, 0644, err, errlen) < 0)
			return -EIO;
		snprintf(keys->public_key, sizeof keys->public_key, "%s", pub);
		snprintf(keys->secret_key, sizeof keys->secret_key, "%s", sec);
		sodium_memzero(sec, sizeof sec);
		*ret_created = true;
		return 0;
	}
	if (r == -EPERM) {
		snprintf(err, errlen, "%s/agent.key is not a regular file readable by this user only: chmod 600 it", dir);
		return r;
	}
	if (r < 0) {
		snprintf(err, errlen, "cannot read %s/agent.key: %s", dir, strerror(-r));
		return r;
	}
	char pub[64] = "", sec[64] = "";
	if (sscanf(buf, "%63s %63s", pub, sec) != 2 || !z85_key_ok(pub) || !z85_key_ok(sec)) {
		sodium_memzero(buf, sizeof buf);
		snprintf(err, errlen, "%s/agent.key does not hold two Z85 keys: delete it to make a new pair "
		         "(the agent must then enroll again)", dir);
		return -EINVAL;
	}
	/* z85_key_ok: 40 characters each */
	snprintf(keys->public_key, sizeof keys->public_key, "%.40s", pub);
	snprintf(keys->secret_key, sizeof keys->secret_key, "%.40s", sec);
	sodium_memzero(buf, sizeof buf);
	sodium_memzero(sec, sizeof sec);
	return 0;
}

int wkeys_token_broker(const char *token, char out[41], char *err, size_t errlen)
{
	uint8_t raw[32];
	size_t bin_len = 0;
	if (!token || strncmp(token, "rmj_", 4) != 0 || strlen(token) < 4 + 64 + 40 ||
	    sodium_hex2bin(raw, sizeof raw, token + 4, 64, NULL, &bin_len, NULL) != 0 || bin_len != 32) {
		snprintf(err, errlen, "the join token must be rmj_ followed by 64 hex digits and a secret, as "
		         "`ringctl worker enroll` prints it");
		return -EINVAL;
	}
	zmq_z85_encode(out, raw, 32);
	return 0;
}

int wkeys_read_broker(const char *dir, char out[41])
{
	char buf[128], key[64] = "";
	int r = read_file(dir, "broker.pub", false, buf, sizeof buf);
	if (r < 0)
		return r;
	if (sscanf(buf, "%63s", key) != 1 || !z85_key_ok(key))
		return -EINVAL;
	memcpy(out, key, 41);
	return 0;
}

int wkeys_write_broker(const char *dir, const char *z85, char *err, size_t errlen)
{
	char text[64];
	snprintf(text, sizeof text, "%s\n", z85);
	return write_file(dir, "broker.pub", text, 0644, err, errlen);
}

bool wkeys_enrolled(const char *dir)
{
	char buf[256];
	return read_file(dir, "enrolled", false, buf, sizeof buf) == 0;
}

int wkeys_mark_enrolled(const char *dir, long long key_id, const char *node, char *err, size_t errlen)
{
	char text[256];
	snprintf(text, sizeof text, "%lld %s\n", key_id, node);
	return write_file(dir, "enrolled", text, 0644, err, errlen);
}

int wkeys_load_rank(const char *dir, fabric_keys_t *keys, char *err, size_t errlen)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/agent.key", dir);
	if (access(path, R_OK) != 0) {
		snprintf(err, errlen, "%s: %s (%s names the agent's state folder)", path, strerror(errno), WKEYS_ENV);
		return -ENOENT;
	}
	bool created = false;
	int r = wkeys_load_or_create(dir, keys, &created, err, errlen);
	if (r < 0)
		return r;
	if (wkeys_read_broker(dir, keys->server_key) < 0) {
		snprintf(err, errlen, "%s/broker.pub is missing or not a Z85 key", dir);
		return -EINVAL;
	}
	return 0;
}
