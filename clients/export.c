/*
 * export: see export.h. Resolves the argument to one snapshot folder, opens
 * and verifies it (every shard's size and XXH3), then exports. Resolution:
 * an existing folder holding manifest.json is a snapshot folder; any other
 * existing folder is a job folder; a bare name (no '/') that is not a folder
 * here is a job id. With --root or $RINGMASTER_CHECKPOINT_ROOT, the job's
 * folder is looked up under that root; otherwise the coordinator is asked
 * (GET /v1/jobs/{id}/checkpoints, newest first) and the snapshot is read at
 * the path it lists when this host can read it; when it cannot, the error
 * names that path. Only when the coordinator cannot be reached is
 * EXPORT_DEFAULT_ROOT tried. In a job folder, --step N picks `step-N`, else
 * the newest committed snapshot that verifies; from the coordinator's list,
 * --step N picks that step, else the newest listed.
 */
#include "export.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "commands_common.h"
#include "snapshot.h"

enum { OPT_STEP = 2000, OPT_ROOT, OPT_DTYPE };

static int export_usage(const char *fmt, const char *arg)
{
	const cmd_t *cmd = cmd_find("export");
	fputs("ringctl: ", stderr);
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nUsage: ringctl export %s\nTry 'ringctl export --help' for more.\n", cmd->usage);
	return CTL_EXIT_USAGE;
}

static bool is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool has_manifest(const char *dir)
{
	char path[PATH_MAX];
	struct stat st;
	return snprintf(path, sizeof path, "%s/%s", dir, SNAP_MANIFEST_NAME) < (int)sizeof path &&
	       stat(path, &st) == 0;
}

static void print_skip(int64_t step, const char *reason, void *userdata)
{
	fprintf(stderr, "ringctl: passing over step %lld: %s\n", (long long)step, reason);
}

/*
 * Finds the snapshot folder for a job folder: step-N for step >= 0, else the
 * newest that verifies. Returns 0 with the path in ret_dir, or prints why not
 * and returns CTL_EXIT_FAILED.
 */
static int pick_in_job(const char *job_dir, long long step, char *ret_dir, size_t ret_len)
{
	char err[1024];
	if (step >= 0) {
		char name[SNAP_DIRNAME_MAX];
		snap_step_dirname(step, name, sizeof name);
		if (snprintf(ret_dir, ret_len, "%s/%s", job_dir, name) >= (int)ret_len) {
			fprintf(stderr, "ringctl: path too long: %s/%s\n", job_dir, name);
			return CTL_EXIT_FAILED;
		}
		if (!is_dir(ret_dir)) {
			char tmp[PATH_MAX + 8];
			snprintf(tmp, sizeof tmp, "%s.tmp", ret_dir);
			fprintf(stderr, "ringctl: no committed snapshot %s in %s%s\n", name, job_dir,
			        is_dir(tmp) ? " (only an uncommitted .tmp folder: the snapshot never completed)"
			                    : "");
			return CTL_EXIT_FAILED;
		}
		return 0;
	}
	int64_t found;
	if (snap_find_latest(job_dir, &found, ret_dir, ret_len, print_skip, NULL, err, sizeof err) < 0) {
		fprintf(stderr, "ringctl: %s\n", err);
		return CTL_EXIT_FAILED;
	}
	return 0;
}

/*
 * Picks job's snapshot from the coordinator's list: step `step` (>= 0) or
 * the newest. Returns 0 with the folder in ret_dir when this host can read
 * it; otherwise prints why (naming the listed path) and returns a CTL_EXIT_*
 * status, CTL_EXIT_UNREACHABLE when the coordinator did not answer.
 */
static int pick_listed(cmd_ctx_t *ctx, const char *job, long long step, char *ret_dir, size_t ret_len)
{
	char *path = cmd_job_path(ctx, job, "/checkpoints");
	if (!path)
		return cmd_out_of_memory();
	rest_response_t response;
	json_t *doc;
	int status = cmd_request_json(ctx, "GET", path, NULL, 0, NULL, &response, &doc);
	free(path);
	if (status != CTL_EXIT_OK)
		return status;
	const json_t *list = json_object_get(doc, "checkpoints");
	const json_t *pick = NULL;
	size_t i;
	json_t *c;
	json_array_foreach(list, i, c) {
		if (step < 0 || json_integer_value(json_object_get(c, "step")) == step) {
			pick = c;
			break;
		}
	}
	const char *dir = json_string_value(json_object_get(pick, "path"));
	status = CTL_EXIT_FAILED;
	if (!pick && step >= 0) {
		fprintf(stderr, "ringctl: job %s has no committed checkpoint of step %lld (ringctl checkpoints %s"
		        " lists those it has)\n", job, step, job);
	} else if (!pick) {
		fprintf(stderr, "ringctl: job %s has no committed checkpoint yet (the coordinator lists none)\n", job);
	} else if (!dir || !dir[0]) {
		fprintf(stderr, "ringctl: the coordinator lists no path for job %s's checkpoint\n", job);
	} else if (!is_dir(dir) || !has_manifest(dir)) {
		int err = errno;
		fprintf(stderr,
		        "ringctl: job %s's snapshot of step %lld is at %s (as the coordinator lists it), which"
		        " this host cannot read (%s); run ringctl export on the node that has it, or give"
		        " --root DIR with the checkpoint root as mounted here\n",
		        job, (long long)json_integer_value(json_object_get(pick, "step")), dir,
		        is_dir(dir) ? "no " SNAP_MANIFEST_NAME " in it" : strerror(err));
	} else if (snprintf(ret_dir, ret_len, "%s", dir) >= (int)ret_len) {
		fprintf(stderr, "ringctl: path too long: %s\n", dir);
	} else {
		status = 0;
	}
	json_decref(doc);
	rest_response_clear(&response);
	return status;
}

/* Resolves a bare job id to its snapshot folder (see the top of the file). */
static int pick_job(cmd_ctx_t *ctx, const char *arg, const char *root, long long step, char *ret_dir,
                    size_t ret_len)
{
	const char *env = getenv("RINGMASTER_CHECKPOINT_ROOT");
	if (!root && env && env[0])
		root = env;
	if (!root) {
		int status = pick_listed(ctx, arg, step, ret_dir, ret_len);
		if (status != CTL_EXIT_UNREACHABLE)
			return status;
		root = EXPORT_DEFAULT_ROOT;
		fprintf(stderr, "ringctl: trying the default checkpoint root %s\n", root);
	}
	char job_dir[PATH_MAX];
	if (snprintf(job_dir, sizeof job_dir, "%s/%s", root, arg) >= (int)sizeof job_dir) {
		fprintf(stderr, "ringctl: path too long: %s/%s\n", root, arg);
		return CTL_EXIT_FAILED;
	}
	if (!is_dir(job_dir)) {
		fprintf(stderr,
		        "ringctl: no such job folder %s (no folder %s here either; set --root or "
		        "RINGMASTER_CHECKPOINT_ROOT to the checkpoint root)\n",
		        job_dir, arg);
		return CTL_EXIT_FAILED;
	}
	return pick_in_job(job_dir, step, ret_dir, ret_len);
}

int export_run(cmd_ctx_t *ctx, int argc, char **argv)
{
	static const struct option long_opts[] = {
		{"json", no_argument, NULL, OPT_JSON},   {"server", required_argument, NULL, OPT_SERVER},
		{"help", no_argument, NULL, OPT_HELP},   {"step", required_argument, NULL, OPT_STEP},
		{"root", required_argument, NULL, OPT_ROOT}, {"output", required_argument, NULL, 'o'},
		{"dtype", required_argument, NULL, OPT_DTYPE},
		{0, 0, 0, 0},
	};
	const cmd_t *cmd = cmd_find("export");
	const char *out = NULL, *root = NULL;
	long long step = -1;
	bool bf16 = false;
	char *end;

	optind = 0; /* GNU: restart scanning, argv[0] is the command's name */
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":ho:", long_opts, NULL)) != -1) {
		switch (c) {
		case OPT_JSON: ctx->json = true; break;
		case OPT_SERVER: ctx->server = optarg; break;
		case 'h':
		case OPT_HELP:
			printf("Usage: ringctl export %s\n%s\n", cmd->usage, cmd->summary);
			return CTL_EXIT_OK;
		case 'o': out = optarg; break;
		case OPT_ROOT: root = optarg; break;
		case OPT_DTYPE:
			if (strcmp(optarg, "bf16") != 0 && strcmp(optarg, "f32") != 0)
				return export_usage("--dtype is f32 (the default) or bf16 (got \"%s\")", optarg);
			bf16 = strcmp(optarg, "bf16") == 0;
			break;
		case OPT_STEP:
			errno = 0;
			step = strtoll(optarg, &end, 10);
			if (errno || end == optarg || *end || step < 0)
				return export_usage("--step needs an integer >= 0 (got \"%s\")", optarg);
			break;
		case ':': return export_usage("option %s needs a value", argv[optind - 1]);
		default: return export_usage("unknown option %s", argv[optind - 1]);
		}
	}
	if (argc - optind != 1)
		return export_usage("%s", argc - optind < 1 ? "missing SNAPSHOT_DIR or JOB" : "too many arguments");
	if (!out)
		return export_usage("%s", "missing -o PATH (where to write the safetensors file; for a Llama job"
		                    " the folder for model.safetensors and config.json)");
	const char *arg = argv[optind];

	char dir[PATH_MAX];
	int status;
	if (is_dir(arg) && has_manifest(arg)) {
		if (step >= 0)
			return export_usage("--step applies to a job, but %s is one snapshot folder", arg);
		if (snprintf(dir, sizeof dir, "%s", arg) >= (int)sizeof dir) {
			fprintf(stderr, "ringctl: path too long: %s\n", arg);
			return CTL_EXIT_FAILED;
		}
	} else if (is_dir(arg)) {
		if ((status = pick_in_job(arg, step, dir, sizeof dir)) != 0)
			return status;
	} else if (!strchr(arg, '/') && strcmp(arg, "..") != 0 && strcmp(arg, ".") != 0) {
		if ((status = pick_job(ctx, arg, root, step, dir, sizeof dir)) != 0)
			return status;
	} else {
		fprintf(stderr, "ringctl: no such snapshot folder %s\n", arg);
		return CTL_EXIT_FAILED;
	}

	char err[1024];
	snap_t *s = NULL;
	snap_export_info_t info;
	/* a Llama snapshot exports as a Hugging Face folder: model.safetensors and config.json */
	bool folder = false;
	if (snap_open(dir, &s, err, sizeof err) < 0 || snap_verify(s, err, sizeof err) < 0 ||
	    ((folder = snap_model_is_llama(snap_manifest(s)->model))
	             ? snap_export_hf_dir(s, out, bf16, &info, err, sizeof err)
	             : snap_export_hf_dtype(s, out, bf16, &info, err, sizeof err)) < 0) {
		fprintf(stderr, "ringctl: %s\n", err);
		snap_close(s);
		return CTL_EXIT_FAILED;
	}
	long long snap_step = (long long)snap_manifest(s)->step;
	if (ctx->json) {
		json_t *o = json_pack("{s:s, s:I, s:s, s:i, s:I, s:I}", "snapshot", dir, "step",
		                      (json_int_t)snap_step, "output", out, "tensors", info.n_tensors,
		                      "params", (json_int_t)info.n_params, "bytes", (json_int_t)info.bytes);
		char *text = o ? json_dumps(o, JSON_PRESERVE_ORDER) : NULL;
		if (text)
			printf("%s\n", text);
		free(text);
		json_decref(o);
	} else {
		printf("exported step %lld from %s\nwrote %s%s: %d tensors, %lld parameters, %lld bytes\n",
		       snap_step, dir, out, folder ? "/model.safetensors and config.json" : "",
		       info.n_tensors, (long long)info.n_params, (long long)info.bytes);
	}
	snap_close(s);
	return CTL_EXIT_OK;
}
