/*
 * feed: the ring of recent changes and its collection after each commit
 * (see feed.h).
 */
#include "feed.h"
#include "store_keys.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "jobview.h"
#include "log.h"
#include "sbuf.h"

static const char *const s_type_names[FEED_N_TYPES] = {"state", "event", "metrics", "log", "end", "job", "worker"};

static struct {
	pthread_mutex_t lock;
	feed_entry_t *ring;
	size_t cap;
	uint64_t first_seq; /* the oldest entry kept (last_seq + 1 when none) */
	uint64_t last_seq;
	int64_t event_id, metric_id, log_seq; /* what the writer published up to */
	void (*notify)(void);
	bool published; /* since the last notify */
} g = {.lock = PTHREAD_MUTEX_INITIALIZER, .first_seq = 1};

int feed_init(store_t *st, size_t capacity)
{
	feed_free();
	g.cap = capacity ? capacity : FEED_CAPACITY;
	g.ring = calloc(g.cap, sizeof *g.ring);
	if (!g.ring)
		return -ENOMEM;
	g.first_seq = 1;
	g.last_seq = 0;
	if (st && store_feed_max_ids(st, &g.event_id, &g.metric_id, &g.log_seq) < 0)
		log_warn("feed: cannot read the last ids: %s", store_errmsg(st));
	return 0;
}

void feed_free(void)
{
	pthread_mutex_lock(&g.lock);
	for (size_t i = 0; g.ring && i < g.cap; i++)
		free(g.ring[i].frame);
	free(g.ring);
	g.ring = NULL;
	pthread_mutex_unlock(&g.lock);
}

void feed_set_notify(void (*fn)(void))
{
	g.notify = fn;
}

/* Append one entry whose data is `json` (`len` bytes). */
static void s_publish(feed_type_t type, const char *job_id, int rank, int attempt, int64_t line_seq,
                      const char *json, size_t len)
{
	if (!g.ring)
		return;
	pthread_mutex_lock(&g.lock);
	uint64_t seq = g.last_seq + 1;
	size_t n = len + 64;
	char *frame = malloc(n);
	if (!frame) {
		pthread_mutex_unlock(&g.lock);
		return;
	}
	int k = snprintf(frame, n, "id: %" PRIu64 "\nevent: %s\ndata: ", seq, s_type_names[type]);
	memcpy(frame + k, json, len);
	memcpy(frame + k + len, "\n\n", 3);
	feed_entry_t *e = &g.ring[seq % g.cap];
	free(e->frame);
	*e = (feed_entry_t){.seq = seq, .type = type, .rank = rank, .attempt = attempt, .line_seq = line_seq,
	                    .frame = frame, .frame_len = (size_t)k + len + 2};
	snprintf(e->job_id, sizeof e->job_id, "%s", job_id ? job_id : "");
	g.last_seq = seq;
	if (seq - g.first_seq >= g.cap)
		g.first_seq = seq - g.cap + 1;
	g.published = true;
	pthread_mutex_unlock(&g.lock);
}

static void s_publish_json(feed_type_t type, const char *job_id, int rank, int attempt, int64_t line_seq,
                           json_t *doc)
{
	char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_decref(doc);
	if (text)
		s_publish(type, job_id, rank, attempt, line_seq, text, strlen(text));
	free(text);
}

/* ---- workers ---- */

#define S_MAX_NODES 32

static char s_nodes[S_MAX_NODES][256]; /* changed in this transaction */
static int s_n_nodes;
static bool s_all_nodes;

void feed_worker_changed(const char *node)
{
	for (int i = 0; i < s_n_nodes; i++)
		if (strcmp(s_nodes[i], node) == 0)
			return;
	if (s_n_nodes == S_MAX_NODES) {
		s_all_nodes = true;
		return;
	}
	snprintf(s_nodes[s_n_nodes++], sizeof s_nodes[0], "%s", node);
}

typedef struct {
	store_t *st;
	const char *node;
	json_t *ranks;
	json_int_t n_running;
} worker_ctx_t;

static int s_worker_rank(const store_rank_t *r, void *cls)
{
	worker_ctx_t *c = cls;
	if (strcmp(r->node, c->node) != 0)
		return 0;
	c->n_running += strcmp(r->state, "placed") == 0 || strcmp(r->state, "joined") == 0;
	json_t *v = json_pack("{so si si s{so si} so}", "job", jobview_string(r->job_id), "attempt", r->attempt,
	                      "rank", r->rank, "device", "kind", jobview_string(r->device_kind), "index",
	                      r->device_index, "state", jobview_string(r->state));
	return v && json_array_append_new(c->ranks, v) == 0 ? 0 : -ENOMEM;
}

/* The worker object exactly as GET /v1/workers shows it (opsapi.c). */
static int s_worker(const store_worker_t *w, void *cls)
{
	bool want = s_all_nodes;
	for (int i = 0; i < s_n_nodes && !want; i++)
		want = strcmp(s_nodes[i], w->node) == 0;
	if (!want)
		return 0;
	worker_ctx_t c = {.st = cls, .node = w->node, .ranks = json_array()};
	if (!c.ranks || store_rank_list_active(c.st, s_worker_rank, &c) < 0) {
		json_decref(c.ranks);
		return 0;
	}
	json_t *devices = json_loads(w->devices_json ? w->devices_json : "null", JSON_DECODE_ANY, NULL);
	json_t *obj = json_pack("{so so so so so sI so}", "node", jobview_string(w->node), "state",
	                        jobview_string(w->state), "devices", devices, "last_heartbeat",
	                        w->has_heartbeat ? jobview_time(w->last_heartbeat_us) : json_null(), "registered_at",
	                        w->registered_at_us ? jobview_time(w->registered_at_us) : json_null(),
	                        "running_ranks", c.n_running, "ranks", c.ranks);
	store_key_t k; /* its CURVE key, as workerapi_annotate_keys adds it */
	if (obj)
		json_object_set_new(obj, "key", store_key_for_node(c.st, w->node, &k) == 0
		                                    ? json_pack("{s:I, s:s}", "id", (json_int_t)k.id, "name", k.name)
		                                    : json_null());
	s_publish_json(FEED_WORKER, "", -1, -1, 0, obj);
	return 0;
}

json_t *feed_log_line_json(const store_log_line_t *l)
{
	return json_pack("{s:I, s:i, s:i, s:s, s:o, s:s}", "seq", (json_int_t)l->seq, "rank", l->rank, "attempt",
	                 l->attempt, "stream", l->stream ? "stderr" : "stdout", "time", jobview_time(l->time_us),
	                 "text", l->text);
}

static int s_on_metric(int64_t id, const store_metric_t *m, void *cls)
{
	(void)cls;
	s_publish_json(FEED_METRICS, m->job_id, -1, -1, 0, jobview_metric(m));
	g.metric_id = id;
	return 0;
}

static int s_on_log(const char *job_id, const store_log_line_t *l, void *cls)
{
	(void)cls;
	s_publish_json(FEED_LOG, job_id, l->rank, l->attempt, l->seq, feed_log_line_json(l));
	g.log_seq = l->seq;
	return 0;
}

static int s_on_event(const store_event_t *ev, void *cls)
{
	store_t *st = cls;
	g.event_id = ev->id;
	s_publish_json(FEED_EVENT, ev->job_id, -1, -1, 0, jobview_event(ev));
	if (!ev->to_state)
		return 0;
	s_publish_json(FEED_STATE, ev->job_id, -1, -1, 0,
	               json_pack("{s:s, s:s, s:o, s:i}", "job", ev->job_id, "state", ev->to_state, "reason",
	                         jobview_string(ev->reason), "attempt", ev->attempt));
	store_job_t job;
	memset(&job, 0, sizeof job);
	if (store_job_get(st, ev->job_id, &job) == 0) {
		sbuf_t b = {0};
		jobview_job(&b, &job);
		if (!b.failed && b.data)
			s_publish(FEED_JOB, ev->job_id, -1, -1, 0, b.data, b.len);
		sbuf_free(&b);
		store_job_clear(&job);
	}
	store_job_state_t state;
	if (store_job_state_parse(ev->to_state, &state) == 0 && store_job_state_is_final(state))
		s_publish_json(FEED_END, ev->job_id, -1, -1, 0,
		               json_pack("{s:s, s:s}", "job", ev->job_id, "state", ev->to_state));
	return 0;
}

void feed_collect(store_t *st)
{
	if (!g.ring)
		return;
	/* a job's rows and lines before its end */
	int r = store_feed_metrics(st, g.metric_id, s_on_metric, NULL);
	if (r == 0)
		r = store_feed_logs(st, g.log_seq, s_on_log, NULL);
	if (r == 0)
		r = store_feed_events(st, g.event_id, s_on_event, st);
	if (r == 0 && (s_n_nodes > 0 || s_all_nodes))
		r = store_worker_list(st, s_worker, st);
	s_n_nodes = 0;
	s_all_nodes = false;
	if (r < 0)
		log_warn("feed: cannot read what was committed: %s", store_errmsg(st));
	pthread_mutex_lock(&g.lock);
	bool any = g.published;
	g.published = false;
	pthread_mutex_unlock(&g.lock);
	if (any && g.notify)
		g.notify();
}

uint64_t feed_last_seq(void)
{
	pthread_mutex_lock(&g.lock);
	uint64_t s = g.last_seq;
	pthread_mutex_unlock(&g.lock);
	return s;
}

uint64_t feed_published_total(void)
{
	return feed_last_seq();
}

int feed_read(uint64_t after, feed_fn fn, void *cls, uint64_t *ret_last)
{
	pthread_mutex_lock(&g.lock);
	*ret_last = after;
	if (after > g.last_seq || (after + 1 < g.first_seq)) {
		pthread_mutex_unlock(&g.lock);
		return -ESTALE;
	}
	for (uint64_t s = after + 1; g.ring && s <= g.last_seq; s++) {
		const feed_entry_t *e = &g.ring[s % g.cap];
		if (!fn(e, cls))
			break;
		*ret_last = s;
	}
	pthread_mutex_unlock(&g.lock);
	return 0;
}
