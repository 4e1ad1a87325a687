/*
 * envallow: which environment variable names a program job's spec may set
 * (program.env, issue 26), checked at submission (POST /v1/jobs answers 422
 * with the pointer /program/env/NAME).
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
#define ENVALLOW_MAX_BYTES 4096

/* Whether `patterns` is a valid env_allow value: 1..ENVALLOW_MAX_BYTES - 1
 * bytes of comma-separated non-empty patterns of [A-Za-z0-9_], each with
 * at most one '*', at its end. */
bool envallow_valid(const char *patterns);

/* Set the patterns the check uses (copied; called once at startup, before
 * the HTTP threads; an invalid value is ignored). */
void envallow_set(const char *patterns);

/* Whether `name` matches one of the comma-separated `patterns`. */
bool envallow_match(const char *patterns, const char *name);

/* Whether the agent sets `name` itself (a spec may not). */
bool envallow_reserved(const char *name);

/*
 * Check a spec's program.env names: 0, or 422 with `detail` (one sentence
 * naming the variable and why) and `pointer` ("/program/env/NAME").
 */
int envallow_check(const jobspec_t *spec, char *detail, size_t detail_len, char *pointer, size_t pointer_len);

#endif
