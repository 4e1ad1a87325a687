/*
 * jobspec_ext: the job spec's sections about where a rank runs rather than
 * what it trains (issue 25): the per-job environment `env` and the
 * `tensorboard` section, and the one rule for an environment object that
 * `env` and `program.env` share.
 *
 * api/jobspec.c calls these from jobspec_from_json, jobspec_to_json and
 * jobspec_free; they are their own file so that the sections' checks stay
 * together and jobspec.c's sections stay as they were. Errors fill a
 * jobspec_error_t like the rest of the parser: the JSON pointer of the
 * offending field and one sentence saying what is allowed.
 */
#ifndef RINGMASTER_API_JOBSPEC_EXT_H
#define RINGMASTER_API_JOBSPEC_EXT_H

#include <stdbool.h>

#include <jansson.h>

#include "jobspec.h"

#define JOBSPEC_ENV_MAX JOBSPEC_PROGRAM_MAX_ENV                 /* env: at most this many names */
#define JOBSPEC_ENV_MAX_NAME JOBSPEC_PROGRAM_MAX_ENV_NAME       /* bytes of one name */
#define JOBSPEC_ENV_MAX_VALUE JOBSPEC_PROGRAM_MAX_ARG_BYTES     /* bytes of one value */

/*
 * Check an environment object `env` (borrowed; NULL: absent, fine): an
 * object of at most JOBSPEC_ENV_MAX names [A-Za-z_][A-Za-z0-9_]* of at most
 * JOBSPEC_ENV_MAX_NAME bytes, each a string value of at most
 * JOBSPEC_ENV_MAX_VALUE bytes without NUL. `field` names it in messages
 * ("env", "program.env"), `pointer` is its JSON pointer ("/env"). Returns
 * 0, or -EINVAL with err's pointer on the object or on "/env/NAME".
 */
int jobspec_ext_check_env(const json_t *env, const char *field, const char *pointer, jobspec_error_t *err);

/*
 * Whether the agent sets `name` itself in every rank's process, so that
 * neither a spec's env or program.env nor an agent's --env may: torchrun's
 * variables, OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES and RINGMASTER_* other
 * than RINGMASTER_USER_* (docs/workers.md). The coordinator refuses them
 * at submission (422), the agent at its start and again at each SPAWN.
 */
bool jobspec_ext_env_reserved(const char *name);

/* Whether `name` is a variable name: [A-Za-z_][A-Za-z0-9_]*, 1 to
 * JOBSPEC_ENV_MAX_NAME bytes. */
bool jobspec_ext_env_name_ok(const char *name);

/*
 * Check the document's "env" and "tensorboard" sections (nothing is
 * allocated: jobspec_ext_copy does that once the whole spec passed).
 * tensorboard is {"dir": str} with dir relative, without '..', 1 to
 * JOBSPEC_PATH_MAX_BYTES bytes (default "tensorboard"); a program job
 * refuses it (the program writes its own). Returns 0 or -EINVAL with err.
 */
int jobspec_ext_read(const json_t *doc, jobspec_error_t *err);

/* Copy the checked sections of `doc` into spec->env and spec->tensorboard.
 * 0 or -ENOMEM (what was copied is freed by jobspec_ext_free). */
int jobspec_ext_copy(const json_t *doc, jobspec_t *spec);

/* Add "env" (only when it has names) and "tensorboard" (only when set) to
 * the rendered document `doc`. 0, or -1 on out-of-memory. */
int jobspec_ext_render(const jobspec_t *spec, json_t *doc);

/* Free spec->env and spec->tensorboard and zero them (accepts zeroed ones). */
void jobspec_ext_free(jobspec_t *spec);

#endif
