/*
 * logflood: the rank's log flood benchmark knob (see logflood.h).
 */
#include "logflood.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Print per_s lines a second on stdout, in bursts every millisecond, with
 * write(2): the pipe's reader (the agent) sets the pace if it falls behind. */
static void *s_flood(void *arg)
{
	logflood_t *fl = arg;
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	long long sent = 0;
	char line[160];
	while (!atomic_load(&fl->stop)) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		double el = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9;
		while (sent < (long long)(el * (double)fl->per_s)) {
			int n = snprintf(line, sizeof line, "flood rank %d line %lld: the quick brown fox jumps over the lazy dog\n",
			                 fl->rank, sent);
			if (write(1, line, (size_t)n) < 0)
				return NULL;
			sent++;
		}
		nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
	}
	return NULL;
}

bool logflood_start(logflood_t *fl, int rank)
{
	const char *v = getenv("RINGMASTER_BENCH_LOG_FLOOD");
	char *end;
	long n = v ? strtol(v, &end, 10) : 0;
	if (!v || *end || n < 1 || n > 1000000)
		return false;
	fl->per_s = n;
	fl->rank = rank;
	atomic_store(&fl->stop, false);
	return pthread_create(&fl->thread, NULL, s_flood, fl) == 0;
}

void logflood_stop(logflood_t *fl)
{
	atomic_store(&fl->stop, true);
	pthread_join(fl->thread, NULL);
}
