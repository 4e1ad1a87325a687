/*
 * placement: where an attempt's ranks go (see placement.h).
 */
#include "placement.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "agents.h"
#include "attempt.h"
#include "gang.h"

void placement_clear(placement_t *p)
{
	free(p->ranks);
	free(p->keep);
	free(p->stop);
	memset(p, 0, sizeof *p);
}

/* Ranks by gang packing: node by node, the nodes taking most first. */
static int place_packed(agent_t *const *alive, int n_alive, const int *take, placement_t *pl)
{
	int *order = malloc((size_t)(n_alive ? n_alive : 1) * sizeof *order);
	if (!order)
		return -ENOMEM;
	int n_order = 0;
	for (int i = 0; i < n_alive; i++)
		if (take[i] > 0)
			order[n_order++] = i;
	/* most ranks first, then node order (insertion sort: n_order is small) */
	for (int i = 1; i < n_order; i++)
		for (int j = i; j > 0 && take[order[j]] > take[order[j - 1]]; j--) {
			int t = order[j];
			order[j] = order[j - 1];
			order[j - 1] = t;
		}
	int rank = 0;
	for (int k = 0; k < n_order; k++) {
		agent_t *a = alive[order[k]];
		int want = take[order[k]];
		for (int i = 0; i < a->n_devices && want > 0 && rank < pl->world_size; i++) {
			const device_t *d = &a->devices[i];
			if (d->kind != pl->kind || d->owner)
				continue;
			pl->ranks[rank++] = (placement_slot_t){.agent = a, .device_index = d->index};
			want--;
		}
	}
	free(order);
	return rank == pl->world_size ? 0 : -ENOSPC;
}

/* Ranks on the devices that `prev`'s ranks had. */
static int place_same(const attempt_t *prev, placement_t *pl)
{
	if (prev->world_size < pl->world_size)
		return -ENOSPC;
	for (int r = 0; r < pl->world_size; r++) {
		const rank_rt_t *old = &prev->ranks[r];
		const device_t *d = old->agent ? agents_device(old->agent, pl->kind, old->device_index) : NULL;
		if (!d)
			return -ENOSPC;
		pl->ranks[r] = (placement_slot_t){.agent = old->agent, .device_index = d->index};
	}
	return 0;
}

int placement_decide(agent_t *const *alive, int n_alive, const int *take, int kind, int world_size,
                     const attempt_t *prev, placement_t *ret)
{
	if (world_size < 1)
		return -EINVAL;
	placement_t pl = {.world_size = world_size, .kind = kind, .n_prev = prev ? prev->world_size : 0};
	pl.ranks = calloc((size_t)world_size, sizeof *pl.ranks);
	if (pl.n_prev) {
		pl.keep = calloc((size_t)pl.n_prev, sizeof *pl.keep);
		pl.stop = calloc((size_t)pl.n_prev, sizeof *pl.stop);
	}
	if (!pl.ranks || (pl.n_prev && (!pl.keep || !pl.stop))) {
		placement_clear(&pl);
		return -ENOMEM;
	}
	int r = take ? place_packed(alive, n_alive, take, &pl) : prev ? place_same(prev, &pl) : -EINVAL;
	if (r < 0) {
		placement_clear(&pl);
		return r;
	}
	for (int k = 0; k < world_size; k++)
		pl.n_nodes += k == 0 || pl.ranks[k].agent != pl.ranks[k - 1].agent;
	/* Survivors of `prev` parked on the device their rank number gets again
	 * are kept (adopted); the other parked ones are stopped. */
	for (int k = 0; k < pl.n_prev; k++) {
		const rank_rt_t *old = &prev->ranks[k];
		if (!attempt_rank_kept(old))
			continue;
		if (k < world_size && pl.ranks[k].agent == old->agent && kind == old->device_kind &&
		    pl.ranks[k].device_index == old->device_index) {
			pl.keep[k] = true;
			pl.n_kept++;
		} else {
			pl.stop[k] = true;
		}
	}
	*ret = pl;
	return 0;
}

void placement_describe(const placement_t *p, char *buf, size_t *len)
{
	for (int r = 0; r < p->world_size; r++) {
		bool first = r == 0 || p->ranks[r].agent != p->ranks[r - 1].agent;
		if (first)
			fabric_reason_add(buf, len, "%s %s [", r ? "]" : "", p->ranks[r].agent->node);
		fabric_reason_add(buf, len, "%s%d:%s%d", first ? "" : " ", r, fabric_kind_name(p->kind),
		                  p->ranks[r].device_index);
	}
	fabric_reason_add(buf, len, "]");
}

void placement_describe_groups(const placement_t *p, int group, char *buf, size_t *len)
{
	int *node_of = malloc((size_t)(p->world_size > 0 ? p->world_size : 1) * sizeof *node_of);
	if (!node_of)
		return;
	for (int r = 0; r < p->world_size; r++) /* a node's number: its first rank */
		node_of[r] = r > 0 && p->ranks[r].agent == p->ranks[r - 1].agent ? node_of[r - 1] : r;
	int n_split = 0, g = gang_group_split(node_of, p->world_size, group, &n_split);
	free(node_of);
	if (g < 0) {
		fabric_reason_add(buf, len, "; tensor-parallel groups of %d each on one node", group);
		return;
	}
	fabric_reason_add(buf, len, "; tensor-parallel group %d (ranks %d-%d) spans nodes", g, g * group,
	                  g * group + group - 1);
	for (int r = g * group; r < (g + 1) * group; r++)
		if (r == g * group || p->ranks[r].agent != p->ranks[r - 1].agent)
			fabric_reason_add(buf, len, "%s %s", r == g * group ? "" : ",", p->ranks[r].agent->node);
	fabric_reason_add(buf, len, " (%d of %d groups span nodes)", n_split, p->world_size / group);
}
