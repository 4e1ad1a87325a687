/*
 * jobspec: the training job specification, parsed and validated.
 *
 * A job spec is the JSON document a user submits (POST /v1/jobs, `ringworker
 * train --spec`). This module is its one parser and validator; the coordinator
 * and the worker both link it, and schema/jobspec.schema.json describes the
 * same document for other tools (a test keeps the two in agreement).
 *
 * Every field but data.train and the optional resume_from and profile has a default (in
 * the field comments below and the table in docs/jobspec.md). Unknown fields are refused so that typos never pass
 * silently. Errors name the offending field by its JSON pointer
 * ("/model/n_head") and say what was wrong and what is allowed.
 */
#ifndef RINGMASTER_API_JOBSPEC_H
#define RINGMASTER_API_JOBSPEC_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

typedef enum {
	JOBSPEC_FORMAT_NANOGPT = 0, /* flat uint16 tokens */
	JOBSPEC_FORMAT_LLMC,        /* 256 x int32 header (magic 20240520); version 1: uint16, 2: uint32 tokens */
	JOBSPEC_FORMAT_TEXT,        /* raw bytes, vocabulary 256 */
	JOBSPEC_FORMAT_UINT32,      /* flat uint32 tokens (large vocabularies) */
} jobspec_format_t;

typedef enum {
	JOBSPEC_SCHEDULE_COSINE = 0,
	JOBSPEC_SCHEDULE_CONSTANT,
} jobspec_schedule_t;

typedef enum {
	JOBSPEC_PRECISION_FP32 = 0,
	JOBSPEC_PRECISION_BF16, /* bf16 matmul inputs, fp32 accumulation and master weights */
} jobspec_precision_t;

typedef enum {
	JOBSPEC_DEVICE_CPU = 0,
	JOBSPEC_DEVICE_CUDA,
} jobspec_device_t;

typedef enum {
	JOBSPEC_SHARDING_NONE = 0,
	JOBSPEC_SHARDING_ZERO1,
	JOBSPEC_SHARDING_ZERO2,
	JOBSPEC_SHARDING_ZERO3,
} jobspec_sharding_t;

/* Limits enforced by validation (also in the JSON schema). */
#define JOBSPEC_NAME_MAX_BYTES 256
#define JOBSPEC_PATH_MAX_BYTES 4096
#define JOBSPEC_MAX_LAYERS 1024
#define JOBSPEC_MAX_EMBD 65536
#define JOBSPEC_MAX_HEADS 1024
#define JOBSPEC_MAX_VOCAB 1048576
#define JOBSPEC_MAX_SEQ_LEN 1048576
#define JOBSPEC_MAX_WORLD_SIZE 65536
#define JOBSPEC_MAX_TENSOR 64 /* parallel.tensor: a tensor-parallel group fits in a node */
#define JOBSPEC_MAX_PRIORITY 1000
#define JOBSPEC_MIN_PRIORITY (-1000)
#define JOBSPEC_JOB_ID_MAX_BYTES 64 /* resume_from.job (coordinator ids are 22 bytes) */
#define JOBSPEC_MAX_PROFILE_STEPS 1000 /* profile: end_step - start_step + 1 at most */
#define JOBSPEC_PROGRAM_MAX_ARGS 256     /* program.argv: 1..this many strings */
#define JOBSPEC_PROGRAM_MAX_ARG_BYTES 4096 /* each argv string, program.cwd, each env value */
#define JOBSPEC_PROGRAM_MAX_ENV 256      /* program.env: at most this many names */
#define JOBSPEC_PROGRAM_MAX_ENV_NAME 255 /* bytes of one env name */

typedef struct {
	char *name; /* 1..JOBSPEC_NAME_MAX_BYTES bytes of UTF-8, stored as sent */

	struct {
		char arch[8];   /* "gpt2" (default) or "llama" */
		int n_layer;    /* default 6 */
		int n_head;     /* default 6; n_embd % n_head == 0 */
		int n_embd;     /* default 384 */
		int vocab_size; /* default 256 (bytes); <= 256 for format "text", <= 65536 for "nanogpt" */
		int seq_len;    /* default 256 */
		/* Llama only (arch "llama"; zero for GPT-2, which refuses them): */
		int n_kv_head;        /* default n_head; n_head % n_kv_head == 0 */
		int ffn_dim;          /* default Llama's rule from n_embd (docs/jobspec.md) */
		double rope_theta;    /* default 500000 */
		struct {
			double factor;             /* 0: no scaling (default) */
			double low_freq_factor;
			double high_freq_factor;
			int original_max_position;
		} rope_scaling;
		double norm_eps;      /* default 1e-5 */
		int tie_embeddings;   /* 0/1; default 0 (1 in presets that tie) */
		char preset[32];      /* "" or the preset's name the shape came from */
	} model;

	/* Start from pretrained weights (optional): a safetensors file with
	 * Hugging Face names, or a sharded set's model.safetensors.index.json,
	 * beneath the agent's data root; NULL when absent. */
	struct {
		char *safetensors;
	} init;

	struct {
		char *train;             /* required: a path or a glob of shards */
		char *val;               /* NULL when absent (jobspec_to_json writes null) */
		jobspec_format_t format; /* default "nanogpt" */
	} data;

	struct {
		int64_t steps;        /* default 1000, >= 1 */
		int batch_size;       /* per rank, per micro-step; default 8 */
		int grad_accum;       /* micro-steps per optimizer step; default 1 */
		double lr;            /* peak learning rate; default 6e-4 */
		int64_t warmup_steps; /* default 100, linear from lr/warmup to lr */
		jobspec_schedule_t lr_schedule; /* default cosine */
		double min_lr;        /* cosine floor; default 6e-5; <= lr */
		double weight_decay;  /* AdamW, not on biases and LayerNorm; default 0.1 */
		double grad_clip;     /* global norm; 0 disables; default 1.0 */
		uint64_t seed;        /* default 1337; < 2^53 so JSON keeps it exact */
		int64_t eval_every;   /* steps between validation passes; 0 disables; default 100 */
		int eval_batches;     /* batches per validation pass; default 8 */
		jobspec_precision_t precision; /* default fp32 */
	} train;

	struct {
		int world_size;               /* default 1; tensor x the data-parallel size */
		int tensor;                   /* tensor-parallel group size t, 1..JOBSPEC_MAX_TENSOR; default 1 */
		jobspec_device_t device;      /* default cpu */
		jobspec_sharding_t sharding;  /* default none */
		int ranks_per_node;           /* at most this many ranks on one node; 0 (absent): no limit */
	} parallel;

	struct {
		int64_t every_steps; /* 0 disables snapshots; default 100 */
		int keep_last;       /* default 3, >= 1 */
		int64_t keep_every;  /* also keep every M-th step; 0 disables; default 0 */
	} checkpoint;

	struct {
		int max_restarts; /* default 3 */
	} restart;

	int priority; /* higher runs first; JOBSPEC_MIN_PRIORITY..JOBSPEC_MAX_PRIORITY; default 0 */

	/* Start from another job's committed snapshot (optional, no default):
	 * job NULL when absent (jobspec_to_json then leaves the field out). The
	 * coordinator checks that the snapshot exists; a job's own snapshots,
	 * once it has any, take precedence (docs/snapshots.md). */
	struct {
		char *job;    /* 1..JOBSPEC_JOB_ID_MAX_BYTES bytes; NULL: no resume_from */
		int64_t step; /* >= 1 and < train.steps; 0 when job is NULL */
	} resume_from;

	/* Record a trace of the phases of steps start_step..end_step on every
	 * rank (optional, no default; docs/profiling.md): 1 <= start_step <=
	 * end_step <= train.steps, at most JOBSPEC_MAX_PROFILE_STEPS steps. Both
	 * 0 when absent (jobspec_to_json then leaves the field out). */
	struct {
		int64_t start_step;
		int64_t end_step;
	} profile;

	/* The user's own program instead of the built-in trainer (optional;
	 * docs/jobspec.md "Programs"): argc 0 when absent. A program job has
	 * no model, data, train, checkpoint, resume_from or profile (those
	 * sections are refused); the sections above keep their defaults and
	 * data.train is NULL. */
	struct {
		int argc;          /* 1..JOBSPEC_PROGRAM_MAX_ARGS; 0: a built-in trainer job */
		char **argv;       /* argc strings of 1..JOBSPEC_PROGRAM_MAX_ARG_BYTES bytes */
		char *cwd;         /* relative to the agent's --data-root, no ".."; NULL: the data root */
		int n_env;         /* 0..JOBSPEC_PROGRAM_MAX_ENV */
		char **env_names;  /* [A-Za-z_][A-Za-z0-9_]*, in the document's order */
		char **env_values; /* 0..JOBSPEC_PROGRAM_MAX_ARG_BYTES bytes each */
	} program;

	/* The job's environment (optional; docs/jobspec.md "Environment"),
	 * set in every rank's process, the built-in trainer's and a
	 * program's, over the agent's --env defaults; the coordinator checks
	 * the names against its job_env_allow (422). Names as program.env's
	 * (api/jobspec_ext.h), in the document's order; n 0 when absent. */
	struct {
		int n;
		char **names;
		char **values;
	} env;

	/* TensorBoard event files written by rank 0 (optional; docs/training.md
	 * "TensorBoard"): dir relative to the agent's --tensorboard-root (else
	 * its --checkpoint-root), without '..'; NULL when absent. Refused in a
	 * program job. */
	struct {
		char *dir;
	} tensorboard;
} jobspec_t;

/* Whether the spec runs the user's own program (a "program" section). */
static inline int jobspec_is_program(const jobspec_t *spec)
{
	return spec->program.argc > 0;
}

/* Where and why a spec was refused. `pointer` is a JSON pointer (RFC 6901) to
 * the offending field ("" for the whole document), `message` one sentence
 * that names the field, what was wrong and what is allowed. */
typedef struct {
	char pointer[256];
	char message[512];
} jobspec_error_t;

/*
 * Parse and validate a JSON document of `len` bytes (need not be
 * NUL-terminated). On success fills *ret_spec (free with jobspec_free) and
 * returns 0. On failure returns -EINVAL (invalid JSON or spec) or -ENOMEM and
 * fills *err; *ret_spec is left untouched. `err` may be NULL.
 */
int jobspec_parse(const char *json, size_t len, jobspec_t *ret_spec, jobspec_error_t *err);

/* As jobspec_parse, from an already decoded JSON value (borrowed). */
int jobspec_from_json(const json_t *doc, jobspec_t *ret_spec, jobspec_error_t *err);

/* Read and parse a spec file. Errors as jobspec_parse; a file that cannot be
 * read gives -errno (-EFBIG over 16 MiB) with err->pointer "" and a message
 * naming the path. */
int jobspec_load_file(const char *path, jobspec_t *ret_spec, jobspec_error_t *err);

/* The spec as a JSON object with every default filled in (new reference;
 * NULL only on out-of-memory). Parsing the result gives an equal spec. */
json_t *jobspec_to_json(const jobspec_t *spec);

/* The spec's model section as jobspec_to_json writes it (GPT-2: its six
 * fields; Llama: every field), for the snapshot manifest. New reference;
 * NULL only on out-of-memory. */
json_t *jobspec_model_json(const jobspec_t *spec);

/*
 * Check that the spec's data paths (data.train, data.val, and a program's
 * program.cwd) can only name
 * files beneath a root: relative, without ".." components. What every
 * submission to the coordinator must pass (400 naming the field), and
 * `ringworker train --data-root`; `ringworker train` without a root takes
 * the user's own paths as given. The agent still resolves each file beneath
 * its --data-root, so a symbolic link leading out is refused there. Returns
 * 0, or -EINVAL with err's pointer on the field.
 */
int jobspec_check_paths(const jobspec_t *spec, jobspec_error_t *err);

/* Release what jobspec_parse allocated; accepts a zeroed or freed spec. */
void jobspec_free(jobspec_t *spec);

/* Names of enum values as they appear in JSON ("nanogpt", "zero2", ...);
 * "invalid" for an out-of-range value. */
const char *jobspec_format_name(jobspec_format_t f);
const char *jobspec_schedule_name(jobspec_schedule_t s);
const char *jobspec_precision_name(jobspec_precision_t p);
const char *jobspec_device_name(jobspec_device_t d);
const char *jobspec_sharding_name(jobspec_sharding_t s);

#endif
