#!/usr/bin/env bash
# Llama on the CPU against PyTorch: the 124M-class Llama step (12 layers,
# dim 768, 12 heads, 4 KV heads, FFN 2048, vocabulary 32000, untied, B 4,
# T 256) of the CPU engine (bench_train_step --arch llama) beside a tuned
# plain-PyTorch Llama of the same shape (bench/torch_train_step.py --arch
# llama), fp32 and bf16, in one run, with the same environment as GPT-2's
# benchmark (bench/run-train-bench.sh, which this runs with
# SHAPES=llama-124m).
#
#   bench/llama/run.sh [BUILD_DIR]      (default: build)
#
# Prints run-train-bench.sh's table: median tokens/s, ms/step, peak RSS,
# the ratio to PyTorch at the same precision, and the share of oneDNN's
# matmul ceiling reached. Both programs count torchtitan's FLOPs per token,
# 6N + 12*L*C*T with N the parameters less the token embedding (untied),
# which is llama_flops_per_token (worker/engine/llama_layout.c) and the
# trainer's MFU. Knobs: STEPS_LLAMA / WARMUP_LLAMA (10 / 3), PRECISIONS
# ("fp32 bf16"; on a CPU without AVX512-BF16 PyTorch's bf16 is emulated and
# very slow: use "fp32" there or few steps), TORCH_PY.
set -euo pipefail
cd "$(dirname "$0")/../.."
SHAPES=llama-124m exec bench/run-train-bench.sh "$@"
