/*
 * gang: gang placement by packing (see gang.h).
 */
#include "gang.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	int free;
	int index;
} slot_t;

/* Most free first; ties in input order. */
static int by_free_desc(const void *a, const void *b)
{
	const slot_t *x = a, *y = b;
	if (x->free != y->free)
		return x->free > y->free ? -1 : 1;
	return x->index - y->index;
}

int gang_pack(const int *n_free, int n_nodes, int world_size, int *ret_take)
{
	if (world_size < 1 || n_nodes < 0)
		return -EINVAL;
	if (n_nodes > 0)
		memset(ret_take, 0, (size_t)n_nodes * sizeof *ret_take);
	long total = 0;
	for (int i = 0; i < n_nodes; i++)
		total += n_free[i] > 0 ? n_free[i] : 0;
	if (total < world_size)
		return -ENOSPC;
	slot_t *order = malloc((size_t)n_nodes * sizeof *order);
	if (!order)
		return -ENOMEM;
	for (int i = 0; i < n_nodes; i++)
		order[i] = (slot_t){.free = n_free[i] > 0 ? n_free[i] : 0, .index = i};
	qsort(order, (size_t)n_nodes, sizeof *order, by_free_desc);
	int left = world_size, used = 0;
	for (int k = 0; k < n_nodes && left > 0; k++) {
		int take = order[k].free < left ? order[k].free : left;
		ret_take[order[k].index] = take;
		left -= take;
		used++;
	}
	free(order);
	return used;
}

int gang_pack_groups(const int *n_free, int n_nodes, int world_size, int group, int *ret_take)
{
	if (group <= 1 || world_size < 1 || world_size % group != 0 || n_nodes < 0)
		return gang_pack(n_free, n_nodes, world_size, ret_take);
	int *groups = malloc((size_t)(n_nodes > 0 ? n_nodes : 1) * sizeof *groups);
	if (!groups)
		return -ENOMEM;
	for (int i = 0; i < n_nodes; i++)
		groups[i] = n_free[i] > 0 ? n_free[i] / group : 0;
	int used = gang_pack(groups, n_nodes, world_size / group, ret_take);
	free(groups);
	if (used == -ENOSPC) /* whole groups do not fit: split one or more */
		return gang_pack(n_free, n_nodes, world_size, ret_take);
	if (used > 0)
		for (int i = 0; i < n_nodes; i++)
			ret_take[i] *= group;
	return used;
}

int gang_group_split(const int *node_of, int world_size, int group, int *ret_n_split)
{
	int first = -1, n = 0;
	if (group > 1)
		for (int g = 0; g * group < world_size; g++)
			for (int r = g * group + 1; r < (g + 1) * group && r < world_size; r++)
				if (node_of[r] != node_of[g * group]) {
					first = first < 0 ? g : first;
					n++;
					break;
				}
	if (ret_n_split)
		*ret_n_split = n;
	return first;
}
