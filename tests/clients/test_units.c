/*
 * Unit tests of ringctl's pure modules: table.c (widths, sanitizing,
 * truncation, alignment), report.c (the one-line error message), the
 * durations of `token create --expires` and the config file (ctlconf.c). The REST
 * side is tested against a mock server (test_mock.py) and the real daemon
 * (test_ringctl.py).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands_tokens.h"
#include "ctlconf.h"
#include "report.h"
#include "table.h"

static int n_failed;

#define CHECK(cond)                                                                                \
	do {                                                                                           \
		if (!(cond)) {                                                                             \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
			n_failed++;                                                                            \
		}                                                                                          \
	} while (0)

#define CHECK_STR(got, want)                                                                       \
	do {                                                                                           \
		const char *g_ = (got), *w_ = (want);                                                      \
		if (!g_ || strcmp(g_, w_) != 0) {                                                          \
			fprintf(stderr, "%s:%d: got \"%s\", want \"%s\"\n", __FILE__, __LINE__,                \
			        g_ ? g_ : "(null)", w_);                                                       \
			n_failed++;                                                                            \
		}                                                                                          \
	} while (0)

static void test_sanitize(void)
{
	char *s = table_sanitize("a\nb\x1b[31mc\x7f", 0);
	CHECK_STR(s, "a?b?[31mc?");
	free(s);
	/* Issue 22: bidi controls (Trojan Source), C1 controls (\x9b is CSI on
	 * some terminals), separators and broken UTF-8, each escaped or '?' */
	static const struct {
		const char *in, *want;
	} cases[] = {
		{"evil\xe2\x80\xaegnp.exe", "evil\\u202egnp.exe"},           /* U+202E RLO */
		{"a\xe2\x80\xaa" "b\xe2\x80\xac" "c", "a\\u202ab\\u202cc"},          /* LRE, PDF */
		{"\xe2\x81\xa6x\xe2\x81\xa9", "\\u2066x\\u2069"},               /* LRI, PDI */
		{"\xe2\x80\x8e\xe2\x80\x8f\xd8\x9c", "\\u200e\\u200f\\u061c"}, /* LRM RLM ALM */
		{"x\xc2\x9b" "31m", "x\\u009b31m"},                              /* C1 CSI */
		{"l\xe2\x80\xa8m", "l\\u2028m"},                             /* line separator */
		{"bad\xff\xc3(", "bad?" "?("},                                    /* not UTF-8 */
		{"\xe0\x80\xaf", "???"},                                      /* overlong '/' */
		{"\xc3\xa9t\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80", "\xc3\xa9t\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		s = table_sanitize(cases[i].in, 0);
		CHECK_STR(s, cases[i].want);
		free(s);
	}
	s = table_sanitize("ab\xe2\x80\xae" "cdefgh", 8);
	CHECK_STR(s, "ab\\u2...");
	free(s);
	s = table_sanitize("abcdefghij", 6);
	CHECK_STR(s, "abc...");
	free(s);
	s = table_sanitize("abcdef", 6);
	CHECK_STR(s, "abcdef");
	free(s);
	/* Cut on character boundaries: "ééééééé" is 7 characters, 14 bytes. */
	s = table_sanitize("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 5);
	CHECK_STR(s, "\xc3\xa9\xc3\xa9...");
	free(s);
	CHECK(table_display_width("\xc3\xa9t\xc3\xa9") == 3);
	CHECK(table_display_width("") == 0);
}

static void test_table_print(void)
{
	static const char *const headers[] = {"ID", "NAME", "STATE"};
	table_t *t = table_new(3, headers);
	CHECK(t != NULL);
	if (!t)
		return;
	const char *r1[] = {"1", "\xc3\xa9t\xc3\xa9", "queued"};
	const char *r2[] = {"1234", NULL, "cancelled"};
	CHECK(table_add_row(t, r1) == 0);
	CHECK(table_add_row(t, r2) == 0);
	CHECK(table_n_rows(t) == 2);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	CHECK(f != NULL);
	if (f) {
		table_print(t, f);
		fclose(f);
		CHECK_STR(buf, "ID    NAME  STATE\n"
		               "1     \xc3\xa9t\xc3\xa9   queued\n"
		               "1234  -     cancelled\n");
		free(buf);
	}
	table_free(t);
	table_free(NULL);
	CHECK(table_new(0, headers) == NULL);
}

static void test_report(void)
{
	char line[512];
	const char *problem = "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,"
	                      "\"detail\":\"model.n_embd (64) must be divisible by model.n_head (5)\","
	                      "\"pointer\":\"/model/n_head\"}";
	report_format_http_error(400, "application/problem+json", problem, strlen(problem), line,
	                         sizeof line);
	CHECK_STR(line, "400 Bad Request: model.n_embd (64) must be divisible by model.n_head (5) "
	                "(at /model/n_head)");

	const char *no_title = "{\"detail\":\"no job 42\\nhere\"}";
	report_format_http_error(404, "application/problem+json", no_title, strlen(no_title), line,
	                         sizeof line);
	CHECK_STR(line, "404 Not Found: no job 42 here");

	const char *html = "<html>\r\n<body>bad gateway</body></html>\n";
	report_format_http_error(502, "text/html", html, strlen(html), line, sizeof line);
	CHECK_STR(line, "502 Bad Gateway: <html> <body>bad gateway</body></html>");

	report_format_http_error(599, NULL, "", 0, line, sizeof line);
	CHECK_STR(line, "599");

	/* Cut, never overflowing. */
	char small[16];
	report_format_http_error(400, "application/problem+json", problem, strlen(problem), small,
	                         sizeof small);
	CHECK(strlen(small) == sizeof small - 1);
	CHECK(strncmp(small, "400 Bad Request", 15) == 0);

	CHECK_STR(report_reason_phrase(415), "Unsupported Media Type");
	CHECK(report_reason_phrase(299) == NULL);
}

static void test_duration(void)
{
	long long s = 0;
	CHECK(cmd_parse_duration("30d", &s) == 0 && s == 30LL * 86400);
	CHECK(cmd_parse_duration("12h", &s) == 0 && s == 12 * 3600);
	CHECK(cmd_parse_duration("90m", &s) == 0 && s == 90 * 60);
	CHECK(cmd_parse_duration("45s", &s) == 0 && s == 45);
	CHECK(cmd_parse_duration("3600", &s) == 0 && s == 3600);
	static const char *const bad[] = {"", "0", "-1d", "1w", "1dd", "d", "99999999999999d", "1.5h", " 1d"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CHECK(cmd_parse_duration(bad[i], &s) < 0);
}

/* Write `text` to a temporary config file and load it through RINGCTL_CONFIG. */
static int load_conf(const char *text, ctlconf_t *ret, char *err, size_t errlen)
{
	char path[] = "/tmp/ringctl-conf-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		return -2;
	FILE *f = fdopen(fd, "w");
	fputs(text, f);
	fclose(f);
	setenv("RINGCTL_CONFIG", path, 1);
	int r = ctlconf_load(ret, err, errlen);
	unlink(path);
	return r;
}

static void test_config(void)
{
	ctlconf_t c;
	char err[512] = "";
	CHECK(load_conf("# mine\n[ringctl]\nserver = http://h:8080  \ntoken=rmt_x # comment\ncacert = /ca.pem\n\n", &c, err,
	                sizeof err) == 0);
	CHECK_STR(c.server, "http://h:8080");
	CHECK_STR(c.token, "rmt_x");
	CHECK_STR(c.cacert, "/ca.pem");
	CHECK(load_conf("tokn = x\n", &c, err, sizeof err) == -1 && strstr(err, ":1: unknown key \"tokn\""));
	CHECK(load_conf("server\n", &c, err, sizeof err) == -1 && strstr(err, ":1: expected"));
	setenv("RINGCTL_CONFIG", "/nonexistent/ringctl.conf", 1);
	CHECK(ctlconf_load(&c, err, sizeof err) == 0 && c.path[0] == '\0' && c.token[0] == '\0');
	char tok[64];
	CHECK(ctlconf_read_token_file("/nonexistent/admin.token", tok, sizeof tok) < 0);
}

int main(void)
{
	test_duration();
	test_config();
	test_sanitize();
	test_table_print();
	test_report();
	if (n_failed) {
		fprintf(stderr, "%d check(s) failed\n", n_failed);
		return 1;
	}
	printf("all checks passed\n");
	return 0;
}
