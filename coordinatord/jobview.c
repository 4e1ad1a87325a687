/*
 * jobview: JSON of jobs, ranks, events, metrics rows and checkpoints, and
 * list cursors (see jobview.h). json_pack's "o" steals its argument even
 * when the pack fails, and a NULL "o" fails it, so a view is whole or NULL.
 */
#include "jobview.h"

#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "sbuf.h"

json_t *jobview_string(const char *s)
{
	if (!s)
		return json_null();
	json_t *j = json_string(s);
	if (j)
		return j;
	/* not valid UTF-8 (or out of memory): sbuf's writer puts U+FFFD in
	 * place of the bytes that break it, and jansson reads that back */
	sbuf_t b = {0};
	sbuf_json_string(&b, s, strlen(s));
	j = b.failed ? NULL : json_loadb(b.data, b.len, JSON_DECODE_ANY, NULL);
	sbuf_free(&b);
	return j;
}

/* RFC 3339 UTC with microseconds ("2025-01-02T03:04:05.000006Z"); false
 * when the time cannot be shown. */
static bool format_time(long long at_us, char out[80])
{
	time_t secs = (time_t)(at_us / 1000000);
	long long frac = at_us % 1000000;
	if (frac < 0) {
		frac += 1000000;
		secs -= 1;
	}
	struct tm tm;
	if (!gmtime_r(&secs, &tm))
		return false;
	snprintf(out, 80, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
	         tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
	return true;
}

json_t *jobview_time(long long at_us)
{
	char text[80];
	return format_time(at_us, text) ? json_string(text) : json_null();
}

json_t *jobview_real(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

/* ---- the job object, by hand (see jobview.h) ---- */

static void put_str(sbuf_t *out, const char *s)
{
	sbuf_json_string(out, s, s ? strlen(s) : 0);
}

static void put_time(sbuf_t *out, long long at_us)
{
	char text[80];
	if (format_time(at_us, text))
		sbuf_printf(out, "\"%s\"", text);
	else
		sbuf_puts(out, "null");
}

void jobview_job(sbuf_t *out, const store_job_t *job)
{
	jobview_job_open(out, job);
	sbuf_putc(out, '}');
}

void jobview_job_open(sbuf_t *out, const store_job_t *job)
{
	sbuf_puts(out, "{\"id\":");
	put_str(out, job->id);
	sbuf_puts(out, ",\"name\":");
	put_str(out, job->name);
	sbuf_puts(out, ",\"state\":");
	put_str(out, store_job_state_name(job->state));
	sbuf_printf(out, ",\"priority\":%d,\"world_size\":%d,\"attempt\":%d,\"restarts\":%d,\"spec\":",
	            job->priority, job->world_size, job->attempt, job->restarts);
	if (job->spec_json && job->spec_json[0])
		sbuf_puts(out, job->spec_json);
	else
		sbuf_puts(out, "null");
	sbuf_puts(out, ",\"created_at\":");
	put_time(out, job->created_at_us);
	sbuf_puts(out, ",\"updated_at\":");
	put_time(out, job->updated_at_us);
	sbuf_puts(out, ",\"state_reason\":");
	put_str(out, job->state_reason);
	sbuf_puts(out, ",\"submitted_by\":");
	put_str(out, job->submitted_by);
	sbuf_puts(out, ",\"cancelled_by\":");
	put_str(out, job->cancelled_by);
}

/* ---- the other views, with jansson ---- */

json_t *jobview_rank(const store_rank_t *r)
{
	json_t *memory = r->has_memory ? json_pack("{sI sI sI sI}", "params_bytes", (json_int_t)r->memory.params_bytes,
	                                           "grads_bytes", (json_int_t)r->memory.grads_bytes, "optim_bytes",
	                                           (json_int_t)r->memory.optim_bytes, "activations_bytes",
	                                           (json_int_t)r->memory.activations_bytes)
	                               : json_null();
	return json_pack("{si so s{so si} so so}", "rank", r->rank, "node", jobview_string(r->node), "device", "kind",
	                 jobview_string(r->device_kind), "index", r->device_index, "state", jobview_string(r->state),
	                 "memory", memory);
}

json_t *jobview_checkpoint(const store_checkpoint_t *c)
{
	return json_pack("{sI so sI si si so}", "step", (json_int_t)c->step, "committed_at",
	                 jobview_time(c->committed_at_us), "bytes", (json_int_t)c->bytes, "world_size", c->world_size,
	                 "attempt", c->attempt, "path", jobview_string(c->path));
}

json_t *jobview_event(const store_event_t *ev)
{
	return json_pack("{sI so so so so so si so}", "id", (json_int_t)ev->id, "type", jobview_string(ev->type), "at",
	                 jobview_time(ev->at_us), "from", jobview_string(ev->from_state), "to",
	                 jobview_string(ev->to_state), "reason", jobview_string(ev->reason), "attempt", ev->attempt,
	                 "actor", jobview_string(ev->actor));
}

json_t *jobview_metric(const store_metric_t *m)
{
	return json_pack("{sI so so so so so so si so}", "step", (json_int_t)m->step, "loss", jobview_real(m->loss),
	                 "lr", jobview_real(m->lr), "grad_norm", jobview_real(m->grad_norm), "tokens_per_s",
	                 jobview_real(m->tokens_per_s), "ms", jobview_real(m->ms), "val_loss",
	                 m->has_val_loss ? jobview_real(m->val_loss) : json_null(), "attempt", m->attempt, "time",
	                 jobview_time(m->at_us));
}

void jobview_cursor_encode(long long n, char out[JOBVIEW_CURSOR_BYTES])
{
	char raw[32];
	int len = snprintf(raw, sizeof raw, "v1:%lld", n);
	sodium_bin2base64(out, JOBVIEW_CURSOR_BYTES, (const unsigned char *)raw, (size_t)len,
	                  sodium_base64_VARIANT_URLSAFE_NO_PADDING);
}

int jobview_cursor_decode(const char *text, long long *ret_n)
{
	unsigned char raw[32];
	size_t raw_len = 0;
	size_t text_len = strlen(text);
	if (text_len == 0 || text_len >= JOBVIEW_CURSOR_BYTES)
		return -EINVAL;
	if (sodium_base642bin(raw, sizeof raw - 1, text, text_len, NULL, &raw_len, NULL,
	                      sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0)
		return -EINVAL;
	raw[raw_len] = '\0';
	if (raw_len < 4 || memcmp(raw, "v1:", 3) != 0)
		return -EINVAL;
	const char *digits = (const char *)raw + 3;
	if (strspn(digits, "0123456789") != raw_len - 3 || raw_len - 3 > 18)
		return -EINVAL;
	*ret_n = strtoll(digits, NULL, 10);
	return 0;
}
