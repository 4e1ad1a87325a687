/*
 * ringworker: the worker binary. Commands:
 *   train   run a job spec's training loop in this process (worker/train.c);
 *           without --spec, the embedded default job (jobs/default.json)
 *   agent   the node agent (worker/agent.c): registers with the coordinator,
 *           spawns and reaps rank processes
 *   rank    one rank of a job attempt (worker/rank.c), spawned by an agent
 * main() only parses options; the work lives in those modules.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <limits.h>
#include <unistd.h>

#include "agent.h"
#include "fsutil.h"
#include "gpus.h"
#include "join.h"
#include "jobspec.h"
#include "program.h"
#include "rank.h"
#include "train.h"

extern const char train_default_spec[]; /* generated from jobs/default.json */

static void s_usage(FILE *f)
{
	fputs("usage: ringworker train [--spec FILE] [--steps N] [--json] [--data-root DIR]\n"
	      "                        [--checkpoint-dir DIR [--resume]]\n"
	      "       ringworker agent --coordinator tcp://HOST:PORT [--devices cpu:N|auto] [--gpus auto|none|N]\n"
	      "                        [--node NAME] [--join-token TOKEN] [--state-dir DIR]\n"
	      "                        [--data-root DIR] [--checkpoint-root DIR] [--advertise ADDR]\n"
	      "                        [--kill-grace-ms MS] [--comm-timeout-ms MS] [--step-timeout-ms MS]\n"
	      "                        [--allow-program PATH]... [--program-ports LO-HI]\n"
	      "                        [--env NAME=VALUE]... [--env-file PATH] [--tensorboard-root DIR]\n"
	      "       ringworker --help | --version\n"
	      "\n"
	      "train          train a GPT-2 model as the job spec says, in this process\n"
	      "  --spec FILE      job spec (JSON); without it, the embedded default job\n"
	      "                   (byte-level GPT-2 on data/fortunes, made by\n"
	      "                   scripts/prepare-default-data)\n"
	      "  --steps N        run N steps instead of train.steps (the lr schedule stays the spec's)\n"
	      "  --json           one JSON object per step on stdout\n"
	      "  --data-root DIR  resolve relative data paths against DIR (default: the current directory)\n"
	      "  --checkpoint-dir DIR  write a snapshot every checkpoint.every_steps steps and after\n"
	      "                   the last into DIR/step-<N>/ (retention: checkpoint.keep_last/keep_every)\n"
	      "  --resume         start from the newest good snapshot in --checkpoint-dir, if any\n"
	      "\n"
	      "Threads: OMP_NUM_THREADS, default all cores.\n"
	      "Exit status: 0 done, 1 usage, 2 bad spec, 3 data error, 4 out of memory, 5 diverged.\n"
	      "\n"
	      "agent          the node agent: registers this node's devices with the coordinator and\n"
	      "               runs the ranks it places here (one per device slot) until SIGTERM/SIGINT\n"
	      "  --coordinator tcp://HOST:PORT  ringmasterd's broker endpoint (required)\n"
	      "  --devices cpu:N|auto  device slots; auto: one per online core\n"
	      "  --gpus auto|none|N  NVIDIA GPUs to offer as cuda devices (found through NVML):\n"
	      "                   auto (default) every one found (within CUDA_VISIBLE_DEVICES if\n"
	      "                   set), none, or the first N (refuses to start with fewer)\n"
	      "  --node NAME      node name (default: the host name); identity agent/NAME\n"
	      "  --join-token TOKEN  enroll this agent's key with the coordinator on first contact\n"
	      "                   (a one-time rmj_... token from `ringctl worker enroll`)\n"
	      "  --state-dir DIR  the agent's keys (default $STATE_DIRECTORY, else\n"
	      "                   ~/.local/state/ringworker, else ./ringworker-state)\n"
	      "  --data-root DIR  ranks open data files only beneath DIR (relative paths, no '..',\n"
	      "                   no symbolic link out of it; default: the current directory)\n"
	      "  --memory-bytes N host memory offered to ranks, for the coordinator's memory fit\n"
	      "                   (default: MemAvailable when the agent starts)\n"
	      "  --checkpoint-root DIR  ranks write snapshots to DIR/<job>/step-<N>/ and resume from\n"
	      "                   the newest good one there (default: no snapshots)\n"
	      "  --advertise ADDR address ranks listen on for their peers (default: this host's\n"
	      "                   address on the route to the coordinator)\n"
	      "  --kill-grace-ms MS  SIGTERM to SIGKILL when stopping a rank (default 5000)\n"
	      "  --allow-program PATH  run user programs (job spec \"program\") whose argv[0] is the file\n"
	      "                   PATH or lies beneath the folder PATH (repeatable; none by default)\n"
	      "  --program-ports LO-HI  ports the coordinator may give programs' MASTER_PORT (default 29500-29999)\n",
	      f);
	/* two strings: ISO C's limit on one literal is 4095 bytes */
	fputs("  --env NAME=VALUE every rank's environment gets NAME (repeatable; a job's own env\n"
	      "                   wins; names the agent sets itself are refused): an NCCL network\n"
	      "                   plugin's LD_LIBRARY_PATH and NCCL_* for every job (docs/workers.md)\n"
	      "  --env-file PATH  the same from a file of NAME=VALUE lines ('#' comments)\n"
	      "  --tensorboard-root DIR  rank 0 of every job writes TensorBoard event files to\n"
	      "                   DIR/<job>/, or DIR/<tensorboard.dir>/<job>/ (default: only jobs\n"
	      "                   with a tensorboard section, beneath --checkpoint-root)\n"
	      "  --peak-tflops X  one device's peak TFLOP/s: the TensorBoard files get MFU\n"
	      "  --comm-timeout-ms MS  how long a rank's collective waits for a hung peer before\n"
	      "                   the rank fails and the job recovers (default 60000)\n"
	      "  --step-timeout-ms MS  the ranks' watchdog: a step unfinished this long after the\n"
	      "                   previous one fails the rank and the job recovers (default: the\n"
	      "                   larger of twice the comm timeout and 10x the longest step so far)\n"
	      "\n"
	      "rank           one rank of a job; started by the agent (see docs/workers.md)\n",
	      f);
}

static int s_cmd_train(int argc, char **argv)
{
	static const struct option opts[] = {
		{"spec", required_argument, NULL, 's'},
		{"steps", required_argument, NULL, 'n'},
		{"json", no_argument, NULL, 'j'},
		{"data-root", required_argument, NULL, 'd'},
		{"checkpoint-dir", required_argument, NULL, 'c'},
		{"resume", no_argument, NULL, 'r'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *spec_path = NULL;
	train_options_t opt = {.out = stdout, .log = stderr, .resume_upto = -1};
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 's': spec_path = optarg; break;
		case 'j': opt.json = true; break;
		case 'd': opt.data_root = optarg; break;
		case 'c': opt.checkpoint_dir = optarg; break;
		case 'r': opt.resume = true; break;
		case 'n': {
			char *end;
			errno = 0;
			long long n = strtoll(optarg, &end, 10);
			if (errno || end == optarg || *end || n < 1) {
				fprintf(stderr, "ringworker: error: --steps wants a positive integer, got '%s'\n",
					optarg);
				return RM_EXIT_USAGE;
			}
			opt.steps = n;
			break;
		}
		case 'h': s_usage(stdout); return RM_EXIT_OK;
		default: s_usage(stderr); return RM_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ringworker: error: unexpected argument '%s'\n", argv[optind]);
		return RM_EXIT_USAGE;
	}
	if (opt.resume && !opt.checkpoint_dir) {
		fprintf(stderr, "ringworker: error: --resume needs --checkpoint-dir DIR (where the snapshots are)\n");
		return RM_EXIT_USAGE;
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
		return rc == -ENOMEM ? RM_EXIT_NOMEM : RM_EXIT_SPEC;
	}
	if (jobspec_is_program(&spec)) { /* issue 26: the agent runs programs, not `train` */
		fprintf(stderr, "ringworker: error: %s: a program job (the spec's \"program\") runs on an agent "
			"(ringworker agent --allow-program), not under ringworker train\n", opt.spec_name);
		jobspec_free(&spec);
		return RM_EXIT_SPEC;
	}
		/* With --data-root the data is confined as an agent's is (a relative path,
	 * resolved beneath it); without, the user's own paths are taken as given. */
	if (opt.data_root && jobspec_check_paths(&spec, &err) < 0) {
		fprintf(stderr, "ringworker: error: %s: %s\n", opt.spec_name, err.message);
		jobspec_free(&spec);
		return RM_EXIT_DATA;
	}
	rc = train_run(&spec, &opt);
	jobspec_free(&spec);
	return rc;
}

/* A non-negative int option, or -1 with a message. */
static int s_int_arg(const char *cmd, const char *name, const char *arg, int min)
{
	char *end;
	errno = 0;
	long v = strtol(arg, &end, 10);
	if (errno || end == arg || *end || v < min || v > 1000000000) {
		fprintf(stderr, "ringworker %s: error: --%s wants an integer >= %d, got '%s'\n", cmd, name,
			min, arg);
		return -1;
	}
	return (int)v;
}

/* --peak-tflops: a positive number of TFLOP/s, or -1 (said on stderr). */
static double s_peak_arg(const char *arg)
{
	char *end;
	errno = 0;
	double v = strtod(arg, &end);
	if (errno || end == arg || *end || !(v > 0) || v > 1e6) {
		fprintf(stderr, "ringworker: error: --peak-tflops wants one device's peak TFLOP/s (a number"
			" above 0, e.g. 989 for an H100 SXM in bf16), got '%s'\n", arg);
		return -1;
	}
	return v;
}

static int s_cmd_agent(int argc, char **argv)
{
	static const struct option opts[] = {
		{"coordinator", required_argument, NULL, 'c'},
		{"devices", required_argument, NULL, 'D'},
		{"gpus", required_argument, NULL, 'G'},
		{"node", required_argument, NULL, 'N'},
		{"data-root", required_argument, NULL, 'd'},
		{"checkpoint-root", required_argument, NULL, 'k'},
		{"advertise", required_argument, NULL, 'a'},
		{"kill-grace-ms", required_argument, NULL, 'g'},
		{"comm-timeout-ms", required_argument, NULL, 't'},
		{"step-timeout-ms", required_argument, NULL, 'W'},
		{"memory-bytes", required_argument, NULL, 'M'},
		{"join-token", required_argument, NULL, 'J'},
		{"state-dir", required_argument, NULL, 'S'},
		{"allow-program", required_argument, NULL, 'P'},
		{"program-ports", required_argument, NULL, 'R'},
		{"env", required_argument, NULL, 'e'},
		{"env-file", required_argument, NULL, 'E'},
		{"tensorboard-root", required_argument, NULL, 'T'},
		{"peak-tflops", required_argument, NULL, 'F'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	agent_options_t opt = {.log = stderr};
	static rankenv_defaults_t env_defaults; /* lives as long as the agent */
	char env_err[512];
	const char *allow[PROGRAM_ALLOW_MAX];
	const char *join_token = NULL, *state_dir = NULL;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'c': opt.coordinator = optarg; break;
		case 'J': join_token = optarg; break;
		case 'S': state_dir = optarg; break;
		case 'N': opt.node = optarg; break;
		case 'd': opt.data_root = optarg; break;
		case 'k': opt.checkpoint_root = optarg; break;
		case 'a': opt.advertise = optarg; break;
		case 'D':
			if (strcmp(optarg, "auto") == 0) {
				opt.n_devices = 0;
			} else if (strncmp(optarg, "cpu:", 4) == 0) {
				opt.n_devices = s_int_arg("agent", "devices", optarg + 4, 1);
				if (opt.n_devices < 0)
					return RM_EXIT_USAGE;
			} else {
				fprintf(stderr, "ringworker agent: error: --devices wants cpu:N or auto, got '%s'\n",
					optarg);
				return RM_EXIT_USAGE;
			}
			break;
		case 'G':
			if (strcmp(optarg, "auto") == 0) {
				opt.gpus = AGENT_GPUS_AUTO;
			} else if (strcmp(optarg, "none") == 0) {
				opt.gpus = AGENT_GPUS_NONE;
			} else {
				char *end;
				errno = 0;
				long n = strtol(optarg, &end, 10);
				if (errno || end == optarg || *end || n < 1 || n > GPUS_MAX) {
					fprintf(stderr, "ringworker agent: error: --gpus wants auto, none or a count from 1 to %d, got '%s'\n",
						GPUS_MAX, optarg);
					return RM_EXIT_USAGE;
				}
				opt.gpus = (int)n;
			}
			break;
		case 'g':
			opt.kill_grace_ms = s_int_arg("agent", "kill-grace-ms", optarg, 1);
			if (opt.kill_grace_ms < 0)
				return RM_EXIT_USAGE;
			break;
		case 't':
			opt.comm_timeout_ms = s_int_arg("agent", "comm-timeout-ms", optarg, 1);
			if (opt.comm_timeout_ms < 0)
				return RM_EXIT_USAGE;
			break;
		case 'W':
			opt.step_timeout_ms = s_int_arg("agent", "step-timeout-ms", optarg, 1);
			if (opt.step_timeout_ms < 0)
				return RM_EXIT_USAGE;
			break;
		case 'M': { /* issue 22 (D): the memory offered to ranks */
			char *end;
			errno = 0;
			long long v = strtoll(optarg, &end, 10);
			if (errno || end == optarg || *end || v < 1) {
				fprintf(stderr, "ringworker agent: error: --memory-bytes wants a byte count >= 1, got '%s'\n",
					optarg);
				return RM_EXIT_USAGE;
			}
			opt.memory_bytes = v;
			break;
		}
		case 'P': /* issue 26: a program (or a folder of them) this agent may run */
			if (optarg[0] != '/' || opt.n_allow_program >= PROGRAM_ALLOW_MAX) {
				fprintf(stderr, "ringworker agent: error: --allow-program wants an absolute path (at most %d of them), got '%s'\n",
					PROGRAM_ALLOW_MAX, optarg);
				return RM_EXIT_USAGE;
			}
			if (access(optarg, F_OK) != 0)
				fprintf(stderr, "ringworker agent: warning: --allow-program %s: %s (it allows nothing until it exists)\n",
					optarg, strerror(errno));
			allow[opt.n_allow_program++] = optarg;
			opt.allow_program = allow;
			break;
		case 'R': {
			int lo, hi, end = 0;
			if (sscanf(optarg, "%d-%d%n", &lo, &hi, &end) != 2 || optarg[end] || lo < 1 || hi > 65535 ||
			    lo > hi) {
				fprintf(stderr, "ringworker agent: error: --program-ports wants LO-HI within 1-65535, got '%s'\n",
					optarg);
				return RM_EXIT_USAGE;
			}
			opt.program_port_lo = lo;
			opt.program_port_hi = hi;
			break;
		}
		case 'e': /* issue 25: every rank's environment, under the job's env */
		case 'E':
			if ((c == 'e' ? rankenv_add(&env_defaults, optarg, "--env", env_err, sizeof env_err)
			              : rankenv_load_file(&env_defaults, optarg, env_err, sizeof env_err)) < 0) {
				fprintf(stderr, "ringworker agent: error: %s\n", env_err);
				return RM_EXIT_USAGE;
			}
			opt.env_defaults = &env_defaults;
			break;
		case 'T':
			if (optarg[0] != '/') {
				fprintf(stderr, "ringworker agent: error: --tensorboard-root wants an absolute path, got '%s'\n",
					optarg);
				return RM_EXIT_USAGE;
			}
			opt.tensorboard_root = optarg;
			break;
		case 'F':
			if (s_peak_arg(optarg) < 0)
				return RM_EXIT_USAGE;
			opt.peak_tflops = optarg;
			break;
		case 'h': s_usage(stdout); return RM_EXIT_OK;
		default: s_usage(stderr); return RM_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ringworker agent: error: unexpected argument '%s'\n", argv[optind]);
		return RM_EXIT_USAGE;
	}
	if (!opt.coordinator) {
		fprintf(stderr, "ringworker agent: error: --coordinator tcp://HOST:PORT is required\n");
		return RM_EXIT_USAGE;
	}
	char host[256] = "localhost";
	if (!opt.node && gethostname(host, sizeof host - 1) != 0)
		snprintf(host, sizeof host, "localhost");
	int rc = join_prepare(opt.coordinator, opt.node ? opt.node : host, state_dir, join_token, stderr);
	if (rc != 0)
		return rc;
	/* the snapshots' folder as the coordinator derives it (REGISTER's
	 * checkpoint_root): absolute, without symlinks */
	char ckpt[PATH_MAX];
	if (opt.checkpoint_root) {
		fs_mkdir_p(opt.checkpoint_root, 0700);
		if (realpath(opt.checkpoint_root, ckpt))
			opt.checkpoint_root = ckpt;
	}
	return agent_run(&opt);
}

static int s_cmd_rank(int argc, char **argv)
{
	static const struct option opts[] = {
		{"coordinator", required_argument, NULL, 'c'},
		{"job", required_argument, NULL, 'j'},
		{"attempt", required_argument, NULL, 'a'},
		{"rank", required_argument, NULL, 'r'},
		{"world-size", required_argument, NULL, 'w'},
		{"data-root", required_argument, NULL, 'd'},
		{"host", required_argument, NULL, 'H'},
		{"comm-timeout-ms", required_argument, NULL, 't'},
		{"step-timeout-ms", required_argument, NULL, 'W'},
		{"checkpoint-root", required_argument, NULL, 'k'},
		{"tensorboard-root", required_argument, NULL, 'T'},
		{"peak-tflops", required_argument, NULL, 'F'},
		{NULL, 0, NULL, 0},
	};
	rank_options_t opt = {.attempt = -1, .rank = -1, .world_size = -1};
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'c': opt.coordinator = optarg; break;
		case 'j': opt.job = optarg; break;
		case 'd': opt.data_root = optarg; break;
		case 'H': opt.host = optarg; break;
		case 'k': opt.checkpoint_root = optarg; break;
		case 'T': opt.tensorboard_root = optarg; break;
		case 'F':
			if ((opt.peak_tflops = s_peak_arg(optarg)) < 0)
				return RM_EXIT_USAGE;
			break;
		case 'a':
			if ((opt.attempt = s_int_arg("rank", "attempt", optarg, 0)) < 0)
				return RM_EXIT_USAGE;
			break;
		case 'r':
			if ((opt.rank = s_int_arg("rank", "rank", optarg, 0)) < 0)
				return RM_EXIT_USAGE;
			break;
		case 'w':
			if ((opt.world_size = s_int_arg("rank", "world-size", optarg, 1)) < 0)
				return RM_EXIT_USAGE;
			break;
		case 't':
			if ((opt.comm_timeout_ms = s_int_arg("rank", "comm-timeout-ms", optarg, 1)) < 0)
				return RM_EXIT_USAGE;
			break;
		case 'W':
			if ((opt.step_timeout_ms = s_int_arg("rank", "step-timeout-ms", optarg, 1)) < 0)
				return RM_EXIT_USAGE;
			break;
		default:
			fputs("usage: ringworker rank --coordinator EP --job J --attempt A --rank R --world-size W\n"
			      "                       [--data-root DIR] [--host ADDR] [--comm-timeout-ms MS]\n"
			      "                       [--step-timeout-ms MS] [--checkpoint-root DIR]\n"
			      "                       [--tensorboard-root DIR] [--peak-tflops X]\n",
			      stderr);
			return RM_EXIT_USAGE;
		}
	}
	if (optind < argc || !opt.coordinator || !opt.job || opt.attempt < 0 || opt.rank < 0 ||
	    opt.world_size < 1 || opt.rank >= opt.world_size) {
		fprintf(stderr, "ringworker rank: error: needs --coordinator, --job, --attempt, --rank and "
				"--world-size, with rank < world size (it is started by `ringworker agent`)\n");
		return RM_EXIT_USAGE;
	}
	int rc = join_rank_keys();
	if (rc != 0)
		return rc;
	return rank_run(&opt);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		s_usage(stderr);
		return RM_EXIT_USAGE;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
		s_usage(stdout);
		return RM_EXIT_OK;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("ringworker %s\n", RINGMASTER_VERSION);
		return RM_EXIT_OK;
	}
	if (strcmp(argv[1], "train") == 0)
		return s_cmd_train(argc - 1, argv + 1);
	if (strcmp(argv[1], "agent") == 0)
		return s_cmd_agent(argc - 1, argv + 1);
	if (strcmp(argv[1], "rank") == 0)
		return s_cmd_rank(argc - 1, argv + 1);
	fprintf(stderr, "ringworker: error: unknown command '%s' (try ringworker --help)\n", argv[1]);
	return RM_EXIT_USAGE;
}
