/*
 * ringctl: the command-line client of ringmasterd's REST API. main() reads
 * the global options (--server, --token, --json, --help, --version), the
 * environment (RINGMASTER_SERVER, RINGMASTER_TOKEN) and the config file
 * (ctlconf.h, which also finds ./state/admin.token), then hands the rest of
 * the command line to one subcommand in commands.c. Exit statuses: 0 done,
 * 1 the server refused or a local error, 2 the server could not be reached,
 * 64 bad usage.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "commands.h"
#include "ctlconf.h"

#define DEFAULT_SERVER "http://127.0.0.1:8080"
#define USAGE_LINE "Usage: ringctl [--server URL] [--token TOKEN] [--cacert FILE] [--json] COMMAND [ARGS...]\n"

static void print_help(void)
{
	printf(USAGE_LINE
	       "Submit, list, inspect and cancel ringmaster training jobs.\n\n"
	       "Options (also accepted after the command):\n"
	       "  --server URL  coordinator address (default $RINGMASTER_SERVER, the config file's\n"
	       "                server, else " DEFAULT_SERVER ")\n"
	       "  --token TOKEN API token (default $RINGMASTER_TOKEN, the config file's token, else\n"
	       "                " CTLCONF_DEFAULT_ADMIN_TOKEN " when readable)\n"
	       "  --cacert FILE trust the CA certificate(s) in FILE for an https:// server\n"
	       "                (before the command only)\n"
	       "  --json        print the server's JSON instead of a table, for scripts\n"
	       "  --help        show this help and exit\n"
	       "  --version     show the version and exit\n\n"
	       "Commands:\n");
	cmd_print_list(stdout);
	printf("\nEnvironment: RINGMASTER_SERVER (server URL), RINGMASTER_TOKEN (bearer token),\n"
	       "RINGCTL_CONFIG (config file; default ~/.config/ringmaster/ringctl.conf, keys server,\n"
	       "token, cacert).\n"
	       "Exit status: 0 done, 1 the server refused the request, 2 the server could not be\n"
	       "reached, 64 bad usage. Run 'ringctl COMMAND --help' for one command.\n");
}

/* Whether a server URL names this machine's loopback (http(s)://127.x,
 * localhost or [::1]). */
static bool server_is_local(const char *url)
{
	const char *p = strstr(url, "://");
	p = p ? p + 3 : url;
	static const char *const local[] = {"127.", "localhost:", "localhost/", "[::1]"};
	for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
		if (strncmp(p, local[i], strlen(local[i])) == 0)
			return true;
	return strcmp(p, "localhost") == 0;
}

static int usage_error(const char *what, const char *arg)
{
	fprintf(stderr, "ringctl: %s%s\n" USAGE_LINE "Try 'ringctl --help' for more.\n", what, arg);
	return CTL_EXIT_USAGE;
}

int main(int argc, char **argv)
{
	enum { OPT_JSON = 1000, OPT_SERVER, OPT_HELP, OPT_VERSION, OPT_TOKEN, OPT_CACERT };
	static const struct option long_opts[] = {
		{"json", no_argument, NULL, OPT_JSON},
		{"server", required_argument, NULL, OPT_SERVER},
		{"token", required_argument, NULL, OPT_TOKEN},
		{"cacert", required_argument, NULL, OPT_CACERT},
		{"help", no_argument, NULL, OPT_HELP},
		{"version", no_argument, NULL, OPT_VERSION},
		{0, 0, 0, 0},
	};
	static ctlconf_t conf;
	static char file_token[256];
	char err[512];
	if (ctlconf_load(&conf, err, sizeof err) < 0) {
		fprintf(stderr, "ringctl: %s\n", err);
		return CTL_EXIT_USAGE;
	}
	const char *env_server = getenv("RINGMASTER_SERVER");
	const char *env_token = getenv("RINGMASTER_TOKEN");
	cmd_ctx_t ctx = {
		.server = env_server && env_server[0] ? env_server : conf.server[0] ? conf.server : DEFAULT_SERVER,
		.token = env_token && env_token[0] ? env_token : conf.token[0] ? conf.token : NULL,
	};

	opterr = 0;
	int c;
	/* "+": stop at the command name; what follows belongs to the command. */
	while ((c = getopt_long(argc, argv, "+:h", long_opts, NULL)) != -1) {
		switch (c) {
		case OPT_JSON: ctx.json = true; break;
		case OPT_SERVER: ctx.server = optarg; break;
		case OPT_CACERT: ctx.cacert = optarg; break;
		case OPT_TOKEN: ctx.token = optarg; break;
		case 'h':
		case OPT_HELP: print_help(); return CTL_EXIT_OK;
		case OPT_VERSION:
			printf("ringctl %s (libcurl %s, jansson %s)\n", RINGMASTER_VERSION,
			       curl_version_info(CURLVERSION_NOW)->version, jansson_version_str());
			return CTL_EXIT_OK;
		case ':': return usage_error("option needs a value: ", argv[optind - 1]);
		default: return usage_error("unknown option: ", argv[optind - 1]);
		}
	}
	if (optind >= argc)
		return usage_error("no command given", "");
	const cmd_t *cmd = cmd_find(argv[optind]);
	if (!cmd)
		return usage_error("unknown command: ", argv[optind]);

	/* the config file's CA when no --cacert was given */
	if (!ctx.cacert && conf.cacert[0])
		ctx.cacert = conf.cacert;
	/* the local admin token goes to a local server only */
	if (!ctx.token && server_is_local(ctx.server) &&
	    ctlconf_read_token_file(CTLCONF_DEFAULT_ADMIN_TOKEN, file_token, sizeof file_token) == 0)
		ctx.token = file_token;

	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "ringctl: cannot initialise libcurl\n");
		return CTL_EXIT_FAILED;
	}
	int status = cmd->run(&ctx, argc - optind, argv + optind);
	cmd_ctx_clear(&ctx);
	curl_global_cleanup();
	if (fflush(stdout) != 0 && status == CTL_EXIT_OK) {
		perror("ringctl: writing output");
		status = CTL_EXIT_FAILED;
	}
	return status;
}
