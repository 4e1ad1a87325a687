/*
 * rankenv: the environment a rank process starts with (issue 25), in
 * layers, later ones winning:
 *
 *   1. the agent's own environment;
 *   2. the agent's defaults for every job (`ringworker agent --env
 *      NAME=VALUE`, repeatable, and `--env-file PATH`): how a site loads
 *      an NCCL network plugin (LD_LIBRARY_PATH, NCCL_NET_PLUGIN, ...) on
 *      every node without every user repeating it;
 *   3. the job's env (the spec's top-level env, SPAWN's `env`), already
 *      checked by the coordinator against its job_env_allow;
 *   4. what the agent sets itself (agent.c: OMP_NUM_THREADS,
 *      CUDA_VISIBLE_DEVICES, the allocator settings; program.c:
 *      torchrun's variables, RINGMASTER_*, then program.env on top).
 *
 * Names the agent sets itself (jobspec_ext_env_reserved) are refused in
 * layer 2 when the agent starts, and skipped in layer 3 (the coordinator
 * refuses them already; the agent does not trust the wire for it).
 * rankenv_log is the rank's side: one line at its start naming the
 * communication variables it sees, so that a user reads in the job's
 * logs what NCCL or Gloo was told.
 */
#ifndef RINGMASTER_WORKER_RANKENV_H
#define RINGMASTER_WORKER_RANKENV_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#define RANKENV_MAX 256               /* agent defaults at most */
#define RANKENV_FILE_MAX_BYTES 65536  /* --env-file at most */

/* The agent's defaults: "NAME=VALUE" strings, owned. */
typedef struct {
	int n;
	char *kv[RANKENV_MAX];
} rankenv_defaults_t;

/*
 * Add one default "NAME=VALUE" (a later one for the same name replaces
 * it). The name must be [A-Za-z_][A-Za-z0-9_]* and not one the agent sets
 * itself. Returns 0, or -EINVAL / -E2BIG / -ENOMEM with one line in `err`
 * naming `origin` ("--env", "/etc/ringmaster/ringworker.env:3").
 */
int rankenv_add(rankenv_defaults_t *d, const char *kv, const char *origin, char *err, size_t errlen);

/*
 * Add every NAME=VALUE line of the file `path` (at most
 * RANKENV_FILE_MAX_BYTES): blank lines and lines starting with '#' are
 * skipped, an optional leading "export " is dropped, the value is the
 * rest of the line as written (no quotes removed, no expansion). Errors as
 * rankenv_add, with the line number; -errno when the file cannot be read.
 */
int rankenv_load_file(rankenv_defaults_t *d, const char *path, char *err, size_t errlen);

/* Free the defaults (a zeroed one is fine). */
void rankenv_defaults_free(rankenv_defaults_t *d);

/*
 * Layers 1 to 3: a new NULL-terminated copy of `base` with the defaults
 * `d` (NULL: none) and then the object `job_env` (SPAWN's env; NULL:
 * none) set on top. A job_env entry whose name is not a variable name,
 * is reserved or whose value is not a string is skipped and counted in
 * *ret_skipped (may be NULL). NULL on out-of-memory. Free with
 * rankenv_free.
 */
char **rankenv_build(char *const *base, const rankenv_defaults_t *d, const json_t *job_env, int *ret_skipped);

/* Free a NULL-terminated string array (NULL is fine). */
void rankenv_free(char **env);

/*
 * Write one line "<prefix>environment: NAME=VALUE ..." to `f` with the
 * variables of `env` that a communication library reads (NCCL_*, GLOO_*,
 * CUDA_*, OMP_*, LD_LIBRARY_PATH) in environ's order, each value cut at
 * 200 bytes; nothing when there is none. Returns how many were listed.
 */
int rankenv_log(FILE *f, const char *prefix, char *const *env);

#endif
