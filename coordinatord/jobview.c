/*
 * jobview: JSON of jobs, ranks, events, metrics rows and checkpoints, and
 * list cursors (see jobview.h). json_pack's "o" steals its argument even
 * when the pack fails, and a NULL "o" fails it, so a view is whole or NULL.
 */
#include "jobview.h"

#include <errno.h>
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

json_t *jobview_time(long long at_us)
{
	time_t secs = (time_t)(at_us / 1000000);
	long long frac = at_us % 1000000;
	if (frac < 0) {
		frac += 1000000;
		secs -= 1;
	}
	struct tm tm;
	if (!gmtime_r(&secs, &tm))
		return json_null();
	char text[64];
	snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900, tm.tm_mon + 1,
	         tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
	return json_string(text);
}

json_t *jobview_real(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

/* Build-time checked members: an object, or NULL when any member failed. */
static json_t *checked(json_t *obj, int failed)
{
	if (failed) {
		json_decref(obj);
		return NULL;
	}
	return obj;
}

json_t *jobview_job(const store_job_t *job)
{
	json_t *o = json_object();
	if (!o)
		return NULL;
	json_t *spec = job->spec_json && job->spec_json[0] ? json_loads(job->spec_json, 0, NULL) : json_null();
	int failed = json_object_set_new(o, "id", jobview_string(job->id));
	failed |= json_object_set_new(o, "name", jobview_string(job->name));
	failed |= json_object_set_new(o, "state", json_string(store_job_state_name(job->state)));
	failed |= json_object_set_new(o, "priority", json_integer(job->priority));
	failed |= json_object_set_new(o, "world_size", json_integer(job->world_size));
	failed |= json_object_set_new(o, "attempt", json_integer(job->attempt));
	failed |= json_object_set_new(o, "restarts", json_integer(job->restarts));
	failed |= json_object_set_new(o, "spec", spec);
	failed |= json_object_set_new(o, "created_at", jobview_time(job->created_at_us));
	failed |= json_object_set_new(o, "updated_at", jobview_time(job->updated_at_us));
	failed |= json_object_set_new(o, "state_reason", jobview_string(job->state_reason));
	return checked(o, failed);
}

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
	return json_pack("{sI so so so so so si}", "id", (json_int_t)ev->id, "type", jobview_string(ev->type), "at",
	                 jobview_time(ev->at_us), "from", jobview_string(ev->from_state), "to",
	                 jobview_string(ev->to_state), "reason", jobview_string(ev->reason), "attempt", ev->attempt);
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
