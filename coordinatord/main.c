/*
 * ringmasterd: the ringmaster coordinator.
 *
 * main() reads the configuration, opens the store and starts the broker loop
 * (the one writer), starts the HTTP server, tells systemd it is ready, and
 * waits for SIGTERM/SIGINT. Those signals are blocked in every thread and
 * taken synchronously here with sigwaitinfo, so no work happens in a signal
 * handler. Shutdown: STOPPING=1, stop accepting and finish requests in
 * flight, stop the loop, close the database, exit 0. Startup errors are one
 * line on stderr and exit status 1.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <sodium.h>
#include <systemd/sd-daemon.h>
#include <zmq.h>

#include "auth.h"
#include "broker.h"
#include "config.h"
#include "http.h"
#include "log.h"
#include "routes.h"

#define SHUTDOWN_GRACE_MS 10000

static void print_routes(void)
{
	size_t n;
	const route_t *routes = route_table(&n);
	for (size_t i = 0; i < n; i++)
		printf("%s %s\n", route_method_name(routes[i].method), routes[i].path);
}

int main(int argc, char **argv)
{
	char err[1024] = "";
	config_t cfg;
	config_action_t action;
	if (config_from_args(&cfg, argc, argv, &action, err, sizeof err) < 0) {
		fprintf(stderr, "ringmasterd: %s\n", err);
		return 1;
	}
	if (action == CONFIG_HELP || action == CONFIG_VERSION)
		return 0;
	if (action == CONFIG_PRINT_ROUTES) {
		print_routes();
		return 0;
	}
	log_set_level(cfg.log_level);
	/* One connection per agent and rank: take the hard limit on open files. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			log_warn("cannot raise the open-file limit: %s", strerror(errno));
	}
	if (sodium_init() < 0) {
		log_error("libsodium failed to initialise");
		return 1;
	}

	/* Block the stop signals before any thread exists so all inherit it. */
	sigset_t stop_signals;
	sigemptyset(&stop_signals);
	sigaddset(&stop_signals, SIGTERM);
	sigaddset(&stop_signals, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (auth_check_exposure(&cfg, err, sizeof err) < 0) {
		log_error("%s", err);
		return 1;
	}

	int status = 1;
	http_t *http = NULL;
	broker_t *broker = NULL;
	void *zctx = zmq_ctx_new();
	if (!zctx) {
		log_error("cannot create the ZeroMQ context: %s", zmq_strerror(zmq_errno()));
		return 1;
	}
	broker = broker_new(zctx, &cfg, err, sizeof err);
	if (!broker) {
		log_error("%s", err);
		goto out;
	}
	if (broker_start(broker) < 0) {
		log_error("cannot start the broker loop thread");
		goto out;
	}
	if (auth_bootstrap(&cfg, zctx, err, sizeof err) < 0) {
		log_error("%s", err);
		goto out;
	}
	http = http_new(&cfg, zctx, err, sizeof err);
	if (!http) {
		log_error("%s", err);
		goto out;
	}
	log_info("ringmasterd %s serving %s://%s%s%s:%s/ (broker %s, database %s, %d HTTP threads)",
	         RINGMASTER_VERSION, cfg.tls_cert[0] ? "https" : "http", strchr(cfg.listen_host, ':') ? "[" : "", cfg.listen_host,
	         strchr(cfg.listen_host, ':') ? "]" : "", cfg.listen_port, cfg.broker, cfg.db,
	         cfg.http_threads);
	sd_notify(0, "READY=1\nSTATUS=serving");

	int sig;
	for (;;) {
		sig = sigwaitinfo(&stop_signals, NULL);
		if (sig > 0)
			break;
		if (errno != EINTR) {
			log_error("sigwaitinfo failed: %s", strerror(errno));
			break;
		}
	}
	log_info("%s received: stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
	sd_notify(0, "STOPPING=1\nSTATUS=stopping");
	http_stop(http, SHUTDOWN_GRACE_MS);
	status = 0;
out:
	http_free(http);
	broker_free(broker);
	zmq_ctx_term(zctx);
	if (status == 0)
		log_info("stopped cleanly");
	return status;
}
