#!/bin/sh
# bench/tp/engine.sh: the CPU engine's tensor parallelism at GPT-2 124M and
# the Llama 124M class (bench/tp/tp_engine_bench.c): per-rank memory at
# t = 1, 2, 4 from the models' byte counters (B 4, T 1024), then the TP
# collectives and step time of real forward+backward steps with t ranks
# forked over Gloo on 127.0.0.1 (B 2, T 128, STEPS steps after a warm-up;
# t = 1 with 2 OpenMP threads, t > 1 with 1 thread per rank).
#   bench/tp/engine.sh [BUILD_DIR]      (default build; STEPS=3)
# Prints one JSON line per measurement.
set -eu
cd "$(dirname "$0")/../.."
build=${1:-build}
bin=$build/bench/tp/tp_engine_bench
steps=${STEPS:-3}
[ -x "$bin" ] || { echo "build $bin first (meson compile -C $build)" >&2; exit 1; }
for shape in gpt2-124m llama-124m; do
	"$bin" memory "$shape" 4 1024
done
for shape in gpt2-124m llama-124m; do
	for t in 1 2 4; do
		threads=1
		[ "$t" = 1 ] && threads=2
		OMP_NUM_THREADS=$threads "$bin" step "$shape" 2 128 "$t" "$steps"
	done
done
