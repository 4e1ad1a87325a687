/*
 * snapcommit: the snapshot commit protocol on the coordinator's side (the
 * protocol is in api/wire.h, "Snapshot commit"; DESIGN.md "Snapshots").
 *
 * The live attempt gathers its ranks' SNAPSHOT_WRITTEN reports one step at
 * a time (fabric_int.h: `shards`); a complete set goes to rank 0 as
 * SNAPSHOT_COMMIT, and rank 0's SNAPSHOT_COMMITTED records the checkpoint
 * (with a `checkpoint` event), marks the steps retention removed as deleted
 * and applies the spec's retention (checkpoint.keep_last, keep_every) to
 * the recorded rows. SNAPSHOT_FAILED drops the step and records one
 * `snapshot_failed` event per step. Only committed checkpoints are durable:
 * gathered reports die with their attempt.
 */
#ifndef RINGMASTER_COORDINATORD_SNAPCOMMIT_H
#define RINGMASTER_COORDINATORD_SNAPCOMMIT_H

#include <jansson.h>

#include "fabric_int.h"

/* SNAPSHOT_WRITTEN {step, file, bytes, xxh3} from rank `rank` of the live
 * attempt `at` (identity `ident`). */
void snapcommit_on_written(fabric_t *f, attempt_t *at, int rank, const char *ident, json_t *p);

/* SNAPSHOT_COMMITTED {step, bytes, path, deleted} from rank 0 of `at`. */
void snapcommit_on_committed(fabric_t *f, attempt_t *at, int rank, const char *ident, json_t *p);

/* SNAPSHOT_FAILED {step, error, failure?} from rank `rank` of `at`. */
void snapcommit_on_failed(fabric_t *f, attempt_t *at, int rank, json_t *p);

#endif
