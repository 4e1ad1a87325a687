/*
 * ringworker: the worker binary. Today it has one command, `train`, which
 * runs a job spec's training loop in this process (worker/train.c); the node
 * agent comes later. Without --spec it trains the embedded default job
 * (jobs/default.json, compiled in).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobspec.h"
#include "train.h"

extern const char train_default_spec[]; /* generated from jobs/default.json */

static void s_usage(FILE *f)
{
	fputs("usage: ringworker train [--spec FILE] [--steps N] [--json] [--data-root DIR]\n"
	      "       ringworker --help | --version\n"
	      "\n"
	      "train          train a GPT-2 model as the job spec says, in this process\n"
	      "  --spec FILE      job spec (JSON); without it, the embedded default job\n"
	      "                   (byte-level GPT-2 on data/fortunes, made by\n"
	      "                   scripts/prepare-default-data)\n"
	      "  --steps N        run N steps instead of train.steps (the lr schedule stays the spec's)\n"
	      "  --json           one JSON object per step on stdout\n"
	      "  --data-root DIR  resolve relative data paths against DIR (default: the current directory)\n"
	      "\n"
	      "Threads: OMP_NUM_THREADS, default all cores.\n"
	      "Exit status: 0 done, 1 usage, 2 bad spec, 3 data error, 4 out of memory, 5 diverged.\n",
	      f);
}

static int s_cmd_train(int argc, char **argv)
{
	static const struct option opts[] = {
		{"spec", required_argument, NULL, 's'},
		{"steps", required_argument, NULL, 'n'},
		{"json", no_argument, NULL, 'j'},
		{"data-root", required_argument, NULL, 'd'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *spec_path = NULL;
	train_options_t opt = {.out = stdout, .log = stderr};
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 's': spec_path = optarg; break;
		case 'j': opt.json = true; break;
		case 'd': opt.data_root = optarg; break;
		case 'n': {
			char *end;
			errno = 0;
			long long n = strtoll(optarg, &end, 10);
			if (errno || end == optarg || *end || n < 1) {
				fprintf(stderr, "ringworker: error: --steps wants a positive integer, got '%s'\n",
					optarg);
				return TRAIN_EXIT_USAGE;
			}
			opt.steps = n;
			break;
		}
		case 'h': s_usage(stdout); return TRAIN_EXIT_OK;
		default: s_usage(stderr); return TRAIN_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ringworker: error: unexpected argument '%s'\n", argv[optind]);
		return TRAIN_EXIT_USAGE;
	}

	jobspec_t spec = {0};
	jobspec_error_t err = {0};
	int rc;
	if (spec_path) {
		rc = jobspec_load_file(spec_path, &spec, &err);
		opt.spec_name = spec_path;
	} else {
		rc = jobspec_parse(train_default_spec, strlen(train_default_spec), &spec, &err);
		opt.spec_name = "embedded default";
		opt.missing_data_hint = " (the default job's data: run scripts/prepare-default-data"
					" in the repository, or pass --data-root)";
	}
	if (rc < 0) {
		/* Read errors already name the path; validation errors name the field. */
		if (rc == -EINVAL || rc == -ENOMEM)
			fprintf(stderr, "ringworker: error: %s: %s\n", opt.spec_name, err.message);
		else
			fprintf(stderr, "ringworker: error: %s\n", err.message);
		return rc == -ENOMEM ? TRAIN_EXIT_NOMEM : TRAIN_EXIT_SPEC;
	}
	rc = train_run(&spec, &opt);
	jobspec_free(&spec);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		s_usage(stderr);
		return TRAIN_EXIT_USAGE;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
		s_usage(stdout);
		return TRAIN_EXIT_OK;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("ringworker %s\n", RINGMASTER_VERSION);
		return TRAIN_EXIT_OK;
	}
	if (strcmp(argv[1], "train") == 0)
		return s_cmd_train(argc - 1, argv + 1);
	fprintf(stderr, "ringworker: error: unknown command '%s' (try ringworker --help)\n", argv[1]);
	return TRAIN_EXIT_USAGE;
}
