/*
 * clock: the daemon's two clocks in microseconds. Wall time (CLOCK_REALTIME)
 * is what gets stored and shown (created_at, events, heartbeats); monotonic
 * time (CLOCK_MONOTONIC) measures intervals (timeouts, heartbeat expiry,
 * request latency) and never jumps with the system clock.
 */
#ifndef RINGMASTER_COORDINATORD_CLOCK_H
#define RINGMASTER_COORDINATORD_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t clock_wall_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline int64_t clock_mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#endif
