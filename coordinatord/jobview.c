/*
 * jobview: JSON of jobs, ranks, events, metrics rows and checkpoints, and
 * list cursors (see jobview.h).
 */
#include "jobview.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

static void put_str(sbuf_t *out, const char *s)
{
	sbuf_json_string(out, s, s ? strlen(s) : 0);
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
	sbuf_json_time(out, job->created_at_us);
	sbuf_puts(out, ",\"updated_at\":");
	sbuf_json_time(out, job->updated_at_us);
	sbuf_puts(out, ",\"state_reason\":");
	put_str(out, job->state_reason);
}

void jobview_rank(sbuf_t *out, const store_rank_t *r)
{
	sbuf_printf(out, "{\"rank\":%d,\"node\":", r->rank);
	put_str(out, r->node);
	sbuf_puts(out, ",\"device\":{\"kind\":");
	put_str(out, r->device_kind);
	sbuf_printf(out, ",\"index\":%d},\"state\":", r->device_index);
	put_str(out, r->state);
	sbuf_puts(out, ",\"memory\":");
	if (r->has_memory)
		sbuf_printf(out,
		            "{\"params_bytes\":%lld,\"grads_bytes\":%lld,\"optim_bytes\":%lld,"
		            "\"activations_bytes\":%lld}}",
		            (long long)r->memory.params_bytes, (long long)r->memory.grads_bytes,
		            (long long)r->memory.optim_bytes, (long long)r->memory.activations_bytes);
	else
		sbuf_puts(out, "null}");
}

void jobview_checkpoint(sbuf_t *out, const store_checkpoint_t *c)
{
	sbuf_printf(out, "{\"step\":%lld,\"committed_at\":", (long long)c->step);
	sbuf_json_time(out, c->committed_at_us);
	sbuf_printf(out, ",\"bytes\":%lld,\"world_size\":%d,\"attempt\":%d,\"path\":", (long long)c->bytes,
	            c->world_size, c->attempt);
	put_str(out, c->path);
	sbuf_putc(out, '}');
}

void jobview_event(sbuf_t *out, const store_event_t *ev)
{
	sbuf_printf(out, "{\"id\":%lld,\"type\":", (long long)ev->id);
	put_str(out, ev->type);
	sbuf_puts(out, ",\"at\":");
	sbuf_json_time(out, ev->at_us);
	sbuf_puts(out, ",\"from\":");
	put_str(out, ev->from_state);
	sbuf_puts(out, ",\"to\":");
	put_str(out, ev->to_state);
	sbuf_puts(out, ",\"reason\":");
	put_str(out, ev->reason);
	sbuf_printf(out, ",\"attempt\":%d}", ev->attempt);
}

void jobview_metric(sbuf_t *out, const store_metric_t *m)
{
	sbuf_printf(out, "{\"step\":%lld,\"loss\":", (long long)m->step);
	sbuf_json_real(out, m->loss);
	sbuf_puts(out, ",\"lr\":");
	sbuf_json_real(out, m->lr);
	sbuf_puts(out, ",\"grad_norm\":");
	sbuf_json_real(out, m->grad_norm);
	sbuf_puts(out, ",\"tokens_per_s\":");
	sbuf_json_real(out, m->tokens_per_s);
	sbuf_puts(out, ",\"ms\":");
	sbuf_json_real(out, m->ms);
	sbuf_puts(out, ",\"val_loss\":");
	if (m->has_val_loss)
		sbuf_json_real(out, m->val_loss);
	else
		sbuf_puts(out, "null");
	sbuf_printf(out, ",\"attempt\":%d,\"time\":", m->attempt);
	sbuf_json_time(out, m->at_us);
	sbuf_putc(out, '}');
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
