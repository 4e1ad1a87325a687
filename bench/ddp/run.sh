#!/usr/bin/env bash
# Data-parallel benchmark: the trainer with Gloo (bench_ddp_step, one process
# per rank) beside PyTorch DDP with Gloo (bench/ddp/torch_ddp_step.py), same
# model, same step, same threads, in one run.
#
#   bench/ddp/run.sh [BUILD_DIR]     (default: build)
#
# Shape: 6 layers, 6 heads, 384 channels, vocab 50257, T 64, B 8 per rank,
# fp32. For world sizes 1 and 2 it runs ours, then PyTorch, REPEATS times
# each: one OpenMP / torch thread per rank and each rank pinned to its own
# core (taskset -c RANK). Both programs get the same environment (below).
# Prints a markdown table: the median over repeats of each run's median
# tokens/s of the whole group (batch x seq x world per step), ms/step, rank
# 0's peak RSS, and the ratio to PyTorch DDP at the same world size. The raw
# JSON and logs are kept in $BENCH_OUT (default: a temporary folder, printed
# at the end). Takes about 4 minutes on 2 idle cores; on a busy machine the
# numbers mean little, and the table says so.
#
# Environment knobs: STEPS / WARMUP (10 / 3), REPEATS (3), TORCH_PY
# (/usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/../.."

build=${1:-build}
ours="$build/bench/ddp/bench_ddp_step"
torch_py=${TORCH_PY:-/usr/bin/python3}
steps=${STEPS:-10}
warmup=${WARMUP:-3}
repeats=${REPEATS:-3}
if [ ! -x "$ours" ]; then
  echo "ddp/run.sh: $ours not found: build first (meson setup $build && meson compile -C $build)" >&2
  exit 2
fi
if ! "$torch_py" -c 'import torch.distributed' 2>/dev/null; then
  echo "ddp/run.sh: $torch_py cannot import torch.distributed: run scripts/deps (python3-torch)" >&2
  exit 2
fi
if [ "$(nproc)" -lt 2 ]; then
  echo "ddp/run.sh: needs 2 cores (one per rank), this machine has $(nproc)" >&2
  exit 2
fi

# Same allocator and thread settings for both programs: no mmap'd blocks and
# no trimming, OpenBLAS told the core type where it has AVX-512, one thread
# per rank.
export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000
# SkylakeX (AVX-512) is OpenBLAS's best kernel where the CPU has AVX-512;
# told it on a CPU without, PyTorch dies of an illegal instruction, so there
# OpenBLAS picks its own.
if grep -q ' avx512f' /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=SkylakeX
fi
export OMP_NUM_THREADS=1

out=${BENCH_OUT:-$(mktemp -d /tmp/ddp-bench.XXXXXX)}
mkdir -p "$out"
cut -d' ' -f1 /proc/loadavg > "$out/load-before"

# Token data for ours: 1M random uint16 tokens below the vocabulary
# (PyTorch draws random tokens in process; the content does not change the
# work of a step).
"$torch_py" - "$out/tokens.bin" <<'PY'
import random, struct, sys
rng = random.Random(1337)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<%dH" % 1000000, *(rng.randrange(50257) for _ in range(1000000))))
PY

shape=(--layers 6 --heads 6 --embd 384 --vocab 50257 --batch 8 --seq 64
       --steps "$steps" --warmup "$warmup")

# run_group NAME WORLD CMD...: start WORLD ranks of CMD (each gets --rank R
# appended, pinned to core R), wait for all, rank 0's stdout to NAME.json.
run_group() {
  local name=$1 world=$2
  shift 2
  local pids=() r status=0
  for ((r = 0; r < world; r++)); do
    if [ "$r" -eq 0 ]; then
      taskset -c "$r" "$@" --rank "$r" > "$out/$name.json" 2> "$out/$name-rank$r.log" &
    else
      taskset -c "$r" "$@" --rank "$r" > /dev/null 2> "$out/$name-rank$r.log" &
    fi
    pids+=($!)
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || status=1
  done
  if [ "$status" -ne 0 ]; then
    echo "ddp/run.sh: $name failed; see $out/$name-rank*.log" >&2
    : > "$out/$name.json"
  fi
}

for ((i = 1; i <= repeats; i++)); do
  for world in 1 2; do
    name="ours-w$world-$i"
    echo "$name..." >&2
    mkdir -p "$out/kv-$name"
    run_group "$name" "$world" "$ours" --world "$world" --kv "$out/kv-$name" \
      --data "$out/tokens.bin" "${shape[@]}"
    name="torch-w$world-$i"
    echo "$name..." >&2
    rm -f "$out/init-$name"
    run_group "$name" "$world" "$torch_py" bench/ddp/torch_ddp_step.py --world "$world" \
      --init "$out/init-$name" --threads 1 "${shape[@]}"
  done
done
cut -d' ' -f1 /proc/loadavg > "$out/load-after"

"$torch_py" - "$out" "$repeats" <<'PY'
import json, os, statistics, sys
out, repeats = sys.argv[1], int(sys.argv[2])

def load(name):
    try:
        lines = [l for l in open(os.path.join(out, name + ".json")) if l.strip()]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None

def summary(prog, world):
    runs = [r for r in (load(f"{prog}-w{world}-{i}") for i in range(1, repeats + 1)) if r]
    if not runs:
        return None
    return {
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in runs),
        "median_ms": statistics.median(r["median_ms"] for r in runs),
        "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
        "all": [r["tokens_per_s"] for r in runs],
        "n": len(runs),
    }

print("| world size | program | median tok/s (all ranks) | ms/step | rank 0 peak RSS MiB | runs (tok/s) | vs PyTorch DDP |")
print("|---:|---|---:|---:|---:|---|---:|")
for world in (1, 2):
    torch_s = summary("torch", world)
    for prog, label in (("ours", "ringmaster (Gloo)"), ("torch", "PyTorch DDP (gloo)")):
        s = summary(prog, world)
        if s is None:
            print(f"| {world} | {label} | failed | | | | |")
            continue
        ratio = f"{s['tokens_per_s'] / torch_s['tokens_per_s']:.2f}x" if torch_s else "n/a"
        runs = ", ".join(f"{t:.0f}" for t in s["all"])
        print(f"| {world} | {label} | {s['tokens_per_s']:.1f} | {s['median_ms']:.1f} "
              f"| {s['peak_rss_mib']:.0f} | {runs} | {ratio} |")
ours1, ours2 = summary("ours", 1), summary("ours", 2)
torch1, torch2 = summary("torch", 1), summary("torch", 2)
print()
if ours1 and ours2:
    print(f"scaling 1 -> 2 ranks: ringmaster {ours2['tokens_per_s'] / ours1['tokens_per_s']:.2f}x", end="")
    if torch1 and torch2:
        print(f", PyTorch DDP {torch2['tokens_per_s'] / torch1['tokens_per_s']:.2f}x", end="")
    print()
loadavg = [float(open(os.path.join(out, f)).read()) for f in ("load-before", "load-after")]
print(f"shape: 6L 6H 384C, V 50257, T 64, B 8 per rank, fp32; 1 thread per rank, rank r on core r; "
      f"medians of {repeats} run(s) of the per-run median over the timed steps")
print(f"1-minute load average: {loadavg[0]:.2f} before the runs, {loadavg[1]:.2f} after (the runs add up to 2)")
if loadavg[0] > 0.5:
    print(f"WARNING: the machine was busy (load {loadavg[0]:.2f} before the runs): these numbers are "
          f"not trustworthy, run again on a quiet machine")
PY
echo >&2
echo "raw results: $out" >&2
