/*
 * wire_shell: plays agents and ranks against ringmasterd's ZeroMQ ROUTER,
 * driven line by line on stdin by a Python test (no pyzmq here). Each socket
 * is a DEALER with a chosen identity; what arrives on it is queued until the
 * test asks for it. Commands (one per line, answers one line on stdout):
 *
 *   dealer NAME IDENTITY ENDPOINT     connect a socket                -> OK
 *   curve NAME IDENTITY ENDPOINT SERVERKEY PUBLIC SECRET
 *                                     connect a CURVE client socket (keys
 *                                     in Z85)                         -> OK
 *   keypair                           a new CURVE key pair  -> KEY PUBLIC SECRET
 *   send NAME TYPE JSON...            send [RMW1] [TYPE] [JSON]       -> OK
 *   beat NAME NODE MS                 send HEARTBEAT {node} every MS
 *                                     (0 stops)                       -> OK
 *   recv NAME MS [TYPE]               the first queued message of TYPE
 *                                     (default: any but HEARTBEAT, and
 *                                     HEARTBEATs before it are dropped),
 *                                     waiting up to MS  -> MSG TYPE JSON | TIMEOUT
 *   count NAME TYPE                   queued messages of TYPE         -> N
 *   close NAME                        close the socket                -> OK
 *   sleep MS                          keep serving sockets for MS     -> OK
 *   quit
 *
 * Heartbeats keep going while the shell waits in recv or sleep. A bad
 * command answers ERR and a reason.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#define MAX_SOCKS 64
#define LINE_BYTES (4 << 20)

typedef struct msg {
	struct msg *next;
	char type[32];
	char *json;
} msg_t;

typedef struct {
	char name[64];
	void *sock;
	msg_t *head, *tail;
	char beat_node[256];
	int beat_ms;
	int64_t next_beat_us;
} sock_t;

static sock_t socks[MAX_SOCKS];
static void *ctx;

static int64_t mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static sock_t *find(const char *name)
{
	for (int i = 0; i < MAX_SOCKS; i++)
		if (socks[i].sock && strcmp(socks[i].name, name) == 0)
			return &socks[i];
	return NULL;
}

static int send3(void *sock, const char *type, const char *json)
{
	if (zmq_send(sock, "RMW1", 4, ZMQ_SNDMORE) < 0 || zmq_send(sock, type, strlen(type), ZMQ_SNDMORE) < 0 ||
	    zmq_send(sock, json, strlen(json), 0) < 0)
		return -1;
	return 0;
}

/* Read every waiting message of s into its queue. */
static void drain(sock_t *s)
{
	for (;;) {
		zmq_msg_t parts[3];
		int n = 0, more = 1;
		while (more) {
			zmq_msg_t m;
			zmq_msg_init(&m);
			if (zmq_msg_recv(&m, s->sock, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
				zmq_msg_close(&m);
				for (int i = 0; i < n && i < 3; i++)
					zmq_msg_close(&parts[i]);
				return;
			}
			more = zmq_msg_more(&m);
			if (n < 3)
				parts[n] = m;
			else
				zmq_msg_close(&m);
			n++;
		}
		msg_t *q = calloc(1, sizeof *q);
		if (n == 3 && q) {
			size_t tl = zmq_msg_size(&parts[1]);
			if (tl >= sizeof q->type)
				tl = sizeof q->type - 1;
			memcpy(q->type, zmq_msg_data(&parts[1]), tl);
			size_t jl = zmq_msg_size(&parts[2]);
			q->json = malloc(jl + 1);
			memcpy(q->json, zmq_msg_data(&parts[2]), jl);
			q->json[jl] = '\0';
			for (size_t i = 0; i < jl; i++)
				if (q->json[i] == '\n')
					q->json[i] = ' ';
		} else if (q) {
			snprintf(q->type, sizeof q->type, "BADFRAMES%d", n);
			q->json = strdup("{}");
		}
		for (int i = 0; i < n && i < 3; i++)
			zmq_msg_close(&parts[i]);
		if (!q)
			continue;
		if (s->tail)
			s->tail->next = q;
		else
			s->head = q;
		s->tail = q;
	}
}

/* Serve sockets (heartbeats, receiving) for up to `ms`, or until stdin is
 * readable when `until_stdin`. */
static void serve(int ms, int until_stdin)
{
	int64_t end = mono_us() + (int64_t)ms * 1000;
	for (;;) {
		int64_t now = mono_us();
		for (int i = 0; i < MAX_SOCKS; i++) {
			sock_t *s = &socks[i];
			if (s->sock && s->beat_ms > 0 && now >= s->next_beat_us) {
				char json[400];
				snprintf(json, sizeof json, "{\"node\":\"%s\"}", s->beat_node);
				send3(s->sock, "HEARTBEAT", json);
				s->next_beat_us = now + (int64_t)s->beat_ms * 1000;
			}
		}
		zmq_pollitem_t items[MAX_SOCKS + 1];
		int idx[MAX_SOCKS + 1];
		int n = 0;
		for (int i = 0; i < MAX_SOCKS; i++)
			if (socks[i].sock) {
				items[n] = (zmq_pollitem_t){.socket = socks[i].sock, .events = ZMQ_POLLIN};
				idx[n++] = i;
			}
		if (until_stdin) {
			items[n] = (zmq_pollitem_t){.socket = NULL, .fd = 0, .events = ZMQ_POLLIN};
			idx[n++] = -1;
		}
		long wait = (long)((end - now) / 1000);
		if (wait > 20)
			wait = 20;
		if (wait < 0)
			wait = 0;
		zmq_poll(items, n, wait);
		for (int k = 0; k < n; k++) {
			if (!(items[k].revents & ZMQ_POLLIN))
				continue;
			if (idx[k] < 0)
				return;
			drain(&socks[idx[k]]);
		}
		if (mono_us() >= end && !until_stdin)
			return;
	}
}

static msg_t *take(sock_t *s, const char *type)
{
	msg_t **pp = &s->head, *prev = NULL;
	while (*pp) {
		msg_t *m = *pp;
		bool match = type ? strcmp(m->type, type) == 0 : strcmp(m->type, "HEARTBEAT") != 0;
		if (match) {
			*pp = m->next;
			if (s->tail == m)
				s->tail = prev;
			return m;
		}
		if (!type) { /* drop heartbeats before the message wanted */
			*pp = m->next;
			if (s->tail == m)
				s->tail = prev;
			free(m->json);
			free(m);
			continue;
		}
		prev = m;
		pp = &m->next;
	}
	return NULL;
}

static void reply(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void reply(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static void close_sock(sock_t *s)
{
	zmq_close(s->sock);
	while (s->head) {
		msg_t *m = s->head;
		s->head = m->next;
		free(m->json);
		free(m);
	}
	memset(s, 0, sizeof *s);
}

int main(void)
{
	ctx = zmq_ctx_new();
	char *line = malloc(LINE_BYTES);
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (;;) {
		serve(0, 1);
		if (!fgets(line, LINE_BYTES, stdin))
			break;
		line[strcspn(line, "\n")] = '\0';
		char *save = NULL;
		char *cmd = strtok_r(line, " ", &save);
		if (!cmd)
			continue;
		if (strcmp(cmd, "quit") == 0)
			break;
		if (strcmp(cmd, "sleep") == 0) {
			char *ms = strtok_r(NULL, " ", &save);
			serve(ms ? atoi(ms) : 0, 0);
			reply("OK");
			continue;
		}
		if (strcmp(cmd, "keypair") == 0) {
			char pub[41], sec[41];
			if (zmq_curve_keypair(pub, sec) != 0)
				reply("ERR keypair: %s", zmq_strerror(zmq_errno()));
			else
				reply("KEY %s %s", pub, sec);
			continue;
		}
		char *name = strtok_r(NULL, " ", &save);
		if (!name) {
			reply("ERR missing socket name");
			continue;
		}
		sock_t *s = find(name);
		if (strcmp(cmd, "dealer") == 0 || strcmp(cmd, "curve") == 0) {
			char *ident = strtok_r(NULL, " ", &save), *ep = strtok_r(NULL, " ", &save);
			char *server = NULL, *pub = NULL, *sec = NULL;
			if (cmd[0] == 'c') {
				server = strtok_r(NULL, " ", &save);
				pub = strtok_r(NULL, " ", &save);
				sec = strtok_r(NULL, " ", &save);
			}
			if (s || !ident || !ep || (cmd[0] == 'c' && !sec)) {
				reply("ERR usage: dealer NAME IDENTITY ENDPOINT | curve NAME IDENTITY ENDPOINT SERVERKEY PUBLIC "
				      "SECRET (new name)");
				continue;
			}
			for (int i = 0; i < MAX_SOCKS && !s; i++)
				if (!socks[i].sock)
					s = &socks[i];
			if (!s) {
				reply("ERR too many sockets");
				continue;
			}
			snprintf(s->name, sizeof s->name, "%s", name);
			s->sock = zmq_socket(ctx, ZMQ_DEALER);
			int linger = 0;
			zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof linger);
			zmq_setsockopt(s->sock, ZMQ_ROUTING_ID, ident, strlen(ident));
			if (sec && (zmq_setsockopt(s->sock, ZMQ_CURVE_SERVERKEY, server, strlen(server)) != 0 ||
			            zmq_setsockopt(s->sock, ZMQ_CURVE_PUBLICKEY, pub, strlen(pub)) != 0 ||
			            zmq_setsockopt(s->sock, ZMQ_CURVE_SECRETKEY, sec, strlen(sec)) != 0)) {
				reply("ERR curve keys: %s", zmq_strerror(zmq_errno()));
				close_sock(s);
				continue;
			}
			/* a refused handshake (an unknown key, or no CURVE against a
			 * CURVE broker) leaves no pipe to send on: give up after 1 s
			 * (answered "ERR send failed") instead of blocking for ever */
			int sndtimeo = 1000;
			zmq_setsockopt(s->sock, ZMQ_SNDTIMEO, &sndtimeo, sizeof sndtimeo);
			if (zmq_connect(s->sock, ep) != 0) {
				reply("ERR connect: %s", zmq_strerror(zmq_errno()));
				close_sock(s);
				continue;
			}
			reply("OK");
			continue;
		}
		if (!s) {
			reply("ERR no socket %s", name);
			continue;
		}
		if (strcmp(cmd, "send") == 0) {
			char *type = strtok_r(NULL, " ", &save);
			char *json = save ? save : (char *)"";
			if (!type) {
				reply("ERR usage: send NAME TYPE JSON");
				continue;
			}
			reply(send3(s->sock, type, json) == 0 ? "OK" : "ERR send failed");
		} else if (strcmp(cmd, "beat") == 0) {
			char *node = strtok_r(NULL, " ", &save), *ms = strtok_r(NULL, " ", &save);
			if (!node || !ms) {
				reply("ERR usage: beat NAME NODE MS");
				continue;
			}
			snprintf(s->beat_node, sizeof s->beat_node, "%s", node);
			s->beat_ms = atoi(ms);
			s->next_beat_us = 0;
			reply("OK");
		} else if (strcmp(cmd, "recv") == 0) {
			char *ms = strtok_r(NULL, " ", &save), *type = strtok_r(NULL, " ", &save);
			int64_t end = mono_us() + (int64_t)(ms ? atoi(ms) : 0) * 1000;
			msg_t *m = NULL;
			for (;;) {
				drain(s);
				m = take(s, type);
				if (m || mono_us() >= end)
					break;
				serve(20, 0);
			}
			if (m) {
				reply("MSG %s %s", m->type, m->json);
				free(m->json);
				free(m);
			} else {
				reply("TIMEOUT");
			}
		} else if (strcmp(cmd, "count") == 0) {
			char *type = strtok_r(NULL, " ", &save);
			drain(s);
			int n = 0;
			for (msg_t *m = s->head; m; m = m->next)
				n += type && strcmp(m->type, type) == 0;
			reply("%d", n);
		} else if (strcmp(cmd, "close") == 0) {
			close_sock(s);
			reply("OK");
		} else {
			reply("ERR unknown command %s", cmd);
		}
	}
	for (int i = 0; i < MAX_SOCKS; i++)
		if (socks[i].sock)
			close_sock(&socks[i]);
	free(line);
	zmq_ctx_term(ctx);
	return 0;
}
