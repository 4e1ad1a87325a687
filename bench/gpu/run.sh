#!/usr/bin/env bash
# GPU engine benchmark: builds bench_gpu_step (with /usr/local/cuda/bin on
# PATH) and runs it for GPT-2 124M at T 1024 with the largest batch that
# fits, twice: with the vocabulary as the CPU engine and the job spec take
# it (50257) and padded to a multiple of 128 (50304, as llm.c does; the
# padded rows are parameters too, so N and the FLOPs count them). Prints a
# markdown block ready to paste into bench/RESULTS.md; raw JSON and logs
# stay in $BENCH_OUT (default: a temporary folder, printed at the end).
#
#   bench/gpu/run.sh [BUILD_DIR]        (default: build-gpu)
#
# Knobs: STEPS (20), WARMUP (3), BATCH (empty: the largest that fits),
#        PEAK_TFLOPS (989: H100 SXM dense bf16; 756 for H100 PCIe),
#        VOCABS ("50257 50304").
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-gpu}
steps=${STEPS:-20}
warmup=${WARMUP:-3}
peak=${PEAK_TFLOPS:-989}
vocabs=${VOCABS:-"50257 50304"}
export PATH=/usr/local/cuda/bin:$PATH
if [ ! -d "$build/meson-private" ]; then
  meson setup "$build" >/dev/null
fi
ninja -C "$build" bench/gpu/bench_gpu_step >/dev/null
exe=$build/bench/gpu/bench_gpu_step
[ -x "$exe" ] || { echo "gpu/run.sh: $exe was not built (is nvcc on PATH? cuda_enabled?)" >&2; exit 2; }
out=${BENCH_OUT:-$(mktemp -d /var/tmp/gpu-bench.XXXXXX)}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
  > "$out/gpu.txt" 2>/dev/null || echo "unknown (nvidia-smi failed)" > "$out/gpu.txt"
for v in $vocabs; do
  args=(--vocab "$v" --steps "$steps" --warmup "$warmup" --peak-tflops "$peak")
  [ -n "${BATCH:-}" ] && args+=(--batch "$BATCH")
  echo "bench_gpu_step ${args[*]}..." >&2
  "$exe" "${args[@]}" > "$out/vocab-$v.json" 2> "$out/vocab-$v.log"
done
/usr/bin/python3 - "$out" "$build" "$steps" "$warmup" "$peak" $vocabs <<'PY'
import json, os, sys
out, build, steps, warmup, peak, *vocabs = sys.argv[1:]
gpu = open(os.path.join(out, "gpu.txt")).read().strip()
rows = [json.load(open(os.path.join(out, f"vocab-{v}.json"))) for v in vocabs]
print("### GPU engine: GPT-2 124M training step (bench/gpu/run.sh)")
print()
print(f"GPU: {gpu}. Peak used for MFU: {float(peak):g} TFLOP/s (dense bf16). "
      f"FLOPs per token = 6N + 6*L*C*T. {steps} timed steps after {warmup} warmup; "
      "median step (host wall clock); phases are medians of CUDA-event times.")
print()
print("| vocab | params | batch x T | step ms | tokens/s | MFU | forward ms | backward ms | optimizer ms | GPU memory |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    print(f"| {r['vocab']} | {r['params']/1e6:.1f}M | {r['batch']} x {r['seq']} | {r['median_step_ms']:.1f} "
          f"| {r['tokens_per_s']:,.0f} | {100*r['mfu']:.1f}% | {r['forward_ms']:.1f} | {r['backward_ms']:.1f} "
          f"| {r['optimizer_ms']:.1f} | {r['gpu_used_gib']:.1f} / {r['gpu_total_gib']:.1f} GiB |")
print()
print(f"Command: `bench/gpu/run.sh {build}` (raw JSON in {out}). Anchor: llm.c reaches 50-60% MFU "
      "on this model; this engine's target is >= 40%.")
PY
echo "raw output: $out" >&2
