/*
 * placement: where the ranks of an attempt go, decided without touching
 * the store, a socket or any device's owner ("decide, then do",
 * docs/coordinator.md "Scheduling"); scheduler.c applies the decision.
 *
 * Two ways to place `world_size` ranks of device kind `kind`:
 *   - by gang packing (gang.h): `take[i]` ranks on `alive[i]` (the nodes
 *     sorted by name), ranks numbered node by node, the nodes taking the
 *     most ranks first (ties in node order), each node's free devices of
 *     the kind in index order;
 *   - on the devices of the failed attempt `prev` (take NULL): rank r on the
 *     device rank r had (the caller checked they are all free).
 * With `prev` (a restart), its parked survivors (attempt_rank_kept) that get
 * their own device and rank number again are kept (adopted in their
 * process); the other parked ones are to be stopped.
 */
#ifndef RINGMASTER_COORDINATORD_PLACEMENT_H
#define RINGMASTER_COORDINATORD_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>

#include "fabric_int.h"

typedef struct {
	agent_t *agent;   /* borrowed */
	int device_index;
} placement_slot_t;

typedef struct {
	int world_size;
	int kind;
	placement_slot_t *ranks; /* world_size entries: rank r's node and device */
	int n_nodes;             /* nodes used */
	int n_prev;              /* prev's world_size (0 without prev) */
	bool *keep;              /* n_prev entries: prev's rank r is adopted as rank r */
	bool *stop;              /* n_prev entries: prev's parked rank r is stopped */
	int n_kept;
} placement_t;

/*
 * Decide the placement described above into *ret (free with
 * placement_clear). Reads the agents' devices (a device is free when it has
 * no owner) and `prev` (borrowed, may be NULL), changes nothing. 0, or
 * -ENOSPC when `take` or prev's devices do not give world_size free devices
 * (*ret is then cleared), -EINVAL for world_size < 1, -ENOMEM.
 */
int placement_decide(agent_t *const *alive, int n_alive, const int *take, int kind, int world_size,
                     const attempt_t *prev, placement_t *ret);

/* Free what placement_decide allocated; accepts a zeroed or cleared one. */
void placement_clear(placement_t *p);

/* Append the placement, node by node (" n1 [0:cpu0 1:cpu1] n2 [2:cpu0]"),
 * to `buf` (REASON_BYTES, `*len` used so far). */
void placement_describe(const placement_t *p, char *buf, size_t *len);

/* Append whether the tensor-parallel groups (`group` consecutive ranks, >
 * 1) each lie on one node ("; tensor-parallel groups of 2 each on one
 * node") or which one spans nodes ("; tensor-parallel group 1 (ranks 2-3)
 * spans nodes n1, n2 (1 of 4 groups span nodes)"), as placement_describe. */
void placement_describe_groups(const placement_t *p, int group, char *buf, size_t *len);

#endif
