/*
 * capacity: the largest host memory an alive CPU worker offers its ranks,
 * as the scheduler last saw it, for the HTTP threads' memory fit at
 * submission (issue 22: a job no node can hold is refused with 422 instead
 * of waiting forever or being started to be killed).
 *
 * The broker loop (scheduler.c) publishes it at every scheduling pass; the
 * HTTP threads (jobapi.c) read it. One mutex; the figures are a snapshot,
 * at most one pass (a second) old.
 */
#ifndef RINGMASTER_COORDINATORD_CAPACITY_H
#define RINGMASTER_COORDINATORD_CAPACITY_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
	int n_workers;          /* alive workers with CPU devices */
	bool all_known;         /* every one of them said how much memory it offers */
	int64_t largest_bytes;  /* the most memory one of them offers (0: none known) */
	char largest_node[264]; /* which one ("" when none); a node name is at most 255 bytes */
} capacity_t;

/* Publish what the alive CPU workers offer (broker loop). */
void capacity_publish(const capacity_t *c);

/* The last published figures (any thread); all zero before the first pass. */
void capacity_get(capacity_t *ret);

#endif
