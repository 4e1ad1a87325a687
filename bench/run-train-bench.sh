#!/usr/bin/env bash
# Training benchmark: the CPU engine (bench_train_step) beside PyTorch
# (bench/torch_train_step.py), same model, same step, same threads, in one run.
#
#   bench/run-train-bench.sh [BUILD_DIR]     (default: build)
#
# First measures oneDNN's matmul ceiling (matmul_ceiling) in fp32 and bf16,
# then for GPT-2 124M (12L 12H 768C, V=50257, B=4, T=64) and a small model
# (6L 6H 384C, V=50257, B=8, T=64) runs: ours fp32, torch fp32, ours bf16,
# torch bf16 (autocast). Both programs get the same environment (below).
# Prints a markdown table: median tokens/s, ms/step, peak RSS, the ratio to
# PyTorch at the same precision and the share of the matmul ceiling reached
# (achieved GFLOP/s at 6N + 6LCT FLOPs per token over the ceiling).
# The raw JSON of every run is kept in $BENCH_OUT (default: a temporary
# folder, printed at the end). Takes about 3 minutes on 2 idle cores; on a
# busy machine the numbers mean little, and the table says so.
#
# Environment knobs: STEPS_124M / WARMUP_124M (10 / 3), STEPS_SMALL /
# WARMUP_SMALL (10 / 3), TORCH_PY (/usr/bin/python3), PRECISIONS ("fp32
# bf16"; "fp32" alone on a CPU without AVX512-BF16, where PyTorch's bf16
# autocast is emulated and one run takes over ten minutes), SHAPES (which
# shapes to run: "124M small" by default; "llama-124m" is Llama at the
# 124M class: 12 layers, dim 768, 12 heads, 4 KV heads, FFN 2048,
# vocabulary 32000, untied, B 4, T 256, with STEPS_LLAMA / WARMUP_LLAMA
# (10 / 3); its FLOPs are torchtitan's 6N + 12LCT, N without the
# embedding, for both programs).
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:-build}
ours="$build/bench/bench_train_step"
ceiling="$build/bench/matmul_ceiling"
torch_py=${TORCH_PY:-/usr/bin/python3}
for exe in "$ours" "$ceiling"; do
  if [ ! -x "$exe" ]; then
    echo "run-train-bench: $exe not found: build first (meson setup $build && meson compile -C $build)" >&2
    exit 2
  fi
done
if ! "$torch_py" -c 'import torch' 2>/dev/null; then
  echo "run-train-bench: $torch_py cannot import torch: run scripts/deps (python3-torch)" >&2
  exit 2
fi

# Same allocator and thread settings for both programs: no mmap'd blocks and
# no trimming (the heap is reused step to step instead of faulted in again),
# OpenBLAS told the core type where it has AVX-512, two threads.
export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000
# SkylakeX (AVX-512) is OpenBLAS's best kernel where the CPU has AVX-512;
# told it on a CPU without, PyTorch dies of an illegal instruction, so there
# OpenBLAS picks its own.
if grep -q ' avx512f' /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=SkylakeX
fi
export OMP_NUM_THREADS=2

out=${BENCH_OUT:-$(mktemp -d /tmp/train-bench.XXXXXX)}
mkdir -p "$out"

# Other work on the machine skews everything: note the load, and measure the
# ceiling before and after the runs (the table uses the better of the two).
cut -d' ' -f1 /proc/loadavg > "$out/load-before"
echo "matmul ceiling (oneDNN, $OMP_NUM_THREADS threads)..." >&2
"$ceiling" > "$out/ceiling-before.json"

# name  layers heads embd vocab batch seq steps warmup [arch options...]
shapes=(
  "124M 12 12 768 50257 4 64 ${STEPS_124M:-10} ${WARMUP_124M:-3}"
  "small 6 6 384 50257 8 64 ${STEPS_SMALL:-10} ${WARMUP_SMALL:-3}"
  "llama-124m 12 12 768 32000 4 256 ${STEPS_LLAMA:-10} ${WARMUP_LLAMA:-3} --arch llama --kv-heads 4 --ffn 2048"
)
export SHAPES=${SHAPES:-124M small}
for s in "${shapes[@]}"; do
  read -r name L H C V B T steps warmup extra <<< "$s"
  case " $SHAPES " in *" $name "*) ;; *) continue ;; esac
  # shellcheck disable=SC2206 # the arch options split on spaces
  args=(--layers "$L" --heads "$H" --embd "$C" --vocab "$V" --batch "$B" --seq "$T"
        --steps "$steps" --warmup "$warmup" ${extra:-})
  for precision in ${PRECISIONS:-fp32 bf16}; do
    for prog in ours torch; do
      f="$out/$name-$prog-$precision.json"
      echo "$name $prog $precision..." >&2
      if [ "$prog" = ours ]; then
        cmd=("$ours" "${args[@]}" --precision "$precision")
      else
        cmd=("$torch_py" bench/torch_train_step.py "${args[@]}" --precision "$precision" --threads 2)
      fi
      if ! "${cmd[@]}" > "$f" 2> "$out/$name-$prog-$precision.log"; then
        echo "run-train-bench: $name $prog $precision failed; see $out/$name-$prog-$precision.log" >&2
        : > "$f"
      fi
    done
  done
done

echo "matmul ceiling again..." >&2
"$ceiling" > "$out/ceiling-after.json"
cut -d' ' -f1 /proc/loadavg > "$out/load-after"

"$torch_py" - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
before = json.load(open(os.path.join(out, "ceiling-before.json")))
after = json.load(open(os.path.join(out, "ceiling-after.json")))
ceil = {p: max(before[p], after[p], key=lambda c: c["ceiling_gflops"]) for p in ("fp32", "bf16")}
loadavg = [float(open(os.path.join(out, f)).read()) for f in ("load-before", "load-after")]

def load_run(name):
    try:
        lines = [l for l in open(os.path.join(out, name)) if l.strip()]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None

print("| shape | program | precision | median tok/s | ms/step | peak RSS MiB | vs torch (same precision) | % of matmul ceiling |")
# (the FLOPs per token are each program's own: GPT-2 6N + 6LCT; Llama 6N + 12LCT, torchtitan's)
print("|---|---|---|---:|---:|---:|---:|---:|")
shapes = {"124M": "GPT-2 124M (12L 12H 768C, V 50257, B 4, T 64)",
          "small": "small (6L 6H 384C, V 50257, B 8, T 64)",
          "llama-124m": "Llama 124M-class (12L 12H 4KV 768C, FFN 2048, V 32000, B 4, T 256)"}
for shape in os.environ["SHAPES"].split():
    desc = shapes[shape]
    for precision in os.environ.get("PRECISIONS", "fp32 bf16").split():
        torch_r = load_run(f"{shape}-torch-{precision}.json")
        for prog in ("ours", "torch"):
            r = load_run(f"{shape}-{prog}-{precision}.json")
            label = "ringmaster" if prog == "ours" else "pytorch"
            if r is None:
                print(f"| {desc} | {label} | {precision} | failed | | | | |")
                continue
            ratio = (f"{r['tokens_per_s'] / torch_r['tokens_per_s']:.2f}x"
                     if torch_r else "n/a")
            pct = 100.0 * r["gflops"] / ceil[precision]["ceiling_gflops"]
            print(f"| {desc} | {label} | {precision} | {r['tokens_per_s']:.1f} | {r['median_ms']:.1f} "
                  f"| {r['peak_rss_mib']:.0f} | {ratio} | {pct:.1f}% |")
print()
print("matmul ceiling (oneDNN, plain row-major layouts, median of repeats, OMP_NUM_THREADS=%s; "
      "the better of before and after the runs: fp32 %.1f / %.1f, bf16 %.1f / %.1f GFLOP/s):"
      % (os.environ.get("OMP_NUM_THREADS", "?"), before["fp32"]["ceiling_gflops"],
         after["fp32"]["ceiling_gflops"], before["bf16"]["ceiling_gflops"], after["bf16"]["ceiling_gflops"]))
print()
print("| precision | M x N x K | GFLOP/s | implementation |")
print("|---|---|---:|---|")
for precision in ("fp32", "bf16"):
    for run in ceil[precision]["runs"]:
        print(f"| {precision} | {run['m']} x {run['n']} x {run['k']} | {run['gflops']:.1f} | {run['impl']} |")
    print(f"| {precision} | **ceiling** | **{ceil[precision]['ceiling_gflops']:.1f}** | |")
print()
print(f"1-minute load average: {loadavg[0]:.2f} before the runs (a run itself adds about 2)")
spread = max(abs(before[p]["ceiling_gflops"] - after[p]["ceiling_gflops"]) / ceil[p]["ceiling_gflops"]
             for p in ("fp32", "bf16"))
if loadavg[0] > 0.5 or spread > 0.1:
    print(f"WARNING: the machine was busy (load {loadavg[0]:.2f} before; ceilings before and after differ "
          f"by up to {100 * spread:.0f}%): these numbers are not trustworthy, run again on a quiet machine")
PY
echo >&2
echo "raw results: $out" >&2
