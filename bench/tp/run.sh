#!/bin/sh
# bench/tp/run.sh: issue 24's figures in one run: the engine's per-rank
# memory, TP collectives and step time at GPT-2 124M and the Llama 124M
# class (engine.sh), then the whole system's step time of t = 2 against
# dp = 2 on the same cores and the trainer's per-rank memory at t = 1, 2, 4
# (trainer_bench.py).
#   bench/tp/run.sh [BUILD_DIR]     (default build)
set -eu
cd "$(dirname "$0")/../.."
build=${1:-build}
sh bench/tp/engine.sh "$build"
python3 bench/tp/trainer_bench.py --build "$build"
