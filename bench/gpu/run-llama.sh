#!/usr/bin/env bash
# The Llama GPU benchmark: builds bench_gpu_llama_step and runs it for
# Llama 3.2 1B's shape (16 layers, dim 2048, 32 heads, 8 KV heads, FFN
# 8192, vocabulary 128256, tied) at T 2048 with the largest batch that fits
# (or BATCH), then PyTorch eager on the same model, batch and T in the same
# run (bench/gpu/torch_llama_step.py: bf16 autocast,
# F.scaled_dot_product_attention's flash kernel with the KV heads
# repeated, fused AdamW; at 7/8 of the batch again after running out of
# memory, up to 4 times). Prints a markdown block for bench/RESULTS.md with
# tokens/s, MFU counted two ways (torchtitan's 6N + 12 L C T with N less
# the untied embedding, and this project's GPT-2 formula 6N + 6 L C T over
# every parameter), the time per phase and GPU memory; raw JSON in
# $BENCH_OUT.
#
#   bench/gpu/run-llama.sh [BUILD_DIR]      (default: build-gpu)
#
# Knobs: STEPS (20), WARMUP (3), BATCH (empty: the largest that fits),
#        SEQ (2048), PEAK_TFLOPS (989: H100 SXM dense bf16; H200 is the
#        same), PEER (1: run PyTorch; 0: not), TORCH_PYTHON (python3).
# scripts/gpu-check llama-bench runs it on a lent GPU in one call.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-gpu}
steps=${STEPS:-20}
warmup=${WARMUP:-3}
seq=${SEQ:-2048}
peak=${PEAK_TFLOPS:-989}
torch_python=${TORCH_PYTHON:-python3}
py=$(command -v /usr/bin/python3 || command -v python3)
export PATH=/usr/local/cuda/bin:$PATH
[ -d "$build/meson-private" ] || meson setup "$build" >/dev/null
ninja -C "$build" bench/gpu/bench_gpu_llama_step >/dev/null
exe=$build/bench/gpu/bench_gpu_llama_step
out=${BENCH_OUT:-$(mktemp -d /var/tmp/gpu-llama-bench.XXXXXX)}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2>/dev/null ||
  echo "unknown (nvidia-smi failed)" > "$out/gpu.txt"
args=(--seq "$seq" --steps "$steps" --warmup "$warmup" --peak-tflops "$peak")
[ -n "${BATCH:-}" ] && args+=(--batch "$BATCH")
echo "bench_gpu_llama_step ${args[*]}..." >&2
"$exe" "${args[@]}" > "$out/run.json" 2> "$out/run.log"
if [ "${PEER:-1}" = 1 ]; then
  b=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["batch"])' "$out/run.json")
  for try in 1 2 3 4 5; do
    echo "torch_llama_step --batch $b..." >&2
    if "$torch_python" bench/gpu/torch_llama_step.py --seq "$seq" --batch "$b" --steps "$steps" \
         --warmup "$warmup" > "$out/peer.json" 2> "$out/peer.log"; then
      break
    fi
    rm -f "$out/peer.json"
    if [ "$try" -lt 5 ] && grep -q OutOfMemoryError "$out/peer.log"; then
      b=$((b * 7 / 8)); [ "$b" -ge 1 ] || break; continue
    fi
    echo "run-llama.sh: PyTorch failed: $(tail -1 "$out/peer.log")" >&2
    break
  done
fi
"$py" - "$out" "$build" "$peak" <<'PY'
import json, os, sys
out, build, peak = sys.argv[1], sys.argv[2], float(sys.argv[3])
gpu = open(os.path.join(out, "gpu.txt")).read().strip()
r = json.load(open(os.path.join(out, "run.json")))
print("### GPU engine: Llama 3.2 1B-shape training step (bench/gpu/run-llama.sh)")
print()
print(f"GPU: {gpu}. Peak for MFU: {peak:g} TFLOP/s (dense bf16). MFU (torchtitan) uses "
      f"6N + 12*L*C*T with N less an untied token embedding ({r['flops_per_token']:.4g} FLOPs/token); "
      f"MFU (6N) uses 6N + 6*L*C*T over every parameter ({r['flops_per_token_6n']:.4g}). "
      f"{r['steps']} timed steps after {r['warmup']} warmup; median step.")
print()
print("| run | params | batch x T | step ms | tokens/s | MFU (torchtitan) | MFU (6N) | fwd / bwd / opt ms | GPU memory |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
print(f"| ringmaster llama_cuda | {r['params']/1e6:.0f}M | {r['batch']} x {r['seq']} | {r['median_step_ms']:.1f} "
      f"| {r['tokens_per_s']:,.0f} | {100*r['mfu']:.1f}% | {100*r['mfu_6n']:.1f}% "
      f"| {r['forward_ms']:.0f} / {r['backward_ms']:.0f} / {r['optimizer_ms']:.0f} "
      f"| {r['gpu_used_gib']:.1f} / {r['gpu_total_gib']:.1f} GiB |")
f = os.path.join(out, "peer.json")
if os.path.exists(f):
    q = json.load(open(f))
    m1 = q["tokens_per_s"] * r["flops_per_token"] / (peak * 1e12)
    m2 = q["tokens_per_s"] * r["flops_per_token_6n"] / (peak * 1e12)
    print(f"| PyTorch {q['torch']} eager, SDPA, fused AdamW | {q['params']/1e6:.0f}M | {q['batch']} x {q['seq']} "
          f"| {q['median_ms']:.1f} | {q['tokens_per_s']:,.0f} | {100*m1:.1f}% | {100*m2:.1f}% | - "
          f"| {q['peak_gpu_gib']:.1f} GiB |")
    print()
    print(f"ringmaster over PyTorch: {r['tokens_per_s'] / q['tokens_per_s']:.2f}x tokens/s (goal: 1.3x, and 40% MFU).")
print()
print(f"Command: `bench/gpu/run-llama.sh {build}` (raw JSON in {out}).")
PY
echo "raw output: $out" >&2
