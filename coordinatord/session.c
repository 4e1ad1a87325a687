/*
 * session: the dashboard's sessions and login codes (see session.h).
 */
#include "session.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include <sodium.h>

#include "clock.h"

typedef struct {
	bool used;
	uint64_t fp; /* keyed hash of the id: the scan compares this first */
	char id[SESSION_SECRET_BYTES];
	char csrf[SESSION_SECRET_BYTES];
	auth_principal_t who;
	int64_t token_expires_at_us; /* wall */
	int64_t last_used_us;        /* monotonic */
} session_slot_t;

typedef struct {
	bool used;
	char code[SESSION_CODE_BYTES];
	auth_principal_t who;
	int64_t token_expires_at_us;
	int64_t expires_us; /* monotonic */
} code_slot_t;

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char s_fp_key[crypto_generichash_KEYBYTES];
static bool s_fp_key_set;
static session_slot_t s_sessions[SESSION_MAX];
static code_slot_t s_codes[SESSION_CODES_MAX];

static void random_secret(char out[SESSION_SECRET_BYTES])
{
	unsigned char raw[32];
	randombytes_buf(raw, sizeof raw);
	sodium_bin2base64(out, SESSION_SECRET_BYTES, raw, sizeof raw, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	sodium_memzero(raw, sizeof raw);
}

/* The id's fingerprint: 8 bytes of its hash keyed with a per-process
 * random key (the lock held), so a scan compares integers and only a
 * matching slot's id with sodium_memcmp. */
static uint64_t fingerprint(const char *id, size_t len)
{
	if (!s_fp_key_set) {
		randombytes_buf(s_fp_key, sizeof s_fp_key);
		s_fp_key_set = true;
	}
	uint64_t fp = 0;
	crypto_generichash((unsigned char *)&fp, sizeof fp, (const unsigned char *)id, len, s_fp_key, sizeof s_fp_key);
	return fp;
}

/* Whether the NUL-terminated secret `have` equals the `len` bytes at `given`. */
static bool secret_eq(const char *have, const char *given, size_t len)
{
	return strlen(have) == len && sodium_memcmp(have, given, len) == 0;
}

static bool session_live(const session_slot_t *s, int64_t now_mono, int64_t now_wall)
{
	return s->used && now_mono - s->last_used_us < SESSION_IDLE_US &&
	       (!s->token_expires_at_us || now_wall < s->token_expires_at_us);
}

int session_create(const auth_principal_t *who, int64_t token_expires_at_us, char ret_id[SESSION_SECRET_BYTES],
                   char ret_csrf[SESSION_SECRET_BYTES])
{
	int64_t now = clock_mono_us(), wall = clock_wall_us();
	pthread_mutex_lock(&s_lock);
	session_slot_t *slot = NULL;
	for (int i = 0; i < SESSION_MAX && !slot; i++)
		if (!session_live(&s_sessions[i], now, wall))
			slot = &s_sessions[i];
	if (!slot) {
		slot = &s_sessions[0];
		for (int i = 1; i < SESSION_MAX; i++)
			if (s_sessions[i].last_used_us < slot->last_used_us)
				slot = &s_sessions[i];
	}
	memset(slot, 0, sizeof *slot);
	slot->used = true;
	random_secret(slot->id);
	random_secret(slot->csrf);
	slot->fp = fingerprint(slot->id, SESSION_SECRET_LEN);
	slot->who = *who;
	slot->who.via = AUTH_VIA_COOKIE;
	slot->token_expires_at_us = token_expires_at_us;
	slot->last_used_us = now;
	memcpy(ret_id, slot->id, SESSION_SECRET_BYTES);
	memcpy(ret_csrf, slot->csrf, SESSION_SECRET_BYTES);
	pthread_mutex_unlock(&s_lock);
	return 0;
}

int session_lookup(const char *id, size_t len, auth_principal_t *ret_who, char ret_csrf[SESSION_SECRET_BYTES])
{
	if (len != SESSION_SECRET_LEN)
		return -ENOENT;
	int64_t now = clock_mono_us(), wall = clock_wall_us();
	int r = -ENOENT;
	pthread_mutex_lock(&s_lock);
	uint64_t fp = fingerprint(id, len);
	for (int i = 0; i < SESSION_MAX; i++) {
		session_slot_t *s = &s_sessions[i];
		if (!s->used || s->fp != fp || !secret_eq(s->id, id, len))
			continue;
		if (session_live(s, now, wall)) {
			s->last_used_us = now;
			*ret_who = s->who;
			if (ret_csrf)
				memcpy(ret_csrf, s->csrf, SESSION_SECRET_BYTES);
			r = 0;
		} else {
			memset(s, 0, sizeof *s);
		}
		break;
	}
	pthread_mutex_unlock(&s_lock);
	return r;
}

void session_destroy(const char *id, size_t len)
{
	pthread_mutex_lock(&s_lock);
	for (int i = 0; i < SESSION_MAX; i++)
		if (s_sessions[i].used && secret_eq(s_sessions[i].id, id, len))
			memset(&s_sessions[i], 0, sizeof s_sessions[i]);
	pthread_mutex_unlock(&s_lock);
}

void session_forget_token(int64_t token_id)
{
	pthread_mutex_lock(&s_lock);
	for (int i = 0; i < SESSION_MAX; i++)
		if (s_sessions[i].used && s_sessions[i].who.token_id == token_id)
			memset(&s_sessions[i], 0, sizeof s_sessions[i]);
	for (int i = 0; i < SESSION_CODES_MAX; i++)
		if (s_codes[i].used && s_codes[i].who.token_id == token_id)
			memset(&s_codes[i], 0, sizeof s_codes[i]);
	pthread_mutex_unlock(&s_lock);
}

int session_code_create(const auth_principal_t *who, int64_t token_expires_at_us, char ret_code[SESSION_CODE_BYTES])
{
	int64_t now = clock_mono_us();
	pthread_mutex_lock(&s_lock);
	code_slot_t *slot = NULL;
	for (int i = 0; i < SESSION_CODES_MAX && !slot; i++)
		if (!s_codes[i].used || now >= s_codes[i].expires_us)
			slot = &s_codes[i];
	if (!slot) { /* every slot holds a live code: the one expiring first goes */
		slot = &s_codes[0];
		for (int i = 1; i < SESSION_CODES_MAX; i++)
			if (s_codes[i].expires_us < slot->expires_us)
				slot = &s_codes[i];
	}
	memset(slot, 0, sizeof *slot);
	slot->used = true;
	memcpy(slot->code, SESSION_CODE_PREFIX, 4);
	random_secret(slot->code + 4);
	slot->who = *who;
	slot->token_expires_at_us = token_expires_at_us;
	slot->expires_us = now + SESSION_CODE_US;
	memcpy(ret_code, slot->code, SESSION_CODE_BYTES);
	pthread_mutex_unlock(&s_lock);
	return 0;
}

int session_code_redeem(const char *code, size_t len, auth_principal_t *ret_who, int64_t *ret_token_expires_at_us)
{
	int64_t now = clock_mono_us();
	int r = -ENOENT;
	pthread_mutex_lock(&s_lock);
	for (int i = 0; i < SESSION_CODES_MAX; i++) {
		code_slot_t *c = &s_codes[i];
		if (!c->used || !secret_eq(c->code, code, len))
			continue;
		if (now < c->expires_us) {
			*ret_who = c->who;
			*ret_token_expires_at_us = c->token_expires_at_us;
			r = 0;
		}
		memset(c, 0, sizeof *c); /* good once */
		break;
	}
	pthread_mutex_unlock(&s_lock);
	return r;
}
