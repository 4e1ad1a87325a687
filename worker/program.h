/*
 * program: the agent's side of a program rank (issue 26): a user's own
 * training program started under torchrun's contract instead of
 * `ringworker rank` (docs/workers.md "Program ranks").
 *
 * A SPAWN with a `program` object ({argv, cwd, env}) and a `torch` object
 * (api/wire.h) comes here from agent.c. This module decides whether the
 * program may run (argv[0] resolved and checked against the agent's
 * --allow-program list, cwd confined beneath --data-root), builds its
 * environment (torchrun's variables, RINGMASTER_*, the job's env on top, the
 * agent's own secrets left out), and starts it in its own process group
 * with stdout and stderr on pipes (read by agent.c through ranklog.c like a
 * built-in rank's) and a third pipe, the metrics fd, whose JSON lines
 * program_metrics_feed turns into PROGRAM_METRICS rows. agent.c keeps the
 * process in a device slot; KILL and the agent's stop signal the group.
 *
 * Everything here except program_start is a pure function of its inputs,
 * so the checks are unit-tested without a coordinator
 * (tests/worker/program).
 */
#ifndef RINGMASTER_WORKER_PROGRAM_H
#define RINGMASTER_WORKER_PROGRAM_H

#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <jansson.h>

#define PROGRAM_PORTS_LO 29500 /* --program-ports default */
#define PROGRAM_PORTS_HI 29999
#define PROGRAM_METRICS_FD 3                 /* the fd number the program sees */
#define PROGRAM_METRICS_LINE_MAX_BYTES 4096  /* a longer line is dropped */
#define PROGRAM_METRICS_RATE_ROWS 100        /* rows per second per rank */
#define PROGRAM_ALLOW_MAX 64                 /* --allow-program entries */

/*
 * Resolve the program's argv[0] to the file the agent executes, and check
 * it against the allow list `allow` (n_allow entries, each an absolute
 * path already canonical or not: each is realpath()ed here). An absolute
 * argv0 is taken as is; one with a '/' is opened beneath `data_root`
 * (beneath.h: no '..', no link out; NULL data_root: relative to the
 * agent's cwd); one without '/' is looked up in `path_env` (the agent's
 * PATH; NULL: "/usr/local/bin:/usr/bin:/bin"): the first executable file
 * found. The file found is canonicalised (realpath: links resolved) and
 * must equal an allowed file or lie beneath an allowed folder. Writes the
 * canonical path to ret_path (path_len bytes) and returns 0, or a negative
 * errno with one line in `err` naming argv[0] (-EPERM: not allowed or no
 * --allow-program at all; -ENOENT: not found; -EXDEV: out of the data
 * root).
 */
int program_resolve_argv0(const char *const *allow, int n_allow, const char *data_root,
                          const char *argv0, const char *path_env, char *ret_path, size_t path_len,
                          char *err, size_t errlen);

/*
 * Open the program's working folder: `cwd` (NULL or "": the data root
 * itself) beneath `data_root` (NULL: the agent's cwd, and `cwd` relative to
 * it with the same confinement). Returns 0 with an O_DIRECTORY fd (close
 * on exec) in *ret_fd, or a negative errno with one line in `err` naming
 * program.cwd (-EXDEV: '..', absolute or a link out of the root).
 */
int program_open_cwd(const char *data_root, const char *cwd, int *ret_fd, char *err, size_t errlen);

/* What the agent adds to a program's environment besides the SPAWN's. */
typedef struct {
	int n_threads;              /* OMP_NUM_THREADS: the slot's CPU count */
	const char *cuda_visible;   /* CUDA_VISIBLE_DEVICES; NULL: not set (cpu slot) */
	const char *checkpoint_dir; /* RINGMASTER_CHECKPOINT_DIR; NULL: unset */
	int metrics_fd;             /* RINGMASTER_METRICS_FD */
} program_env_opts_t;

/*
 * The environment of the program of SPAWN `spawn` (job, rank, world_size,
 * program.env, torch{master_addr, master_port, local_rank,
 * local_world_size, group_rank, restart_count, max_restarts, run_id,
 * optional group_world_size}): `base` (the agent's environ) without
 * RINGWORKER_*, RINGMASTER_* and the variables set here; then torchrun's
 * variables (docs/workers.md), OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES,
 * RINGMASTER_*; then program.env on top. A NULL-terminated array the
 * caller frees with program_strv_free, or NULL with one line in `err`
 * (a missing or mistyped torch field, named; a program.env name that is
 * not [A-Za-z_][A-Za-z0-9_]* or a value that is not a string; out of
 * memory).
 */
char **program_env(char *const *base, const json_t *spawn, const program_env_opts_t *o, char *err,
                   size_t errlen);

/* Free a NULL-terminated string array (NULL is fine). */
void program_strv_free(char **v);

/*
 * One metrics line (without its newline) to a PROGRAM_METRICS row: a JSON
 * object with "step" (integer >= 0) and "loss" (a finite number), and
 * optionally val_loss, lr, grad_norm, tokens_per_s, ms, mfu (finite
 * numbers); other keys are ignored. Returns 0 and a new object in *ret_row,
 * or -EINVAL with the reason in `err` (never the line's content).
 */
int program_metrics_parse(const char *line, size_t len, json_t **ret_row, char *err, size_t errlen);

/* The metrics fd's reader state for one rank. */
typedef struct {
	char buf[PROGRAM_METRICS_LINE_MAX_BYTES + 1];
	size_t len;
	bool cut;              /* the line is over the cap: drop it up to its newline */
	int64_t window_start_us;
	int window_rows;
	int64_t n_bad;         /* lines dropped as invalid */
	int64_t n_rate_dropped;/* rows over PROGRAM_METRICS_RATE_ROWS a second */
} program_metrics_t;

/* A row (owned by the callee) or, with row NULL, a bad line's reason. */
typedef void (*program_row_fn)(void *cls, json_t *row, const char *bad);

void program_metrics_init(program_metrics_t *m);

/*
 * Feed `n` bytes read from the metrics pipe at monotonic time `now_us`:
 * each complete line becomes a row for `fn`, or a bad line (fn with NULL
 * and the reason: invalid, or longer than PROGRAM_METRICS_LINE_MAX_BYTES).
 * Valid rows past PROGRAM_METRICS_RATE_ROWS in one second are counted in
 * n_rate_dropped and not passed on. Blank lines are ignored.
 */
void program_metrics_feed(program_metrics_t *m, const char *buf, size_t n, int64_t now_us,
                          program_row_fn fn, void *cls);

/*
 * Read what waits in the metrics pipe `fd` (non-blocking; at most 64 KiB a
 * call, so one chatty program cannot starve the agent's loop) and feed it
 * as program_metrics_feed does. Returns 1 at EOF or on a read error (the
 * caller closes `fd`; a last line without newline is dropped), else 0.
 */
int program_metrics_read(program_metrics_t *m, int fd, int64_t now_us, program_row_fn fn, void *cls);

/* A running program rank's metrics pipe, as the agent keeps it. */
typedef struct {
	int fd;                  /* read end; -1 once closed */
	program_metrics_t m;
	bool told_bad, told_rate; /* the first bad line / rate drop went to the log */
} program_rank_t;

/* A new program_rank_t owning the metrics pipe `fd`; NULL on out of memory
 * (fd is not closed then). */
program_rank_t *program_rank_new(int fd);

/* Close its pipe and free it (NULL is fine). */
void program_rank_free(program_rank_t *r);

/*
 * Read r's pipe (program_metrics_read) and pass each row to `fn` (never
 * with a bad line: the first bad line and the first rate drop of the rank
 * are written to `log` as one line each, prefixed with `label`; later ones
 * only counted). At EOF the pipe is closed and r->fd set to -1.
 */
void program_rank_drain(program_rank_t *r, int64_t now_us, FILE *log, const char *label, program_row_fn fn,
                        void *cls);

/* What program_start needs besides the SPAWN. */
typedef struct {
	const char *const *allow; /* --allow-program, n_allow entries */
	int n_allow;
	const char *data_root;       /* NULL: none */
	const char *checkpoint_root; /* NULL: no RINGMASTER_CHECKPOINT_DIR */
	int n_threads;
	const char *cuda_visible;    /* NULL: a cpu slot */
	const cpu_set_t *cpus;       /* the slot's CPUs */
	const sigset_t *sigmask;     /* the mask the program starts with */
	char *const *base_env;       /* what program_env starts from (rankenv.h: the agent's environ
	                              * with its --env defaults and the job's env); NULL: environ */
} program_start_opts_t;

/* A started program: its pid (the leader of its process group) and the read
 * ends (non-blocking, close on exec) of its stdout, stderr and metrics
 * pipes. */
typedef struct {
	pid_t pid;
	int out_fd, err_fd, metrics_fd;
} program_proc_t;

/*
 * Start the program of SPAWN `spawn`: resolve and check argv[0] and cwd,
 * create the checkpoint folder (<checkpoint_root>/<job>/program, 0700),
 * build the environment, and fork: the child leads a new process group,
 * dies with the agent (PR_SET_PDEATHSIG), runs on `cpus` with stdin
 * /dev/null, and execs. Returns 0 and fills *ret, or a negative errno with
 * one line in `err` (nothing was started; no fd is left open).
 */
int program_start(const json_t *spawn, const program_start_opts_t *o, program_proc_t *ret, char *err,
                  size_t errlen);

#endif
