/*
 * wire_probe: sends malformed and well-formed-but-unknown messages to
 * ringmasterd's ZeroMQ ROUTER and checks that each gets an [RMW1] [ERROR]
 * [json] reply. Usage: wire_probe ENDPOINT. Exit 0 when every probe is
 * answered, 1 otherwise. Driven by test_wire.py.
 */
#include <stdio.h>
#include <string.h>

#include <zmq.h>

static int probe(void *ctx, const char *endpoint, const char *const *frames, const size_t *lens,
                 int n, const char *label)
{
	void *s = zmq_socket(ctx, ZMQ_DEALER);
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
	char buf[3][512];
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
	int bad = 0;
	bad += probe(ctx, argv[1], f1, l1, 1, "one frame");
	bad += probe(ctx, argv[1], f2, l2, 3, "wrong version");
	bad += probe(ctx, argv[1], f3, l3, 3, "bad json");
	bad += probe(ctx, argv[1], f4, l4, 12, "twelve empty frames");
	bad += probe(ctx, argv[1], f5, l5, 3, "big frames");
	zmq_ctx_term(ctx);
	return bad ? 1 : 0;
}
