/*
 * ranklog: line splitting, the per-rank rate cap and the batches of the
 * agent's LOGS messages (see ranklog.h for the rules and their numbers).
 */
#include "ranklog.h"

#include <stdbool.h>
#include <string.h>

void ranklog_init(ranklog_t *rl)
{
	memset(rl, 0, sizeof *rl);
}

void ranklog_clear(ranklog_t *rl)
{
	json_decref(rl->lines);
	ranklog_init(rl);
}

/* Replace each byte that does not belong to a well-formed UTF-8 sequence
 * (RFC 3629: no overlongs, no surrogates, at most U+10FFFF) with '?'; also
 * NUL, which JSON strings could carry but C strings cannot. */
static void s_make_utf8(char *text, size_t len)
{
	unsigned char *s = (unsigned char *)text;
	size_t i = 0;
	while (i < len) {
		unsigned c = s[i];
		size_t need = 0;
		unsigned lo = 0x80, hi = 0xBF;
		if (c >= 0x01 && c < 0x80) {
			i++;
			continue;
		} else if (c >= 0xC2 && c <= 0xDF) {
			need = 1;
		} else if (c >= 0xE0 && c <= 0xEF) {
			need = 2;
			lo = c == 0xE0 ? 0xA0 : 0x80;
			hi = c == 0xED ? 0x9F : 0xBF;
		} else if (c >= 0xF0 && c <= 0xF4) {
			need = 3;
			lo = c == 0xF0 ? 0x90 : 0x80;
			hi = c == 0xF4 ? 0x8F : 0xBF;
		}
		bool ok = need > 0 && i + need < len; /* its continuation bytes are all there */
		for (size_t k = 1; ok && k <= need; k++) {
			unsigned b = s[i + k];
			if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
				ok = false;
		}
		if (!ok) {
			s[i++] = '?';
			continue;
		}
		i += need + 1;
	}
}

/* Whether the rate cap lets a line of `len` bytes through at `now_us`. */
static bool s_admit(ranklog_t *rl, size_t len, int64_t now_us)
{
	if (now_us - rl->window_start_us >= 1000000 || now_us < rl->window_start_us) {
		rl->window_start_us = now_us;
		rl->window_lines = 0;
		rl->window_bytes = 0;
	}
	if (rl->window_lines >= RANKLOG_RATE_LINES || rl->window_bytes + (int64_t)len > RANKLOG_RATE_BYTES)
		return false;
	rl->window_lines++;
	rl->window_bytes += (int64_t)len;
	return true;
}

/* One complete line: the callback, then the batch (or the drop count). */
static void s_line(ranklog_t *rl, ranklog_stream_t stream, int64_t now_us, ranklog_line_fn fn, void *cls)
{
	ranklog_partial_t *p = &rl->part[stream];
	p->buf[p->len] = '\0';
	if (fn)
		fn(cls, stream, p->buf);
	size_t len = p->len;
	p->len = 0;
	if (!rl->lines && rl->dropped == 0)
		rl->batch_since_us = now_us;
	if (!s_admit(rl, len, now_us)) {
		rl->dropped++;
		return;
	}
	s_make_utf8(p->buf, len);
	if (!rl->lines)
		rl->lines = json_array();
	json_t *line = json_pack("{s:s, s:I, s:s%}", "stream", stream == RANKLOG_STDOUT ? "stdout" : "stderr",
	                         "time_us", (json_int_t)now_us, "text", p->buf, len);
	if (!rl->lines || !line || json_array_append_new(rl->lines, line) < 0) {
		rl->dropped++;
		return;
	}
	rl->batch_bytes += len;
}

void ranklog_feed(ranklog_t *rl, ranklog_stream_t stream, const char *buf, size_t n, int64_t now_us,
                  ranklog_line_fn fn, void *cls)
{
	ranklog_partial_t *p = &rl->part[stream];
	for (size_t i = 0; i < n; i++) {
		char ch = buf[i];
		if (ch == '\n') {
			if (p->cut)
				p->cut = false;
			else
				s_line(rl, stream, now_us, fn, cls);
			continue;
		}
		if (p->cut)
			continue;
		p->buf[p->len++] = ch;
		if (p->len == RANKLOG_LINE_MAX_BYTES) {
			s_line(rl, stream, now_us, fn, cls);
			p->cut = true;
		}
	}
}

void ranklog_eof(ranklog_t *rl, ranklog_stream_t stream, int64_t now_us, ranklog_line_fn fn, void *cls)
{
	ranklog_partial_t *p = &rl->part[stream];
	if (p->len > 0)
		s_line(rl, stream, now_us, fn, cls);
	p->cut = false;
}

bool ranklog_pending(const ranklog_t *rl)
{
	return rl->lines || rl->dropped > 0;
}

int64_t ranklog_deadline_us(const ranklog_t *rl)
{
	return ranklog_pending(rl) ? rl->batch_since_us + (int64_t)RANKLOG_BATCH_MS * 1000 : INT64_MAX;
}

bool ranklog_due(const ranklog_t *rl, int64_t now_us)
{
	if (!ranklog_pending(rl))
		return false;
	return json_array_size(rl->lines) >= RANKLOG_BATCH_LINES || rl->batch_bytes >= RANKLOG_BATCH_BYTES ||
	       now_us >= ranklog_deadline_us(rl);
}

json_t *ranklog_take(ranklog_t *rl, const char *job, int attempt, int rank)
{
	json_t *lines = rl->lines ? rl->lines : json_array();
	json_t *p = json_pack("{s:s, s:i, s:i, s:o, s:I}", "job", job, "attempt", attempt, "rank", rank, "lines",
	                      lines, "dropped", (json_int_t)rl->dropped);
	rl->lines = NULL;
	rl->batch_bytes = 0;
	rl->dropped = 0;
	return p;
}
