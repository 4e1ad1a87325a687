/*
 * gang: the placement arithmetic of the scheduler, kept free of sockets and
 * SQL so that it can be tested on its own.
 *
 * Gang placement: a job gets all of its ranks or none. Packing: ranks go onto
 * as few nodes as possible, taking the nodes with the most free devices (of
 * the job's kind) first; ties keep the caller's order (node name). Taking the
 * largest nodes first is what minimises the number of nodes reaching a sum.
 * The broker loop decides which job to try (priority, then FIFO) and what a
 * job that does not fit does (see fabric.c and docs/coordinator.md).
 */
#ifndef RINGMASTER_COORDINATORD_GANG_H
#define RINGMASTER_COORDINATORD_GANG_H

/*
 * `n_free[i]` is the number of free devices of the job's kind on node i.
 * For `world_size` ranks, fill ret_take[i] (n_nodes entries) with how many
 * ranks node i gets and return the number of nodes used (>= 1); or -ENOSPC
 * when the free devices do not add up to world_size (ret_take is then
 * zeroed), -EINVAL for world_size < 1, -ENOMEM.
 */
int gang_pack(const int *n_free, int n_nodes, int world_size, int *ret_take);

/*
 * Gang packing for a job whose ranks form groups of `group` consecutive
 * ranks (tensor parallelism, parallel.tensor): when whole groups fit, every
 * node gets a multiple of `group` ranks (as gang_pack, counting each node's
 * free devices in whole groups), so that numbering ranks node by node keeps
 * each group on one node; otherwise as gang_pack (some group then spans
 * nodes: gang_group_split says which). `group` <= 1, or a world_size that
 * is not a multiple of it, is gang_pack. Returns as gang_pack.
 */
int gang_pack_groups(const int *n_free, int n_nodes, int world_size, int group, int *ret_take);

/*
 * Given node_of[r], the node of each of world_size ranks, return the first
 * group of `group` consecutive ranks (ranks g*group .. g*group+group-1)
 * whose ranks are on more than one node, or -1 when each group is on one
 * node; *ret_n_split (may be NULL) gets the number of such groups.
 */
int gang_group_split(const int *node_of, int world_size, int group, int *ret_n_split);

#endif
