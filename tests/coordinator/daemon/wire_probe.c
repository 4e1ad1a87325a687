/*
 * wire_probe: sends malformed messages to ringmasterd's ZeroMQ ROUTER and
 * checks that each gets an [RMW1] [ERROR] [{"code": N, ...}] reply with the
 * code api/wire.h gives it (400 malformed, 404 unknown type, 413 too large).
 * Usage: wire_probe ENDPOINT. Exit 0 when every probe is answered as
 * expected, 1 otherwise. Driven by test_wire.py.
 */
#include <stdio.h>
#include <string.h>

#include <zmq.h>

static int probe(void *ctx, const char *endpoint, const char *const *frames, const size_t *lens,
                 int n, const char *label, int want_code)
{
	void *s = zmq_socket(ctx, ZMQ_DEALER);
	zmq_setsockopt(s, ZMQ_ROUTING_ID, "agent/probe", 11);
	int linger = 0, timeout = 5000;
	zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
	zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
	if (zmq_connect(s, endpoint) != 0) {
		fprintf(stderr, "%s: connect: %s\n", label, zmq_strerror(zmq_errno()));
		zmq_close(s);
		return 1;
	}
	for (int i = 0; i < n; i++)
		zmq_send(s, frames[i], lens[i], i + 1 < n ? ZMQ_SNDMORE : 0);
	char buf[3][1024];
	int got[3] = {0, 0, 0};
	int k = 0, more = 1;
	while (more && k < 3) {
		got[k] = zmq_recv(s, buf[k], sizeof buf[k] - 1, 0);
		if (got[k] < 0) {
			fprintf(stderr, "%s: no reply: %s\n", label, zmq_strerror(zmq_errno()));
			zmq_close(s);
			return 1;
		}
		buf[k][got[k] < (int)sizeof buf[k] - 1 ? got[k] : (int)sizeof buf[k] - 1] = '\0';
		size_t sz = sizeof more;
		zmq_getsockopt(s, ZMQ_RCVMORE, &more, &sz);
		k++;
	}
	zmq_close(s);
	if (k != 3 || more || strcmp(buf[0], "RMW1") != 0 || strcmp(buf[1], "ERROR") != 0 || buf[2][0] != '{') {
		fprintf(stderr, "%s: unexpected reply (%d frames): %s | %s\n", label, k, buf[0], buf[1]);
		return 1;
	}
	char want[32];
	snprintf(want, sizeof want, "\"code\":%d", want_code);
	if (!strstr(buf[2], want)) {
		fprintf(stderr, "%s: expected code %d, got %s\n", label, want_code, buf[2]);
		return 1;
	}
	printf("%s: ERROR %s\n", label, buf[2]);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: wire_probe ENDPOINT\n");
		return 2;
	}
	void *ctx = zmq_ctx_new();
	static char big[200000];
	memset(big, 'x', sizeof big);
	/* a JSON object just over the payload limit (1 MiB) */
	static char huge[(1 << 20) + 64];
	memset(huge, ' ', sizeof huge);
	huge[0] = '{';
	huge[sizeof huge - 1] = '}';
	const char *f1[] = {"hello"};
	size_t l1[] = {5};
	const char *f2[] = {"RMW9", "HEARTBEAT", "{}"};
	size_t l2[] = {4, 9, 2};
	const char *f3[] = {"RMW1", "HEARTBEAT", "{not json"};
	size_t l3[] = {4, 9, 9};
	const char *f4[] = {"", "", "", "", "", "", "", "", "", "", "", ""};
	size_t l4[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
	const char *f5[] = {"RMW1", big, big};
	size_t l5[] = {4, sizeof big, sizeof big};
	const char *f6[] = {"RMW1", "BOGUS", "{}"};
	size_t l6[] = {4, 5, 2};
	const char *f7[] = {"RMW1", "REGISTER", "{\"node\":\"probe\",\"devices\":[]}"};
	size_t l7[] = {4, 8, strlen(f7[2])};
	const char *f8[] = {"RMW1", "REGISTER", "{\"node\":7,\"devices\":[],\"ranks\":[]}"};
	size_t l8[] = {4, 8, strlen(f8[2])};
	const char *f9[] = {"RMW1", "HEARTBEAT", huge};
	size_t l9[] = {4, 9, sizeof huge};
	const char *f10[] = {"RMW1", "HEARTBEAT", "{\"node\":\"probe\"}", "extra", "frames"};
	size_t l10[] = {4, 9, 16, 5, 6};
	const char *f11[] = {"RMW1", "HEARTBEAT"};
	size_t l11[] = {4, 9};
	const char *f12[] = {"RMW1", "HEARTBEAT", "[1, 2]"};
	size_t l12[] = {4, 9, 6};
	const char *f13[] = {"RMW1", "KV_GET", "{\"key\":\"k\",\"timeout_ms\":\"soon\"}"};
	size_t l13[] = {4, 6, strlen(f13[2])};
	int bad = 0;
	bad += probe(ctx, argv[1], f1, l1, 1, "one frame", 400);
	bad += probe(ctx, argv[1], f2, l2, 3, "wrong version", 400);
	bad += probe(ctx, argv[1], f3, l3, 3, "bad json", 400);
	bad += probe(ctx, argv[1], f4, l4, 12, "twelve empty frames", 400);
	bad += probe(ctx, argv[1], f5, l5, 3, "big frames (an unknown 200 kB type)", 404);
	bad += probe(ctx, argv[1], f6, l6, 3, "unknown type", 404);
	bad += probe(ctx, argv[1], f7, l7, 3, "missing field", 400);
	bad += probe(ctx, argv[1], f8, l8, 3, "wrong-typed field", 400);
	bad += probe(ctx, argv[1], f9, l9, 3, "oversized payload", 413);
	bad += probe(ctx, argv[1], f10, l10, 5, "too many frames", 400);
	bad += probe(ctx, argv[1], f11, l11, 2, "too few frames", 400);
	bad += probe(ctx, argv[1], f12, l12, 3, "payload not an object", 400);
	bad += probe(ctx, argv[1], f13, l13, 3, "wrong-typed timeout", 400);
	zmq_ctx_term(ctx);
	return bad ? 1 : 0;
}
