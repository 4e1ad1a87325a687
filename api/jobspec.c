/*
 * jobspec: parse, validate and render the training job specification.
 *
 * The document is checked field by field, in a fixed order: at each level the
 * unknown keys first (so that a typo is reported as such rather than as a
 * missing field), then every known field against its type and range, then the
 * rules that tie two fields together. The first problem found is reported with
 * the JSON pointer of the field and one sentence naming the field, what was
 * wrong and what is allowed. docs/jobspec.md lists the same defaults and
 * bounds, and schema/jobspec.schema.json encodes them for other tools.
 *
 * The model section (GPT-2's and Llama's fields, presets) is read and
 * rendered by jobspec_model.c; both files share jobspec_internal.h's field
 * readers.
 *
 * Numbers: integer fields take JSON integers only (8, not 8.0 or 8e0), so a
 * value is never silently truncated; real fields take integers or reals.
 * Strings are kept byte for byte as sent; jansson has already checked that
 * they are valid UTF-8 without NUL bytes.
 */
#include "jobspec.h"

#include "fsutil.h"
#include "jobspec_ext.h"
#include "jobspec_internal.h"

/* Defaults (docs/jobspec.md has the same table). */
#define DEFAULT_NAME "unnamed"
#define DEFAULT_STEPS 1000
#define DEFAULT_BATCH_SIZE 8
#define DEFAULT_GRAD_ACCUM 1
#define DEFAULT_LR 6e-4
#define DEFAULT_WARMUP_STEPS 100
#define DEFAULT_MIN_LR 6e-5
#define DEFAULT_WEIGHT_DECAY 0.1
#define DEFAULT_GRAD_CLIP 1.0
#define DEFAULT_SEED 1337
#define DEFAULT_EVAL_EVERY 100
#define DEFAULT_EVAL_BATCHES 8
#define DEFAULT_WORLD_SIZE 1
#define DEFAULT_EVERY_STEPS 100
#define DEFAULT_KEEP_LAST 3
#define DEFAULT_KEEP_EVERY 0
#define DEFAULT_MAX_RESTARTS 3
#define DEFAULT_PRIORITY 0

/* Bounds not in the header (docs/jobspec.md states them all). */
#define MAX_STEPS INT64_C(1000000000) /* 10^9: years of steps; bounds every step count */
#define MAX_BATCH_SIZE 65536
#define MAX_GRAD_ACCUM 65536
#define MAX_LR 10.0
#define MAX_WEIGHT_DECAY 10.0
#define MAX_GRAD_CLIP 1e6
#define MAX_SEED ((INT64_C(1) << 53) - 1)
#define MAX_EVAL_BATCHES 100000
#define MAX_KEEP_LAST 1000000
#define MAX_RESTARTS 1000
#define MAX_FILE_BYTES (16 * 1024 * 1024)

static const char *const s_format_names[] = {"nanogpt", "llmc", "text", "uint32"};
static const char *const s_schedule_names[] = {"cosine", "constant"};
static const char *const s_precision_names[] = {"fp32", "bf16"};
static const char *const s_device_names[] = {"cpu", "cuda"};
static const char *const s_sharding_names[] = {"none", "zero1", "zero2", "zero3"};

/* Keys allowed in each object; NULL-terminated. */
static const char *const s_root_keys[] = {
	"name", "model", "data", "train", "parallel", "checkpoint", "restart", "priority",
	"resume_from", "profile", "program", "env", "tensorboard", "init", NULL};
static const char *const s_data_keys[] = {"train", "val", "format", NULL};
static const char *const s_train_keys[] = {
	"steps", "batch_size", "grad_accum", "lr", "warmup_steps", "lr_schedule", "min_lr",
	"weight_decay", "grad_clip", "seed", "eval_every", "eval_batches", "precision", NULL};
static const char *const s_parallel_keys[] = {"world_size", "device", "sharding", "ranks_per_node", "tensor",
					       NULL};
static const char *const s_program_keys[] = {"argv", "cwd", "env", NULL};
/* The built-in trainer's sections, refused in a program job. */
static const char *const s_trainer_sections[] = {
	"model", "data", "train", "checkpoint", "resume_from", "profile", "init", NULL};
static const char *const s_checkpoint_keys[] = {"every_steps", "keep_last", "keep_every", NULL};
static const char *const s_restart_keys[] = {"max_restarts", NULL};
static const char *const s_resume_from_keys[] = {"job", "step", NULL};
static const char *const s_profile_keys[] = {"start_step", "end_step", NULL};
static const char *const s_init_keys[] = {"safetensors", NULL};

/* ---- the document ---- */

/* Fills *spec with borrowed string pointers into `doc` (copied by the caller). */
typedef struct {
	const char *name;
	const char *train;
	const char *val;
	const char *resume_job; /* NULL: no resume_from */
	const char *init;       /* NULL: no init */
} s_strings_t;

static int s_read_data(const json_t *doc, jobspec_t *s, s_strings_t *str, jobspec_error_t *err)
{
	const json_t *d;
	int e;
	TRY(s_get_section(doc, "data", s_data_keys, &d, err));
	TRY(s_get_string(d, "data", "train", JOBSPEC_PATH_MAX_BYTES,
			 "the path or glob of the training token shards", false, &str->train, err));
	TRY(s_get_string(d, "data", "val", JOBSPEC_PATH_MAX_BYTES, NULL, true, &str->val, err));
	TRY(s_get_enum(d, "data", "format", s_format_names, N_ELEMS(s_format_names),
		       JOBSPEC_FORMAT_NANOGPT, &e, err));
	s->data.format = (jobspec_format_t)e;
	return 0;
}

static int s_read_train(const json_t *doc, jobspec_t *s, jobspec_error_t *err)
{
	const json_t *t;
	int64_t v;
	int e;
	TRY(s_get_section(doc, "train", s_train_keys, &t, err));
	TRY(s_get_int(t, "train", "steps", 1, MAX_STEPS, DEFAULT_STEPS, &s->train.steps, err));
	TRY(s_get_int(t, "train", "batch_size", 1, MAX_BATCH_SIZE, DEFAULT_BATCH_SIZE, &v, err));
	s->train.batch_size = (int)v;
	TRY(s_get_int(t, "train", "grad_accum", 1, MAX_GRAD_ACCUM, DEFAULT_GRAD_ACCUM, &v, err));
	s->train.grad_accum = (int)v;
	TRY(s_get_real(t, "train", "lr", 0.0, true, MAX_LR, DEFAULT_LR, &s->train.lr, err));
	TRY(s_get_int(t, "train", "warmup_steps", 0, MAX_STEPS, DEFAULT_WARMUP_STEPS,
		      &s->train.warmup_steps, err));
	TRY(s_get_enum(t, "train", "lr_schedule", s_schedule_names, N_ELEMS(s_schedule_names),
		       JOBSPEC_SCHEDULE_COSINE, &e, err));
	s->train.lr_schedule = (jobspec_schedule_t)e;
	TRY(s_get_real(t, "train", "min_lr", 0.0, false, MAX_LR, DEFAULT_MIN_LR, &s->train.min_lr,
		       err));
	TRY(s_get_real(t, "train", "weight_decay", 0.0, false, MAX_WEIGHT_DECAY,
		       DEFAULT_WEIGHT_DECAY, &s->train.weight_decay, err));
	TRY(s_get_real(t, "train", "grad_clip", 0.0, false, MAX_GRAD_CLIP, DEFAULT_GRAD_CLIP,
		       &s->train.grad_clip, err));
	TRY(s_get_int(t, "train", "seed", 0, MAX_SEED, DEFAULT_SEED, &v, err));
	s->train.seed = (uint64_t)v;
	TRY(s_get_int(t, "train", "eval_every", 0, MAX_STEPS, DEFAULT_EVAL_EVERY,
		      &s->train.eval_every, err));
	TRY(s_get_int(t, "train", "eval_batches", 1, MAX_EVAL_BATCHES, DEFAULT_EVAL_BATCHES, &v,
		      err));
	s->train.eval_batches = (int)v;
	TRY(s_get_enum(t, "train", "precision", s_precision_names, N_ELEMS(s_precision_names),
		       JOBSPEC_PRECISION_FP32, &e, err));
	s->train.precision = (jobspec_precision_t)e;
	return 0;
}

static int s_read_rest(const json_t *doc, jobspec_t *s, jobspec_error_t *err)
{
	const json_t *o;
	int64_t v;
	int e;
	TRY(s_get_section(doc, "parallel", s_parallel_keys, &o, err));
	TRY(s_get_int(o, "parallel", "world_size", 1, JOBSPEC_MAX_WORLD_SIZE, DEFAULT_WORLD_SIZE,
		      &v, err));
	s->parallel.world_size = (int)v;
	TRY(s_get_enum(o, "parallel", "device", s_device_names, N_ELEMS(s_device_names),
		       JOBSPEC_DEVICE_CPU, &e, err));
	s->parallel.device = (jobspec_device_t)e;
	TRY(s_get_enum(o, "parallel", "sharding", s_sharding_names, N_ELEMS(s_sharding_names),
		       JOBSPEC_SHARDING_NONE, &e, err));
	s->parallel.sharding = (jobspec_sharding_t)e;
	TRY(s_get_int(o, "parallel", "ranks_per_node", 1, JOBSPEC_MAX_WORLD_SIZE, 0, &v, err));
	s->parallel.ranks_per_node = (int)v;
	TRY(s_get_int(o, "parallel", "tensor", 1, JOBSPEC_MAX_TENSOR, 1, &v, err));
	s->parallel.tensor = (int)v;

	TRY(s_get_section(doc, "checkpoint", s_checkpoint_keys, &o, err));
	TRY(s_get_int(o, "checkpoint", "every_steps", 0, MAX_STEPS, DEFAULT_EVERY_STEPS,
		      &s->checkpoint.every_steps, err));
	TRY(s_get_int(o, "checkpoint", "keep_last", 1, MAX_KEEP_LAST, DEFAULT_KEEP_LAST, &v, err));
	s->checkpoint.keep_last = (int)v;
	TRY(s_get_int(o, "checkpoint", "keep_every", 0, MAX_STEPS, DEFAULT_KEEP_EVERY,
		      &s->checkpoint.keep_every, err));

	TRY(s_get_section(doc, "restart", s_restart_keys, &o, err));
	TRY(s_get_int(o, "restart", "max_restarts", 0, MAX_RESTARTS, DEFAULT_MAX_RESTARTS, &v, err));
	s->restart.max_restarts = (int)v;

	TRY(s_get_int(doc, NULL, "priority", JOBSPEC_MIN_PRIORITY, JOBSPEC_MAX_PRIORITY,
		      DEFAULT_PRIORITY, &v, err));
	s->priority = (int)v;
	return 0;
}

/* resume_from: optional, but when given both fields are required. */
static int s_read_resume_from(const json_t *doc, jobspec_t *s, s_strings_t *str,
			      jobspec_error_t *err)
{
	const json_t *o;
	TRY(s_get_section(doc, "resume_from", s_resume_from_keys, &o, err));
	if (!o)
		return 0;
	TRY(s_get_string(o, "resume_from", "job", JOBSPEC_JOB_ID_MAX_BYTES,
			 "the id of the job whose snapshot to start from", false, &str->resume_job,
			 err));
	if (!json_object_get(o, "step"))
		return s_fail(err, "/resume_from/step",
			      "resume_from.step is required: the step of a committed snapshot of"
			      " resume_from.job (an integer between 1 and %" PRId64 ")",
			      MAX_STEPS);
	TRY(s_get_int(o, "resume_from", "step", 1, MAX_STEPS, 0, &s->resume_from.step, err));
	return 0;
}

/* profile: optional; when given both fields are required. */
static int s_read_profile(const json_t *doc, jobspec_t *s, jobspec_error_t *err)
{
	const json_t *o;
	TRY(s_get_section(doc, "profile", s_profile_keys, &o, err));
	if (!o)
		return 0;
	static const char *const keys[] = {"start_step", "end_step"};
	for (int i = 0; i < 2; i++)
		if (!json_object_get(o, keys[i]))
			return s_fail(err, i ? "/profile/end_step" : "/profile/start_step",
				      "profile.%s is required: the %s step to trace (an integer between 1 and"
				      " train.steps; profile covers at most %d steps)",
				      keys[i], i ? "last" : "first", JOBSPEC_MAX_PROFILE_STEPS);
	TRY(s_get_int(o, "profile", "start_step", 1, MAX_STEPS, 0, &s->profile.start_step, err));
	TRY(s_get_int(o, "profile", "end_step", 1, MAX_STEPS, 0, &s->profile.end_step, err));
	return 0;
}

/* init: optional; when given, safetensors is required. */
static int s_read_init(const json_t *doc, s_strings_t *str, jobspec_error_t *err)
{
	const json_t *o;
	TRY(s_get_section(doc, "init", s_init_keys, &o, err));
	if (!o)
		return 0;
	TRY(s_get_string(o, "init", "safetensors", JOBSPEC_PATH_MAX_BYTES,
			 "the safetensors file (or a sharded set's model.safetensors.index.json) to start from",
			 false, &str->init, err));
	return 0;
}

/* "program": checked here, copied by s_copy_program once everything
 * passed. A program job refuses the built-in trainer's sections. */
static int s_read_program(const json_t *doc, jobspec_t *s, const json_t **ret, jobspec_error_t *err)
{
	const json_t *o;
	*ret = NULL;
	TRY(s_get_section(doc, "program", s_program_keys, &o, err));
	if (!o)
		return 0;
	for (const char *const *k = s_trainer_sections; *k; k++) {
		char pointer[32];
		snprintf(pointer, sizeof pointer, "/%s", *k);
		if (json_object_get(doc, *k))
			return s_fail(err, pointer,
				      "a program job has no %s: the program brings its own (leave %s out, or leave"
				      " program out to run the built-in trainer)", *k, *k);
	}
	const json_t *argv = json_object_get(o, "argv");
	char got[64];
	if (!json_is_array(argv) || json_array_size(argv) < 1 ||
	    json_array_size(argv) > JOBSPEC_PROGRAM_MAX_ARGS) {
		if (argv && json_is_array(argv))
			snprintf(got, sizeof got, "%zu strings", json_array_size(argv));
		else if (argv)
			s_describe(argv, got, sizeof got);
		else
			snprintf(got, sizeof got, "nothing");
		return s_fail(err, "/program/argv",
			      "program.argv is required: an array of 1 to %d strings, the program and its"
			      " arguments (got %s)", JOBSPEC_PROGRAM_MAX_ARGS, got);
	}
	size_t i;
	const json_t *a;
	json_array_foreach(argv, i, a) {
		char pointer[48];
		snprintf(pointer, sizeof pointer, "/program/argv/%zu", i);
		size_t len = json_is_string(a) ? json_string_length(a) : 0;
		if (json_is_string(a) && memchr(json_string_value(a), '\0', len))
			return s_fail(err, pointer, "program.argv[%zu] must not contain NUL bytes", i);
		if (!json_is_string(a) || len < 1 || len > JOBSPEC_PROGRAM_MAX_ARG_BYTES) {
			if (json_is_string(a))
				snprintf(got, sizeof got, "%zu bytes", len);
			else
				s_describe(a, got, sizeof got);
			return s_fail(err, pointer, "program.argv[%zu] must be a string of 1 to %d bytes (got %s)",
				      i, JOBSPEC_PROGRAM_MAX_ARG_BYTES, got);
		}
	}
	const char *cwd;
	TRY(s_get_string(o, "program", "cwd", JOBSPEC_PROGRAM_MAX_ARG_BYTES, NULL, true, &cwd, err));
	const json_t *env = json_object_get(o, "env");
	TRY(jobspec_ext_check_env(env, "program.env", "/program/env", err));
	s->program.argc = (int)json_array_size(argv);
	s->program.n_env = env ? (int)json_object_size(env) : 0;
	*ret = o;
	return 0;
}

/* Copy the checked program section `o` into s (argc and n_env set). */
static int s_copy_program(const json_t *o, jobspec_t *s)
{
	const json_t *cwd = json_object_get(o, "cwd"), *env = json_object_get(o, "env");
	s->program.argv = calloc((size_t)s->program.argc, sizeof(char *));
	s->program.env_names = calloc((size_t)s->program.n_env + 1, sizeof(char *));
	s->program.env_values = calloc((size_t)s->program.n_env + 1, sizeof(char *));
	if (!s->program.argv || !s->program.env_names || !s->program.env_values)
		return -ENOMEM;
	for (int i = 0; i < s->program.argc; i++)
		if (!(s->program.argv[i] = strdup(json_string_value(json_array_get(json_object_get(o, "argv"), (size_t)i)))))
			return -ENOMEM;
	if (json_is_string(cwd) && !(s->program.cwd = strdup(json_string_value(cwd))))
		return -ENOMEM;
	int k = 0;
	const char *name;
	const json_t *val;
	json_object_foreach((json_t *)env, name, val) {
		s->program.env_names[k] = strdup(name);
		s->program.env_values[k] = strdup(json_string_value(val));
		if (!s->program.env_names[k] || !s->program.env_values[k])
			return -ENOMEM;
		k++;
	}
	return 0;
}

/* parallel.tensor's rules (docs/jobspec.md "Tensor parallelism"): the world
 * is tensor x data-parallel ranks, and each tensor-parallel rank holds
 * n_head / t query heads, n_kv_head / t key/value heads, FFN / t hidden
 * units and seq_len / t positions of the residual stream (sequence
 * parallelism). The vocabulary is padded to a multiple of t by the engine
 * (padded rows never reach snapshots), so it needs no rule. */
static int s_check_tensor(const json_t *doc, const jobspec_t *s, jobspec_error_t *err)
{
	const int t = s->parallel.tensor;
	if (t == 1)
		return 0;
	if (jobspec_is_program(s))
		return s_fail(err, "/parallel/tensor",
			      "parallel.tensor (%d) is for the built-in trainer: a program job splits its"
			      " model itself; leave parallel.tensor out", t);
	if (s->parallel.world_size % t != 0)
		return s_fail(err, "/parallel/tensor",
			      "parallel.world_size (%d%s) must be a multiple of parallel.tensor (%d):"
			      " world_size is tensor x the data-parallel size; set world_size to a multiple"
			      " of %d such as %d",
			      s->parallel.world_size, s_has(doc, "parallel", "world_size") ? "" : ", the default",
			      t, t, t * ((s->parallel.world_size + t - 1) / t));
	const bool llama = strcmp(s->model.arch, "llama") == 0;
	const int ffn = llama ? s->model.ffn_dim : 4 * s->model.n_embd;
	if (s->model.n_head % t != 0)
		return s_fail(err, "/parallel/tensor",
			      "model.n_head (%d) must be divisible by parallel.tensor (%d): each"
			      " tensor-parallel rank computes n_head / tensor attention heads",
			      s->model.n_head, t);
	if (llama && s->model.n_kv_head % t != 0)
		return s_fail(err, "/parallel/tensor",
			      "model.n_kv_head (%d) must be divisible by parallel.tensor (%d): each"
			      " tensor-parallel rank holds n_kv_head / tensor key/value heads",
			      s->model.n_kv_head, t);
	if (ffn % t != 0)
		return s_fail(err, "/parallel/tensor",
			      "the MLP width (%s%d) must be divisible by parallel.tensor (%d): each"
			      " tensor-parallel rank holds width / tensor hidden units",
			      llama ? "model.ffn_dim " : "4 x model.n_embd = ", ffn, t);
	if (s->model.seq_len % t != 0)
		return s_fail(err, "/parallel/tensor",
			      "model.seq_len (%d%s) must be divisible by parallel.tensor (%d): sequence"
			      " parallelism gives each tensor-parallel rank seq_len / tensor positions",
			      s->model.seq_len, s_has(doc, "model", "seq_len") ? "" : ", the default", t);
	return 0;
}

/* Rules that tie fields together; every field is already in range. When one
 * side of a rule was left at its default, the pointer names the side the user
 * wrote and the message says which value is the default. */
static int s_check_cross(const json_t *doc, const jobspec_t *s, jobspec_error_t *err)
{
	char a[32], b[32];

	if (s->train.min_lr > s->train.lr) {
		bool min_given = s_has(doc, "train", "min_lr");
		s_format_real(s->train.min_lr, a, sizeof(a));
		s_format_real(s->train.lr, b, sizeof(b));
		return s_fail(err, min_given ? "/train/min_lr" : "/train/lr",
			      "train.min_lr (%s%s) must be at most train.lr (%s%s); lower train.min_lr or raise train.lr",
			      a, min_given ? "" : ", the default", b,
			      s_has(doc, "train", "lr") ? "" : ", the default");
	}

	if (s->train.warmup_steps > s->train.steps) {
		bool warmup_given = s_has(doc, "train", "warmup_steps");
		return s_fail(err, warmup_given ? "/train/warmup_steps" : "/train/steps",
			      "train.warmup_steps (%" PRId64 "%s) must be at most train.steps (%" PRId64
			      "%s); set train.warmup_steps to at most %" PRId64,
			      s->train.warmup_steps, warmup_given ? "" : ", the default",
			      s->train.steps, s_has(doc, "train", "steps") ? "" : ", the default",
			      s->train.steps);
	}

	/* the GPU engine (docs/gpu.md): bf16 matrix products */
	if (s->parallel.device == JOBSPEC_DEVICE_CUDA && s->train.precision != JOBSPEC_PRECISION_BF16)
		return s_fail(err, "/train/precision",
			      "train.precision \"fp32\" is not available with parallel.device \"cuda\": the GPU"
			      " engine computes its matrix products in bf16 (fp32 accumulation, fp32 master"
			      " weights and AdamW); leave train.precision out (bf16 is the default on cuda) or"
			      " set it to \"bf16\"");

	if (json_object_get(doc, "resume_from") && s->resume_from.step >= s->train.steps)
		return s_fail(err, "/resume_from/step",
			      "resume_from.step (%" PRId64 ") must be less than train.steps (%" PRId64
			      "%s): the job goes on from the step after the snapshot; raise train.steps",
			      s->resume_from.step, s->train.steps,
			      s_has(doc, "train", "steps") ? "" : ", the default");

	if (json_object_get(doc, "profile")) {
		const int64_t first = s->profile.start_step, last = s->profile.end_step;
		if (first > last)
			return s_fail(err, "/profile/start_step",
				      "profile.start_step (%" PRId64 ") must be at most profile.end_step (%" PRId64
				      ")", first, last);
		if (last > s->train.steps)
			return s_fail(err, "/profile/end_step",
				      "profile.end_step (%" PRId64 ") must be at most train.steps (%" PRId64
				      "%s): only steps that run can be traced",
				      last, s->train.steps, s_has(doc, "train", "steps") ? "" : ", the default");
		if (last - first + 1 > JOBSPEC_MAX_PROFILE_STEPS)
			return s_fail(err, "/profile/end_step",
				      "profile.end_step (%" PRId64 ") must be at most %" PRId64 ": a profile"
				      " covers at most %d steps (got %" PRId64 " from profile.start_step %" PRId64 ")",
				      last, first + JOBSPEC_MAX_PROFILE_STEPS - 1, JOBSPEC_MAX_PROFILE_STEPS,
				      last - first + 1, first);
	}
	return 0;
}

int jobspec_from_json(const json_t *doc, jobspec_t *ret_spec, jobspec_error_t *err)
{
	jobspec_t s;
	s_strings_t str = {0};
	int rc;

	memset(&s, 0, sizeof(s));
	if (!json_is_object(doc)) {
		char got[64];
		if (doc)
			s_describe(doc, got, sizeof(got));
		else
			snprintf(got, sizeof(got), "nothing");
		return s_fail(err, "", "the job spec must be a JSON object (got %s)", got);
	}
	rc = s_check_keys(doc, NULL, s_root_keys, err);
	if (rc < 0)
		return rc;
	rc = s_get_string(doc, NULL, "name", JOBSPEC_NAME_MAX_BYTES, NULL, false, &str.name, err);
	if (rc < 0)
		return rc;
	const json_t *program = NULL;
	if ((rc = s_read_program(doc, &s, &program, err)) < 0)
		return rc;
	if ((rc = jobspec_model_read(doc, &s, err)) < 0 ||
	    (!program && (rc = s_read_data(doc, &s, &str, err)) < 0) ||
	    (rc = s_read_train(doc, &s, err)) < 0 || (rc = s_read_rest(doc, &s, err)) < 0 ||
	    (rc = s_read_resume_from(doc, &s, &str, err)) < 0 ||
	    (rc = s_read_profile(doc, &s, err)) < 0 || (rc = jobspec_ext_read(doc, err)) < 0 ||
	    (rc = s_read_init(doc, &str, err)) < 0)
		return rc;
	/* precision's default depends on the device: bf16 on cuda */
	if (s.parallel.device == JOBSPEC_DEVICE_CUDA && !s_has(doc, "train", "precision"))
		s.train.precision = JOBSPEC_PRECISION_BF16;
	if ((rc = jobspec_model_check(doc, &s, err)) < 0 || (rc = s_check_cross(doc, &s, err)) < 0 ||
	    (rc = s_check_tensor(doc, &s, err)) < 0)
		return rc;

	/* Strings are copied last so that no failure above has anything to free. */
	s.name = strdup(str.name ? str.name : DEFAULT_NAME);
	s.data.train = str.train ? strdup(str.train) : NULL;
	s.data.val = str.val ? strdup(str.val) : NULL;
	s.resume_from.job = str.resume_job ? strdup(str.resume_job) : NULL;
	s.init.safetensors = str.init ? strdup(str.init) : NULL;
	if (!s.name || (str.train && !s.data.train) || (str.val && !s.data.val) ||
	    (str.resume_job && !s.resume_from.job) || (str.init && !s.init.safetensors) ||
	    (program && s_copy_program(program, &s) < 0) || jobspec_ext_copy(doc, &s) < 0) {
		jobspec_free(&s);
		return s_fail_oom(err);
	}
	*ret_spec = s;
	return 0;
}

int jobspec_parse(const char *json, size_t len, jobspec_t *ret_spec, jobspec_error_t *err)
{
	json_error_t jerr;
	json_t *doc;
	int rc;

	if (!json && len > 0)
		return s_fail(err, "", "the job spec is missing");
	/* JSON_DECODE_ANY so that a bare scalar gets "must be a JSON object";
	 * duplicate keys are refused because which one wins is ambiguous. */
	doc = json_loadb(json ? json : "", len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
	if (!doc) {
		if (json_error_code(&jerr) == json_error_out_of_memory)
			return s_fail_oom(err);
		if (strstr(jerr.text, "JSON_ALLOW_NUL"))
			return s_fail(err, "", "invalid JSON at line %d, column %d: \\u0000 (NUL) is not allowed in strings",
				      jerr.line, jerr.column);
		return s_fail(err, "", "invalid JSON at line %d, column %d: %s", jerr.line,
			      jerr.column, jerr.text);
	}
	rc = jobspec_from_json(doc, ret_spec, err);
	json_decref(doc);
	return rc;
}

int jobspec_load_file(const char *path, jobspec_t *ret_spec, jobspec_error_t *err)
{
	FILE *f;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	int rc;

	f = fopen(path, "rb");
	if (!f) {
		rc = -errno;
		goto fail_open;
	}
	for (;;) {
		if (len == cap) {
			size_t ncap = cap ? cap * 2 : 4096;
			char *nbuf;
			if (cap >= MAX_FILE_BYTES) {
				fclose(f);
				free(buf);
				if (err) {
					err->pointer[0] = '\0';
					snprintf(err->message, sizeof(err->message),
						 "job spec file %s is larger than %d bytes", path,
						 MAX_FILE_BYTES);
				}
				return -EFBIG;
			}
			nbuf = realloc(buf, ncap);
			if (!nbuf) {
				fclose(f);
				free(buf);
				return s_fail_oom(err);
			}
			buf = nbuf;
			cap = ncap;
		}
		errno = 0;
		size_t n = fread(buf + len, 1, cap - len, f);
		len += n;
		if (n == 0) {
			if (ferror(f)) {
				rc = errno ? -errno : -EIO;
				fclose(f);
				free(buf);
				goto fail_open;
			}
			break;
		}
	}
	fclose(f);
	rc = jobspec_parse(buf, len, ret_spec, err);
	free(buf);
	return rc;

fail_open:
	if (err) {
		err->pointer[0] = '\0';
		snprintf(err->message, sizeof(err->message), "cannot read job spec file %s: %s",
			 path, strerror(-rc));
	}
	return rc;
}

/* ---- rendering ---- */

static int s_set(json_t *obj, const char *key, json_t *value)
{
	return json_object_set_new(obj, key, value); /* steals value, even on failure */
}

json_t *jobspec_to_json(const jobspec_t *s)
{
	json_t *doc = json_object();
	json_t *model = json_object(), *data = json_object(), *train = json_object();
	json_t *parallel = json_object(), *checkpoint = json_object(), *restart = json_object();
	int bad = 0;

	if (!doc || !model || !data || !train || !parallel || !checkpoint || !restart) {
		json_decref(doc);
		json_decref(model);
		json_decref(data);
		json_decref(train);
		json_decref(parallel);
		json_decref(checkpoint);
		json_decref(restart);
		return NULL;
	}
	bad |= s_set(doc, "name", json_string(s->name ? s->name : DEFAULT_NAME));
	if (jobspec_is_program(s)) {
		/* a program job has none of the trainer's sections */
		json_decref(model);
		json_decref(data);
		json_decref(train);
		json_decref(checkpoint);
		model = data = train = checkpoint = NULL;
		json_t *argv = json_array(), *env = json_object();
		for (int i = 0; argv && i < s->program.argc; i++)
			bad |= json_array_append_new(argv, json_string(s->program.argv[i]));
		for (int i = 0; env && i < s->program.n_env; i++)
			bad |= json_object_set_new(env, s->program.env_names[i], json_string(s->program.env_values[i]));
		bad |= s_set(doc, "program",
			     json_pack("{s:o*, s:o, s:o*}", "argv", argv, "cwd",
				       s->program.cwd ? json_string(s->program.cwd) : json_null(), "env", env));
		goto rest;
	}

	bad |= jobspec_model_to_json(s, model);
	bad |= s_set(doc, "model", model);

	bad |= s_set(data, "train", json_string(s->data.train ? s->data.train : ""));
	bad |= s_set(data, "val", s->data.val ? json_string(s->data.val) : json_null());
	bad |= s_set(data, "format", json_string(jobspec_format_name(s->data.format)));
	bad |= s_set(doc, "data", data);

	bad |= s_set(train, "steps", json_integer(s->train.steps));
	bad |= s_set(train, "batch_size", json_integer(s->train.batch_size));
	bad |= s_set(train, "grad_accum", json_integer(s->train.grad_accum));
	bad |= s_set(train, "lr", json_real(s->train.lr));
	bad |= s_set(train, "warmup_steps", json_integer(s->train.warmup_steps));
	bad |= s_set(train, "lr_schedule", json_string(jobspec_schedule_name(s->train.lr_schedule)));
	bad |= s_set(train, "min_lr", json_real(s->train.min_lr));
	bad |= s_set(train, "weight_decay", json_real(s->train.weight_decay));
	bad |= s_set(train, "grad_clip", json_real(s->train.grad_clip));
	bad |= s_set(train, "seed", json_integer((json_int_t)s->train.seed));
	bad |= s_set(train, "eval_every", json_integer(s->train.eval_every));
	bad |= s_set(train, "eval_batches", json_integer(s->train.eval_batches));
	bad |= s_set(train, "precision", json_string(jobspec_precision_name(s->train.precision)));
	bad |= s_set(doc, "train", train);

rest:
	bad |= s_set(parallel, "world_size", json_integer(s->parallel.world_size));
	bad |= s_set(parallel, "device", json_string(jobspec_device_name(s->parallel.device)));
	bad |= s_set(parallel, "sharding", json_string(jobspec_sharding_name(s->parallel.sharding)));
	if (s->parallel.ranks_per_node > 0)
		bad |= s_set(parallel, "ranks_per_node", json_integer(s->parallel.ranks_per_node));
	if (s->parallel.tensor > 1) /* absent at 1, so specs without TP keep their JSON */
		bad |= s_set(parallel, "tensor", json_integer(s->parallel.tensor));
	bad |= s_set(doc, "parallel", parallel);

	if (!checkpoint)
		goto tail;
	bad |= s_set(checkpoint, "every_steps", json_integer(s->checkpoint.every_steps));
	bad |= s_set(checkpoint, "keep_last", json_integer(s->checkpoint.keep_last));
	bad |= s_set(checkpoint, "keep_every", json_integer(s->checkpoint.keep_every));
	bad |= s_set(doc, "checkpoint", checkpoint);
tail:

	bad |= s_set(restart, "max_restarts", json_integer(s->restart.max_restarts));
	bad |= s_set(doc, "restart", restart);

	bad |= s_set(doc, "priority", json_integer(s->priority));

	if (s->resume_from.job)
		bad |= s_set(doc, "resume_from",
			     json_pack("{s:s, s:I}", "job", s->resume_from.job, "step",
				       (json_int_t)s->resume_from.step));

	if (s->init.safetensors)
		bad |= s_set(doc, "init", json_pack("{s:s}", "safetensors", s->init.safetensors));

	if (s->profile.start_step > 0)
		bad |= s_set(doc, "profile",
			     json_pack("{s:I, s:I}", "start_step", (json_int_t)s->profile.start_step,
				       "end_step", (json_int_t)s->profile.end_step));

	bad |= jobspec_ext_render(s, doc); /* env, tensorboard */

	if (bad) {
		json_decref(doc);
		return NULL;
	}
	return doc;
}

json_t *jobspec_model_json(const jobspec_t *spec)
{
	json_t *model = json_object();
	if (model && jobspec_model_to_json(spec, model) != 0) {
		json_decref(model);
		return NULL;
	}
	return model;
}

int jobspec_check_paths(const jobspec_t *spec, jobspec_error_t *err)
{
	const struct {
		const char *field, *pointer, *path;
	} p[] = {
		{"data.train", "/data/train", spec->data.train},
		{"data.val", "/data/val", spec->data.val},
		{"program.cwd", "/program/cwd", spec->program.cwd},
		{"init.safetensors", "/init/safetensors", spec->init.safetensors},
	};
	for (size_t i = 0; i < N_ELEMS(p); i++) {
		if (!p[i].path || fs_path_beneath(p[i].path))
			continue;
		char shown[96];
		s_excerpt(p[i].path, strlen(p[i].path), shown, sizeof shown, 80);
		return s_fail(err, p[i].pointer,
			      "%s must be a path relative to the agent's --data-root, without '..'"
			      " components (got '%s')",
			      p[i].field, shown);
	}
	return 0;
}

void jobspec_free(jobspec_t *spec)
{
	if (!spec)
		return;
	free(spec->name);
	free(spec->data.train);
	free(spec->data.val);
	free(spec->resume_from.job);
	free(spec->init.safetensors);
	for (int i = 0; spec->program.argv && i < spec->program.argc; i++)
		free(spec->program.argv[i]);
	for (int i = 0; spec->program.env_names && i < spec->program.n_env; i++) {
		free(spec->program.env_names[i]);
		free(spec->program.env_values[i]);
	}
	free(spec->program.argv);
	free(spec->program.env_names);
	free(spec->program.env_values);
	free(spec->program.cwd);
	memset(&spec->program, 0, sizeof spec->program);
	jobspec_ext_free(spec); /* env, tensorboard */
	spec->name = NULL;
	spec->data.train = NULL;
	spec->data.val = NULL;
	spec->resume_from.job = NULL;
	spec->init.safetensors = NULL;
}

/* Out-of-range values give "invalid" rather than NULL so that callers can
 * print the result unconditionally. */
#define NAME_OF(table, v) \
	((unsigned)(v) < N_ELEMS(table) ? (table)[(unsigned)(v)] : "invalid")

const char *jobspec_format_name(jobspec_format_t f) { return NAME_OF(s_format_names, f); }
const char *jobspec_schedule_name(jobspec_schedule_t s) { return NAME_OF(s_schedule_names, s); }
const char *jobspec_precision_name(jobspec_precision_t p) { return NAME_OF(s_precision_names, p); }
const char *jobspec_device_name(jobspec_device_t d) { return NAME_OF(s_device_names, d); }
const char *jobspec_sharding_name(jobspec_sharding_t s) { return NAME_OF(s_sharding_names, s); }
