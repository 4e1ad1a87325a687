/*
 * agent: `ringworker agent`, the node agent. One runs on every node.
 *
 * It registers the node's devices with the coordinator (REGISTER over a
 * fabric_t with identity agent/<node>): CPU slots, and the node's NVIDIA
 * GPUs as found through NVML (worker/gpus.c) with their name and memory.
 * It heartbeats while idle, and reconnects with backoff when the
 * coordinator goes silent, registering again with the ranks it still runs. On SPAWN it starts `ringworker rank ...` (its own
 * binary) as a direct child, on the device slot named, pinned to that slot's
 * share of the node's CPUs with a matching OMP_NUM_THREADS (a GPU rank gets
 * its GPU's share: the CPUs split between the GPUs, and sees only its GPU,
 * as CUDA device 0, through CUDA_VISIBLE_DEVICES); it captures the
 * rank's stdout and stderr through one pipe (forwarded to its own log,
 * prefixed, and the last line that says "error" kept), reaps it through a signalfd without ever blocking the loop,
 * and reports RANK_EXITED at once. On KILL it sends SIGTERM, then SIGKILL
 * after a grace period. On SIGTERM or SIGINT it stops its ranks the same way
 * and exits. A SPAWN with a `program` starts the user's own program instead
 * (worker/program.c: --allow-program, torchrun's environment, the metrics
 * fd), reported with RANK_STARTED and PROGRAM_METRICS.
 *
 * The loop is single-threaded: zmq_poll over the DEALER socket, the signalfd
 * and the ranks' stderr pipes, always with a finite timeout.
 */
#ifndef RINGMASTER_WORKER_AGENT_H
#define RINGMASTER_WORKER_AGENT_H

#include <sched.h>
#include <stddef.h>
#include <stdio.h>

#include "rankenv.h"

#define AGENT_KILL_GRACE_MS 5000
#define AGENT_MAX_DEVICES 4096
#define AGENT_GPUS_AUTO 0
#define AGENT_GPUS_NONE (-1)

typedef struct {
	const char *coordinator; /* tcp://HOST:PORT of ringmasterd's broker */
	const char *node;        /* node name; NULL: the host name */
	int n_devices;           /* cpu device slots; 0: the number of online cores */
	int gpus;                /* cuda devices (--gpus): AGENT_GPUS_AUTO every GPU found (NVML,
	                          * within the agent's CUDA_VISIBLE_DEVICES if set), AGENT_GPUS_NONE
	                          * none, N > 0 the first N found (the agent refuses to start with
	                          * fewer) */
	const char *data_root;   /* handed to every rank (--data-root); NULL: none */
	const char *checkpoint_root; /* handed to every rank (--checkpoint-root); NULL: no snapshots */
	const char *advertise;   /* address ranks listen on for peers; NULL: agent_route_address() */
	const char *rank_exe;    /* binary to run for ranks; NULL: /proc/self/exe */
	int kill_grace_ms;       /* SIGTERM to SIGKILL; 0: AGENT_KILL_GRACE_MS */
	int comm_timeout_ms;     /* handed to every rank (--comm-timeout-ms): how long a collective
	                          * may wait for a peer before the rank fails (a hung or stopped
	                          * peer); 0: the rank's default */
	int step_timeout_ms;     /* handed to every rank (--step-timeout-ms): the step-time
	                          * watchdog (rank.h); 0: the rank's automatic bound */
	long long memory_bytes;  /* host memory offered to ranks (--memory-bytes), told to the
	                          * coordinator in REGISTER for its memory fit; 0: MemAvailable
	                          * when the agent starts */
	const char *const *allow_program; /* --allow-program paths (program.h); n_allow_program of
	                          * them; none: program SPAWNs are refused */
	int n_allow_program;
	int program_port_lo, program_port_hi; /* --program-ports, sent in REGISTER; 0: the default */
	const rankenv_defaults_t *env_defaults; /* --env / --env-file (rankenv.h): set in every rank's
	                          * process under the job's env; NULL: none */
	const char *tensorboard_root; /* handed to every rank (--tensorboard-root): where the spec's
	                          * tensorboard.dir lies, and every job's event files when the spec
	                          * has none (docs/training.md "TensorBoard"); NULL: the spec's dir
	                          * beneath --checkpoint-root, no files without one */
	const char *peak_tflops; /* handed to every rank (--peak-tflops): one device's peak, for
	                          * the TensorBoard MFU; NULL: unknown (no MFU scalar) */
	FILE *log;               /* the agent's log and the ranks' stderr (stderr) */
} agent_options_t;

/*
 * Run the agent until SIGTERM or SIGINT. Returns the process exit status:
 * 0 after a signal (every rank stopped and reaped), 1 when it cannot start
 * (bad endpoint, no address to advertise) with one "ringworker agent: error:"
 * line on opt->log.
 */
int agent_run(const agent_options_t *opt);

/*
 * The CPUs of device slot `slot` of `n_slots` when the agent may use the
 * CPUs in `avail` (its own affinity): with C available CPUs and n_slots <= C,
 * slot i gets the i-th of n_slots contiguous, near-equal runs of them
 * (C * i / n_slots up to C * (i + 1) / n_slots, in CPU order); with more
 * slots than CPUs, slot i gets CPU number i mod C of the list. Writes the set
 * to *ret_set and returns its CPU count (>= 1), or -EINVAL when `avail` is
 * empty or slot is out of range.
 */
int agent_cpu_share(const cpu_set_t *avail, int slot, int n_slots, cpu_set_t *ret_set);

/*
 * The local address of the route to the host in `endpoint` (tcp://HOST:PORT,
 * HOST a name, an IPv4 literal or a bracketed IPv6 literal): a UDP socket is
 * connect()ed there (no packet is sent) and getsockname() read. Writes the
 * numeric address to `buf`; 0 or a negative errno with one line in `err`.
 */
int agent_route_address(const char *endpoint, char *buf, size_t buflen, char *err,
                        size_t errlen);

#endif
