/*
 * logflood: a benchmark knob of the rank (bench/streams/log_flood.py only).
 * With the environment variable RINGMASTER_BENCH_LOG_FLOOD=N (1..1000000)
 * a thread of the rank prints N lines per second on stdout while it trains,
 * to measure what a rank that prints in a tight loop costs its training and
 * the coordinator. Without the variable nothing starts.
 */
#ifndef RINGMASTER_WORKER_LOGFLOOD_H
#define RINGMASTER_WORKER_LOGFLOOD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

typedef struct {
	pthread_t thread;
	atomic_bool stop;
	long per_s;
	int rank;
} logflood_t;

/* Start the flood thread into `fl` when RINGMASTER_BENCH_LOG_FLOOD asks for
 * one. Returns true when a thread was started (then call logflood_stop). */
bool logflood_start(logflood_t *fl, int rank);

/* Stop and join a thread logflood_start started. */
void logflood_stop(logflood_t *fl);

#endif
