/*
 * ranks: the messages of rank processes on the broker loop (api/wire.h):
 * JOIN (answered with JOINED: the spec and the snapshot to resume from),
 * METRICS (rows, memory figures, the `recovered` event of a restarted
 * attempt, METRICS_RESEND for lost rows), DONE, FAILED, PARKED, TRACE, and
 * the routing of KV_* (kv.c) and SNAPSHOT_* (snapcommit.c) messages.
 *
 * A message is accepted only from a rank of the job's live attempt: a stale
 * attempt's rank gets ABORT (a kept survivor's late messages are dropped), a
 * failed attempt's rank the ABORT that asks it to park (or to stop), a
 * snapshot report from anything but the live attempt ERROR 409.
 */
#ifndef RINGMASTER_COORDINATORD_RANKS_H
#define RINGMASTER_COORDINATORD_RANKS_H

#include <jansson.h>

#include "fabric_int.h"

/* A message of type `type` (payload `p`, borrowed) from the peer with the
 * identity `ident` ("rank/<job>/<attempt>/<rank>"). */
void ranks_on_message(fabric_t *f, const char *ident, wire_type_t type, json_t *p);

#endif
