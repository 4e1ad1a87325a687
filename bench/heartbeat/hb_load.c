/*
 * hb_load: heartbeat load generator for ringmasterd. One process, N DEALER
 * sockets with identities agent/sim-<i>; each REGISTERs (one cpu device),
 * then sends HEARTBEAT {node} every interval, the agents' send times spread
 * evenly over the interval. It counts what the coordinator sends back
 * (REGISTERED, HEARTBEAT, ERROR) and the longest gap between two coordinator
 * HEARTBEATs seen by any agent.
 *
 * Usage: hb_load ENDPOINT N_AGENTS DURATION_S [INTERVAL_MS]
 * Prints one JSON object on stdout at the end. Exit 1 when an agent was not
 * answered REGISTERED or got an ERROR (an ERROR 404 means the coordinator
 * declared a heartbeating agent dead: a false expiry).
 *
 * The loop wakes every TICK_MS, sends the heartbeats due, then drains the
 * sockets that are readable (one zmq_poll over all of them), so that the
 * generator itself stays cheap beside the daemon it measures.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <zmq.h>

#define TICK_MS 25

typedef struct {
	void *sock;
	int registered;
	long n_hb_in;
	long n_errors;
	int64_t last_hb_in_us;
	int64_t max_gap_us;
} agent_t;

static int64_t mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int send3(void *sock, const char *type, const char *json)
{
	if (zmq_send(sock, "RMW1", 4, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
		return -1;
	zmq_send(sock, type, strlen(type), ZMQ_SNDMORE);
	zmq_send(sock, json, strlen(json), 0);
	return 0;
}

static void drain(agent_t *a, int64_t now, char *last_error, size_t errlen)
{
	for (;;) {
		char part[3][512];
		int n = 0, more = 1, got[3] = {0, 0, 0};
		while (more) {
			int r = zmq_recv(a->sock, n < 3 ? part[n] : part[2], 511, n == 0 ? ZMQ_DONTWAIT : 0);
			if (r < 0)
				return;
			if (n < 3)
				got[n] = r > 511 ? 511 : r;
			size_t sz = sizeof more;
			zmq_getsockopt(a->sock, ZMQ_RCVMORE, &more, &sz);
			n++;
		}
		if (n != 3)
			continue;
		part[1][got[1]] = '\0';
		part[2][got[2]] = '\0';
		if (strcmp(part[1], "REGISTERED") == 0) {
			a->registered = 1;
		} else if (strcmp(part[1], "HEARTBEAT") == 0) {
			if (a->last_hb_in_us && now - a->last_hb_in_us > a->max_gap_us)
				a->max_gap_us = now - a->last_hb_in_us;
			a->last_hb_in_us = now;
			a->n_hb_in++;
		} else if (strcmp(part[1], "ERROR") == 0) {
			a->n_errors++;
			snprintf(last_error, errlen, "%s", part[2]);
		}
	}
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: hb_load ENDPOINT N_AGENTS DURATION_S [INTERVAL_MS]\n");
		return 2;
	}
	const char *endpoint = argv[1];
	int n = atoi(argv[2]);
	double duration_s = atof(argv[3]);
	int interval_ms = argc > 4 ? atoi(argv[4]) : 1000;
	if (n < 1 || duration_s <= 0 || interval_ms < 1) {
		fprintf(stderr, "hb_load: bad arguments\n");
		return 2;
	}
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	void *ctx = zmq_ctx_new();
	zmq_ctx_set(ctx, ZMQ_MAX_SOCKETS, n + 16);
	agent_t *agents = calloc((size_t)n, sizeof *agents);
	zmq_pollitem_t *items = calloc((size_t)n, sizeof *items);
	if (!agents || !items)
		return 1;
	char json[256], last_error[512] = "";
	for (int i = 0; i < n; i++) {
		agent_t *a = &agents[i];
		a->sock = zmq_socket(ctx, ZMQ_DEALER);
		if (!a->sock) {
			fprintf(stderr, "hb_load: socket %d: %s\n", i, zmq_strerror(zmq_errno()));
			return 1;
		}
		char ident[64];
		snprintf(ident, sizeof ident, "agent/sim-%d", i);
		int linger = 0;
		zmq_setsockopt(a->sock, ZMQ_LINGER, &linger, sizeof linger);
		zmq_setsockopt(a->sock, ZMQ_ROUTING_ID, ident, strlen(ident));
		if (zmq_connect(a->sock, endpoint) != 0) {
			fprintf(stderr, "hb_load: connect %d: %s\n", i, zmq_strerror(zmq_errno()));
			return 1;
		}
		snprintf(json, sizeof json,
		         "{\"node\":\"sim-%d\",\"devices\":[{\"kind\":\"cpu\",\"index\":0}],\"ranks\":[]}", i);
		send3(a->sock, "REGISTER", json);
		items[i] = (zmq_pollitem_t){.socket = a->sock, .events = ZMQ_POLLIN};
	}
	int64_t t0 = mono_us(), end = t0 + (int64_t)(duration_s * 1e6);
	int64_t slot_us = (int64_t)interval_ms * 1000 / n;
	if (slot_us < 1)
		slot_us = 1;
	long sent = 0, next = 0; /* heartbeat number `next` goes to agent next % n at t0 + next * slot */
	for (;;) {
		int64_t now = mono_us();
		if (now >= end)
			break;
		while (t0 + next * slot_us <= now) {
			int i = (int)(next % n);
			snprintf(json, sizeof json, "{\"node\":\"sim-%d\"}", i);
			if (send3(agents[i].sock, "HEARTBEAT", json) == 0)
				sent++;
			next++;
		}
		if (zmq_poll(items, n, 0) > 0) {
			for (int i = 0; i < n; i++)
				if (items[i].revents & ZMQ_POLLIN)
					drain(&agents[i], now, last_error, sizeof last_error);
		}
		struct timespec ts = {0, TICK_MS * 1000000L};
		nanosleep(&ts, NULL);
	}
	long registered = 0, hb_in = 0, errors = 0, never_heard = 0;
	int64_t max_gap = 0;
	for (int i = 0; i < n; i++) {
		registered += agents[i].registered;
		hb_in += agents[i].n_hb_in;
		errors += agents[i].n_errors;
		never_heard += agents[i].n_hb_in == 0;
		if (agents[i].max_gap_us > max_gap)
			max_gap = agents[i].max_gap_us;
	}
	printf("{\"agents\":%d,\"duration_s\":%.1f,\"interval_ms\":%d,\"heartbeats_sent\":%ld,"
	       "\"registered\":%ld,\"coordinator_heartbeats\":%ld,\"agents_never_heartbeated\":%ld,"
	       "\"max_coordinator_heartbeat_gap_ms\":%.1f,\"errors\":%ld,\"last_error\":\"",
	       n, duration_s, interval_ms, sent, registered, hb_in, never_heard, (double)max_gap / 1000.0, errors);
	for (const char *p = last_error; *p; p++)
		if (*p != '"' && *p != '\\')
			putchar(*p);
	printf("\"}\n");
	for (int i = 0; i < n; i++)
		zmq_close(agents[i].sock);
	zmq_ctx_term(ctx);
	free(agents);
	free(items);
	return registered == n && errors == 0 ? 0 : 1;
}
