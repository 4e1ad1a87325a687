#!/usr/bin/env bash
# GPU engine benchmark: builds bench_gpu_step (with /usr/local/cuda/bin on
# PATH) and runs it for GPT-2 124M at T 1024 with the largest batch that
# fits, twice: with the vocabulary as the CPU engine and the job spec take
# it (50257) and padded to a multiple of 128 (50304, as llm.c does; the
# padded rows are parameters too, so N and the FLOPs count them), each with
# attention from batched GEMMs (gemm) and fused on tensor cores (fused,
# cuda_flash.cu; its smaller activations may fit a larger batch). Prints a
# markdown block ready to paste into bench/RESULTS.md; raw JSON and logs
# stay in $BENCH_OUT (default: a temporary folder, printed at the end).
#
#   bench/gpu/run.sh [BUILD_DIR]        (default: build-gpu)
#
# The peer, measured in the same run on the same GPU: PyTorch
# (bench/torch_train_step.py --device cuda, bf16 autocast, fused AdamW) on
# the same model, vocabulary and batch, once per entry of PEERS
# (ATTENTION:VOCAB; sdpa is F.scaled_dot_product_attention's flash kernel,
# mask the materialised T x T softmax this engine runs, which at the
# largest batch this engine fits runs PyTorch out of memory).
#
# Knobs: STEPS (20), WARMUP (3), BATCH (empty: the largest that fits),
#        PEAK_TFLOPS (989: H100 SXM dense bf16; 756 for H100 PCIe),
#        VOCABS ("50257 50304"), ATTENTIONS ("gemm fused"; the peers take
#        the first one's batch, or PEER_BATCH; where PyTorch runs out of
#        memory there, it is tried again at 7/8 of the batch, up to 4
#        times), PEERS ("sdpa:50304 sdpa:50257"; empty: none),
#        TORCH_PYTHON (python3: the one that imports torch).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-gpu}
steps=${STEPS:-20}
warmup=${WARMUP:-3}
peak=${PEAK_TFLOPS:-989}
vocabs=${VOCABS:-"50257 50304"}
attentions=${ATTENTIONS:-"gemm fused"}
first_att=${attentions%% *}
peers=${PEERS-"sdpa:50304 sdpa:50257"}
torch_python=${TORCH_PYTHON:-python3}
py=$(command -v /usr/bin/python3 || command -v python3)
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
  for a in $attentions; do
    args=(--vocab "$v" --attention "$a" --steps "$steps" --warmup "$warmup" --peak-tflops "$peak")
    [ -n "${BATCH:-}" ] && args+=(--batch "$BATCH")
    echo "bench_gpu_step ${args[*]}..." >&2
    "$exe" "${args[@]}" > "$out/run-$a-$v.json" 2> "$out/run-$a-$v.log"
  done
done
for p in $peers; do
  att=${p%%:*}; v=${p#*:}
  [ -f "$out/run-$first_att-$v.json" ] || { echo "gpu/run.sh: peer $p: no run of this engine at vocab $v" >&2; continue; }
  b=${PEER_BATCH:-$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["batch"])' "$out/run-$first_att-$v.json")}
  for try in 1 2 3 4 5; do
    echo "torch_train_step --device cuda --attention $att --vocab $v --batch $b..." >&2
    if "$torch_python" bench/torch_train_step.py --device cuda --precision bf16 --attention "$att" \
         --seq 1024 --vocab "$v" --batch "$b" --steps "$steps" --warmup "$warmup" \
         > "$out/peer-$att-$v.json" 2> "$out/peer-$att-$v.log"; then
      break
    fi
    rm -f "$out/peer-$att-$v.json"
    if [ "$try" -lt 5 ] && grep -q OutOfMemoryError "$out/peer-$att-$v.log"; then
      echo "gpu/run.sh: peer $p: out of GPU memory at batch $b; trying $((b * 7 / 8))" >&2
      b=$((b * 7 / 8))
      continue
    fi
    echo "gpu/run.sh: peer $p failed: $(tail -1 "$out/peer-$att-$v.log")" >&2
    break
  done
done
"$py" - "$out" "$build" "$steps" "$warmup" "$peak" "$peers" "$attentions" $vocabs <<'PY'
import json, os, sys
out, build, steps, warmup, peak, peers, attentions, *vocabs = sys.argv[1:]
gpu = open(os.path.join(out, "gpu.txt")).read().strip()
rows = [json.load(open(os.path.join(out, f"run-{a}-{v}.json"))) for v in vocabs for a in attentions.split()]
print("### GPU engine: GPT-2 124M training step (bench/gpu/run.sh)")
print()
print(f"GPU: {gpu}. Peak used for MFU: {float(peak):g} TFLOP/s (dense bf16). "
      f"FLOPs per token = 6N + 6*L*C*T. {steps} timed steps after {warmup} warmup; "
      "median step (host wall clock); phases are medians of CUDA-event times.")
print()
print("| vocab | attention | params | batch x T | step ms | tokens/s | MFU | forward ms | backward ms | optimizer ms | GPU memory |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    print(f"| {r['vocab']} | {r['attention']} | {r['params']/1e6:.1f}M | {r['batch']} x {r['seq']} | {r['median_step_ms']:.1f} "
          f"| {r['tokens_per_s']:,.0f} | {100*r['mfu']:.1f}% | {r['forward_ms']:.1f} | {r['backward_ms']:.1f} "
          f"| {r['optimizer_ms']:.1f} | {r['gpu_used_gib']:.1f} / {r['gpu_total_gib']:.1f} GiB |")
print()
atts = attentions.split()
ours = {(r["vocab"], a): r for r, a in zip(rows, [a for v in vocabs for a in atts])}
peer_rows = []
for p in peers.split():
    att, v = p.split(":")
    f = os.path.join(out, f"peer-{att}-{v}.json")
    if os.path.exists(f):
        peer_rows.append(json.load(open(f)))
if peer_rows:
    print("PyTorch on the same GPU in the same run (bench/torch_train_step.py --device cuda "
          f"--precision bf16: eager, bf16 autocast, fused AdamW), same model and vocab, at the "
          f"batch of this engine's {atts[0]} run or the largest below it that PyTorch fits "
          f"(trying 7/8 of the batch after running out of memory):")
    print()
    over = " | ".join(f"this engine ({a}) over it" for a in atts)
    print(f"| peer | vocab | batch x T | step ms | tokens/s | MFU | GPU memory | {over} |")
    print("| --- | --- | --- | --- | --- | --- | --- |" + " --- |" * len(atts))
    for q in peer_rows:
        mfu = q["tokens_per_s"] * q["flops_per_token"] / (float(peak) * 1e12)
        ratios = " | ".join(f"{ours[(q['vocab'], a)]['tokens_per_s'] / q['tokens_per_s']:.2f}x"
                            if (q["vocab"], a) in ours else "-" for a in atts)
        print(f"| PyTorch {q['torch']}, attention {q['attention']} | {q['vocab']} | {q['batch']} x {q['seq']} "
              f"| {q['median_ms']:.1f} | {q['tokens_per_s']:,.0f} | {100*mfu:.1f}% | {q['peak_gpu_gib']:.1f} GiB "
              f"| {ratios} |")
    print()
print(f"Command: `bench/gpu/run.sh {build}` (raw JSON in {out}). Anchor: llm.c reaches 50-60% MFU "
      "on this model; this engine's target is >= 40%.")
PY
echo "raw output: $out" >&2
