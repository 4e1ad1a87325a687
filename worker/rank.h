/*
 * rank: `ringworker rank`, one rank of a job attempt, as its agent spawns it.
 *
 * It connects a fabric_t with identity rank/<job>/<attempt>/<rank>, JOINs and
 * gets the job spec (JOINED), runs the rendezvous through the coordinator's
 * KV (a comm_kv_t over KV_SET / KV_GET, values base64), builds its Gloo
 * communicator, and runs train_run() as rank `rank` of `world_size`. Rank 0
 * sends METRICS every metrics_every steps, on validation steps and at the
 * last step (its loss is the mean over ranks); every rank sends DONE at the
 * end. A training error sends FAILED {reason: the error line} and
 * exits with the trainer's code; ABORT from the coordinator makes the process
 * exit at once with RM_EXIT_ABORTED (a watcher thread reads the socket
 * while training runs, so an abort does not wait for a step to end).
 *
 * Errors go to stderr as "ringworker rank: error: ..." lines, which the agent
 * captures for RANK_EXITED. One line "ringworker rank: communicator ready at
 * <unix seconds>" marks the end of the rendezvous (bench/rendezvous reads it).
 */
#ifndef RINGMASTER_WORKER_RANK_H
#define RINGMASTER_WORKER_RANK_H

#define RANK_JOIN_TIMEOUT_MS 30000
#define RANK_COMM_TIMEOUT_MS 60000
#define RANK_WATCHDOG_FACTOR 10

typedef struct {
	const char *coordinator; /* tcp://HOST:PORT */
	const char *job;
	int attempt;
	int rank;
	int world_size;
	const char *data_root;   /* relative data paths resolve against it; NULL: cwd */
	const char *host;        /* address peers reach this rank on; NULL: 127.0.0.1 */
	int comm_timeout_ms;     /* rendezvous and collectives; 0: RANK_COMM_TIMEOUT_MS */
	int step_timeout_ms;     /* the watchdog: a step not finished this long after the previous
	                          * one ends the rank (FAILED, exit RM_EXIT_WATCHDOG); 0:
	                          * automatic, the larger of twice the comm timeout and
	                          * RANK_WATCHDOG_FACTOR x the longest step so far (armed from
	                          * the first step on, off after the last) */
	const char *checkpoint_root; /* snapshots go to <root>/<job>/; NULL: no snapshots */
	const char *tensorboard_root; /* rank 0's TensorBoard files (tboard.h): <root>/<job>/, or
	                               * <root>/<spec's tensorboard.dir>/<job>/; NULL: only with
	                               * the spec's section, beneath checkpoint_root */
	double peak_tflops;           /* one device's peak TFLOP/s, for the TensorBoard MFU; 0: unknown */
} rank_options_t;

/* Run the rank; returns the process exit status (a RM_EXIT_* code). */
int rank_run(const rank_options_t *opt);

#endif
