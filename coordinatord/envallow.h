/*
 * envallow: which environment variable names a job's spec may set, checked
 * at submission (POST /v1/jobs answers 422 with the pointer): a program
 * job's program.env (issue 26; /program/env/NAME) and any job's top-level
 * env (issue 25; /env/NAME), each against its own list.
 *
 * program.env keeps the wider default (ENVALLOW_DEFAULT: a Python program
 * also needs PYTHON*, TORCH_* and its own RINGMASTER_USER_* settings); env,
 * which reaches the built-in trainer too, defaults to what a communication
 * library or its network plugin reads (ENVALLOW_JOB_DEFAULT; config key
 * job_env_allow / --job-env-allow).
 *
 * A name passes when it matches one of the operator's patterns (config key
 * env_allow / --env-allow: comma-separated names, a trailing '*' matching
 * any rest; default ENVALLOW_DEFAULT) and is not one the agent sets itself
 * for every rank (torchrun's variables, OMP_NUM_THREADS,
 * CUDA_VISIBLE_DEVICES and RINGMASTER_* other than RINGMASTER_USER_*):
 * a spec never overrides the contract the program runs under.
 */
#ifndef RINGMASTER_COORDINATORD_ENVALLOW_H
#define RINGMASTER_COORDINATORD_ENVALLOW_H

#include <stdbool.h>
#include <stddef.h>

#include "jobspec.h"

#define ENVALLOW_DEFAULT "NCCL_*,CUDA_*,OMP_*,GLOO_*,LD_LIBRARY_PATH,PYTHON*,TORCH_*,RINGMASTER_USER_*"
#define ENVALLOW_JOB_DEFAULT "NCCL_*,CUDA_*,OMP_*,GLOO_*,LD_LIBRARY_PATH"
#define ENVALLOW_MAX_BYTES 4096

/* Whether `patterns` is a valid env_allow value: 1..ENVALLOW_MAX_BYTES - 1
 * bytes of comma-separated non-empty patterns of [A-Za-z0-9_], each with
 * at most one '*', at its end. */
bool envallow_valid(const char *patterns);

/* Set the patterns the check uses for program.env / for env (copied; called
 * once at startup, before the HTTP threads; an invalid value is ignored). */
void envallow_set(const char *patterns);
void envallow_set_job(const char *patterns);

/* Whether `name` matches one of the comma-separated `patterns`. */
bool envallow_match(const char *patterns, const char *name);

/* Whether the agent sets `name` itself (a spec may not). */
bool envallow_reserved(const char *name);

/*
 * Check a spec's env names, then its program.env names: 0, or 422 with
 * `detail` (one sentence naming the variable and why) and `pointer`
 * ("/env/NAME" or "/program/env/NAME") for the first one refused.
 */
int envallow_check(const jobspec_t *spec, char *detail, size_t detail_len, char *pointer, size_t pointer_len);

#endif
