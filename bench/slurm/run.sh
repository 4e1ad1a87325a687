#!/bin/sh
# From sbatch to a ringmaster job's success, against the same job submitted
# directly to running agents (bench/slurm/bench_slurm.py says what each
# figure is). Needs root, slurm-wlm and munge (scripts/deps) and a build:
#   bench/slurm/run.sh [--runs 5] [--steps 20] [--build build] [--json out.json]
set -eu
cd "$(dirname "$0")/../.."
uptime
exec python3 bench/slurm/bench_slurm.py "$@"
