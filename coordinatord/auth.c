/*
 * auth: API tokens, the authentication of a presented token, and the
 * start-up rules of authentication (see auth.h).
 *
 * A token is "rmt_" + 43 base64url characters (32 random bytes); the store
 * keeps only its crypto_generichash and its first 12 characters. A request's
 * token is hashed and looked up by the hash (store_token_by_hash on the
 * thread's reader), the stored hash compared again with sodium_memcmp, and
 * the row's expiry and revocation checked. Hits are cached for AUTH_CACHE_US
 * in a small table under a mutex so that the common request costs a hash
 * and no SQL; a revocation (auth_forget_token) empties the token's entries
 * and bumps a generation counter, so that a lookup which read the row before
 * the revocation committed does not put it back.
 *
 * Writes (a token's creation, revocation and last use) go through the
 * writer loop (tokenapi.h's commands); this module only reads.
 */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <sodium.h>

#include "broker.h"
#include "clock.h"
#include "log.h"
#include "tokenapi.h"

#define AUTH_CACHE_SLOTS 128
#define AUTH_CACHE_US (5 * 1000000LL)      /* how long a cached authentication is trusted */
#define AUTH_TOUCH_EVERY_US (60 * 1000000LL) /* last_used_at is written at most this often */
#define BOOTSTRAP_TIMEOUT_MS 10000

typedef struct {
	bool used;
	unsigned char hash[32];
	auth_principal_t who;
	int64_t expires_at_us; /* wall clock; 0 never */
	int64_t cached_at_us;  /* monotonic */
	int64_t touched_at_us; /* monotonic: when its use was last recorded */
} cache_slot_t;

static struct {
	bool enabled;
	pthread_mutex_t lock;
	uint64_t generation; /* bumped by every auth_forget_token */
	cache_slot_t slot[AUTH_CACHE_SLOTS];
} s_auth = {.enabled = true, .lock = PTHREAD_MUTEX_INITIALIZER};

static const char *const s_role_names[] = {"none", "viewer", "operator", "admin"};

const char *auth_role_name(auth_role_t role)
{
	if ((int)role < 0 || role > AUTH_ROLE_ADMIN)
		return "none";
	return s_role_names[role];
}

int auth_role_parse(const char *name, auth_role_t *ret_role)
{
	for (int i = AUTH_ROLE_VIEWER; name && i <= AUTH_ROLE_ADMIN; i++) {
		if (strcmp(name, s_role_names[i]) == 0) {
			*ret_role = (auth_role_t)i;
			return 0;
		}
	}
	return -EINVAL;
}

bool auth_name_valid(const char *name)
{
	size_t n = name ? strlen(name) : 0;
	if (n < 1 || n > AUTH_NAME_MAX)
		return false;
	return strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._@-") == n;
}

void auth_token_make(char ret_token[AUTH_TOKEN_BYTES])
{
	unsigned char raw[32];
	randombytes_buf(raw, sizeof raw);
	memcpy(ret_token, AUTH_TOKEN_PREFIX, 4);
	sodium_bin2base64(ret_token + 4, AUTH_TOKEN_BYTES - 4, raw, sizeof raw,
	                  sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	sodium_memzero(raw, sizeof raw);
}

void auth_token_hash(const char *token, size_t len, unsigned char ret_hash[32])
{
	crypto_generichash(ret_hash, 32, (const unsigned char *)token, len, NULL, 0);
}

void auth_init(const config_t *cfg)
{
	s_auth.enabled = cfg->auth;
}

bool auth_enabled(void)
{
	return s_auth.enabled;
}

const char *auth_bearer(const char *header, size_t *ret_len)
{
	if (!header || strncasecmp(header, "Bearer ", 7) != 0)
		return NULL;
	const char *t = header + 7;
	while (*t == ' ')
		t++;
	size_t n = strcspn(t, " \t");
	if (n == 0 || t[n] != '\0')
		return NULL;
	*ret_len = n;
	return t;
}

/* ---- the cache ---- */

/* The slot holding `hash` (the lock held), or NULL. */
static cache_slot_t *cache_find(const unsigned char hash[32])
{
	for (int i = 0; i < AUTH_CACHE_SLOTS; i++)
		if (s_auth.slot[i].used && sodium_memcmp(s_auth.slot[i].hash, hash, 32) == 0)
			return &s_auth.slot[i];
	return NULL;
}

/* A free slot, else the oldest one (the lock held). */
static cache_slot_t *cache_victim(void)
{
	cache_slot_t *oldest = &s_auth.slot[0];
	for (int i = 0; i < AUTH_CACHE_SLOTS; i++) {
		if (!s_auth.slot[i].used)
			return &s_auth.slot[i];
		if (s_auth.slot[i].cached_at_us < oldest->cached_at_us)
			oldest = &s_auth.slot[i];
	}
	return oldest;
}

void auth_forget_token(int64_t id)
{
	pthread_mutex_lock(&s_auth.lock);
	s_auth.generation++;
	for (int i = 0; i < AUTH_CACHE_SLOTS; i++)
		if (s_auth.slot[i].used && s_auth.slot[i].who.token_id == id)
			memset(&s_auth.slot[i], 0, sizeof s_auth.slot[i]);
	pthread_mutex_unlock(&s_auth.lock);
}

/* A cached authentication of `hash`: true with *ret_who, *ret_touch, or
 * false (not cached, or cached too long ago). */
static bool cache_get(const unsigned char hash[32], int64_t now_mono, auth_principal_t *ret_who,
                      int64_t *ret_expires, bool *ret_touch)
{
	bool hit = false;
	pthread_mutex_lock(&s_auth.lock);
	cache_slot_t *c = cache_find(hash);
	if (c && now_mono - c->cached_at_us < AUTH_CACHE_US) {
		hit = true;
		*ret_who = c->who;
		*ret_expires = c->expires_at_us;
		*ret_touch = now_mono - c->touched_at_us >= AUTH_TOUCH_EVERY_US;
		if (*ret_touch)
			c->touched_at_us = now_mono;
	}
	pthread_mutex_unlock(&s_auth.lock);
	return hit;
}

/* Remember an authentication read from the store while generation was
 * `gen` (not when a revocation came in meanwhile). */
static void cache_put(const unsigned char hash[32], uint64_t gen, const auth_principal_t *who, int64_t expires_at_us,
                      int64_t now_mono, int64_t touched_at_us)
{
	pthread_mutex_lock(&s_auth.lock);
	if (gen == s_auth.generation) {
		cache_slot_t *c = cache_find(hash);
		if (!c)
			c = cache_victim();
		c->used = true;
		memcpy(c->hash, hash, 32);
		c->who = *who;
		c->expires_at_us = expires_at_us;
		c->cached_at_us = now_mono;
		c->touched_at_us = touched_at_us;
	}
	pthread_mutex_unlock(&s_auth.lock);
}

int auth_token_check(store_t *reader, const char *token, size_t len, auth_principal_t *ret_who, bool *ret_touch,
                     int64_t *ret_expires_at_us, char *why, size_t whylen)
{
	if (len != AUTH_TOKEN_LEN || strncmp(token, AUTH_TOKEN_PREFIX, 4) != 0) {
		snprintf(why, whylen, "the bearer token is not a ringmaster token (rmt_ and 43 characters)");
		return -EACCES;
	}
	unsigned char hash[32];
	auth_token_hash(token, len, hash);
	int64_t now_mono = clock_mono_us(), now_wall = clock_wall_us();
	auth_principal_t who;
	int64_t expires = 0;
	bool touch = false;
	if (!cache_get(hash, now_mono, &who, &expires, &touch)) {
		pthread_mutex_lock(&s_auth.lock);
		uint64_t gen = s_auth.generation;
		pthread_mutex_unlock(&s_auth.lock);
		store_token_t t;
		int r = store_token_by_hash(reader, hash, &t);
		if (r == -ENOENT || (r == 0 && sodium_memcmp(t.hash, hash, 32) != 0)) {
			snprintf(why, whylen, "the bearer token is not known to this coordinator");
			return -EACCES;
		}
		if (r < 0)
			return -EIO;
		if (t.revoked_at_us) {
			snprintf(why, whylen, "the token \"%s\" has been revoked", t.name);
			return -EACCES;
		}
		memset(&who, 0, sizeof who);
		if (auth_role_parse(t.role, &who.role) < 0)
			return -EIO;
		who.via = AUTH_VIA_TOKEN;
		who.token_id = t.id;
		snprintf(who.name, sizeof who.name, "%s", t.name);
		expires = t.expires_at_us;
		/* its use is recorded now unless the store says it was lately */
		touch = now_wall - t.last_used_at_us >= AUTH_TOUCH_EVERY_US;
		int64_t since_touch = touch ? 0 : now_wall - t.last_used_at_us;
		cache_put(hash, gen, &who, expires, now_mono, now_mono - since_touch);
	}
	if (expires && now_wall >= expires) {
		snprintf(why, whylen, "the token \"%s\" has expired", who.name);
		return -EACCES;
	}
	*ret_who = who;
	*ret_touch = touch;
	*ret_expires_at_us = expires;
	return 0;
}

/* ---- start-up ---- */

bool auth_addr_is_loopback(const struct sockaddr *sa)
{
	if (!sa)
		return false;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		if (IN6_IS_ADDR_LOOPBACK(a))
			return true;
		return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
	}
	return false;
}

int auth_check_exposure(const config_t *cfg, char *err, size_t errlen)
{
	if (cfg->auth)
		return 0;
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
	struct addrinfo *res = NULL;
	bool loopback = getaddrinfo(cfg->listen_host, cfg->listen_port, &hints, &res) == 0 && res;
	for (struct addrinfo *ai = res; loopback && ai; ai = ai->ai_next)
		loopback = auth_addr_is_loopback(ai->ai_addr);
	if (res)
		freeaddrinfo(res);
	if (loopback) {
		log_warn("authentication is off (--auth off): every local user of this machine is an admin of the API");
		return 0;
	}
	if (!cfg->insecure) {
		snprintf(err, errlen,
		         "refusing --auth off on %s, which is not a loopback address: anyone who can reach it could "
		         "submit and cancel jobs. Listen on 127.0.0.1, keep authentication on, or add --insecure if "
		         "this network is closed",
		         cfg->listen_host);
		return -EPERM;
	}
	log_warn("INSECURE: authentication is off on %s, a non-loopback address (--auth off --insecure): anyone who "
	         "can reach it can submit, cancel and read every job",
	         cfg->listen_host);
	return 0;
}

/* <db folder>/admin.token into `out`. */
static void admin_token_path(const config_t *cfg, char *out, size_t outlen)
{
	const char *slash = strrchr(cfg->db, '/');
	if (!slash)
		snprintf(out, outlen, "%s", AUTH_ADMIN_TOKEN_FILE);
	else
		snprintf(out, outlen, "%.*s/%s", (int)(slash - cfg->db), cfg->db, AUTH_ADMIN_TOKEN_FILE);
}

/* Write the token to a new file, 0600. 0 or a negative errno. */
static int write_token_file(const char *path, const char *token)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	char line[AUTH_TOKEN_BYTES + 1];
	int n = snprintf(line, sizeof line, "%s\n", token);
	ssize_t w = write(fd, line, (size_t)n);
	int e = w == n ? 0 : (w < 0 ? errno : EIO);
	if (!e && fsync(fd) < 0)
		e = errno;
	close(fd);
	sodium_memzero(line, sizeof line);
	if (e) {
		unlink(path);
		return -e;
	}
	return 0;
}

/* Store a new admin token's hash through the writer loop. */
static int store_admin_token(void *zctx, const char *token, char *err, size_t errlen)
{
	broker_client_t *bc = broker_client_new(zctx);
	if (!bc) {
		snprintf(err, errlen, "cannot reach the writer loop to store the first admin token");
		return -EIO;
	}
	store_token_t t;
	memset(&t, 0, sizeof t);
	snprintf(t.name, sizeof t.name, "admin");
	snprintf(t.role, sizeof t.role, "admin");
	snprintf(t.prefix, sizeof t.prefix, "%.*s", AUTH_TOKEN_DISPLAY_LEN, token);
	auth_token_hash(token, strlen(token), t.hash);
	t.created_at_us = clock_wall_us();
	broker_reply_t reply;
	int r = tokenapi_cmd_create(bc, &t, BOOTSTRAP_TIMEOUT_MS, &reply);
	if (r == 0 && reply.status != 201) {
		snprintf(err, errlen, "cannot store the first admin token (status %d): %.200s", reply.status,
		         reply.body ? reply.body : "");
		r = -EIO;
	} else if (r < 0) {
		snprintf(err, errlen, "cannot store the first admin token: %s", strerror(-r));
	}
	broker_reply_clear(&reply);
	broker_client_free(bc);
	return r;
}

int auth_bootstrap(const config_t *cfg, void *zctx, char *err, size_t errlen)
{
	char path[4200];
	admin_token_path(cfg, path, sizeof path);
	store_t *reader = store_open(cfg->db, STORE_OPEN_READER, err, errlen);
	if (!reader)
		return -EIO;
	int64_t n = 0;
	int r = store_token_count(reader, &n);
	store_close(reader);
	if (r < 0) {
		snprintf(err, errlen, "cannot count the API tokens in %s", cfg->db);
		return r;
	}
	if (n > 0) {
		if (access(path, F_OK) == 0)
			log_info("the first admin token is in %s (readable by this user only)", path);
		else
			log_info("the first admin token was written to %s at first start (now moved or deleted)", path);
		return 0;
	}
	/* no token yet: a stale file from another database names nothing */
	if (unlink(path) == 0)
		log_warn("removed %s: it held a token of another database", path);
	char token[AUTH_TOKEN_BYTES];
	auth_token_make(token);
	r = write_token_file(path, token);
	if (r < 0) {
		snprintf(err, errlen, "cannot write the first admin token to %s: %s", path, strerror(-r));
		sodium_memzero(token, sizeof token);
		return r;
	}
	r = store_admin_token(zctx, token, err, errlen);
	sodium_memzero(token, sizeof token);
	if (r < 0) {
		unlink(path);
		return r;
	}
	log_info("first start: an admin token named \"admin\" was written to %s (readable by this user only); "
	         "ringctl run by this user finds it there",
	         path);
	return 0;
}
