/*
 * scheduler: the scheduling pass of the broker loop (docs/coordinator.md
 * "Scheduling"): restarts of failed attempts whose backoff is over first,
 * then the queued jobs by priority, then submission order, each placed all
 * or nothing (gang.h, placement.h) on the alive agents' free devices of its
 * kind. A job that does not fit waits, with a reason saying why; while it
 * could fit once devices are freed it holds back the later jobs of its kind
 * (a wide job is not starved by narrow ones).
 *
 * Each queued job's spec is parsed once (jobspec_t, with its defaults),
 * when a pass first sees the job, and kept in the fabric's `queued` map
 * until the job is placed (it then moves to the attempt) or leaves the
 * queue. Placing applies a placement_t: devices taken, the job's attempt,
 * ranks and state written in the loop's transaction, SPAWNs (and, for a
 * restart, REJOINs to the kept survivors and ABORT/KILL to the others)
 * sent after its commit.
 */
#ifndef RINGMASTER_COORDINATORD_SCHEDULER_H
#define RINGMASTER_COORDINATORD_SCHEDULER_H

#include "fabric_int.h"

/* One scheduling pass (it also sets the time of the next one). */
void scheduler_run(fabric_t *f);

/* Free the parsed specs of queued jobs the fabric keeps. */
void scheduler_free(fabric_t *f);

#endif
