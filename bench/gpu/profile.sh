#!/usr/bin/env bash
# Where a GPU training step spends its time, kernel by kernel: runs
# bench_gpu_step under Nsight Compute (ncu, one metric: each kernel's GPU
# time) for one warmup and one timed step, and prints a markdown table of
# the kernels grouped by name, the costliest first, with their share of the
# step. ncu serialises the kernels and times each alone, so the sum is the
# step without overlap or launch gaps; bench/gpu/run.sh gives the real step.
#
#   bench/gpu/profile.sh [BUILD_DIR] [BATCH]   (defaults: build-gpu, 16)
#
# Knobs: VOCAB (50257), ATTENTION (gemm or fused, bench_gpu_step's
# --attention; default gemm), TOP (25 rows). Raw CSV in $PROFILE_OUT (default: a
# temporary folder, printed at the end).
# DETAIL (a regular expression of kernel names; empty: none): a second ncu
# pass with the sections that say why a kernel is slow (speed of light,
# occupancy, warp stall reasons, pipe use, shared-memory conflicts) on
# DETAIL_COUNT (3) launches of the matching kernels after skipping
# DETAIL_SKIP (0) of them, into $PROFILE_OUT/detail.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-gpu}
batch=${2:-16}
vocab=${VOCAB:-50257}
attention=${ATTENTION:-gemm}
top=${TOP:-25}
exe=$build/bench/gpu/bench_gpu_step
[ -x "$exe" ] || { echo "gpu/profile.sh: $exe was not built (bench/gpu/run.sh builds it)" >&2; exit 2; }
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
[ -n "$ncu" ] || { echo "gpu/profile.sh: no ncu (Nsight Compute) on this machine" >&2; exit 2; }
out=${PROFILE_OUT:-$(mktemp -d /var/tmp/gpu-profile.XXXXXX)}
mkdir -p "$out"
echo "ncu on bench_gpu_step --batch $batch --vocab $vocab --attention $attention (2 steps)..." >&2
"$ncu" --metrics gpu__time_duration.sum --csv --print-units base \
  "$exe" --batch "$batch" --vocab "$vocab" --attention "$attention" --steps 1 --warmup 1 \
  > "$out/ncu.csv" 2> "$out/ncu.log"
py=$(command -v /usr/bin/python3 || command -v python3)
"$py" - "$out/ncu.csv" "$batch" "$vocab" "$top" "$attention" <<'PY'
import csv, sys, collections
path, batch, vocab, top, attention = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
rows = [r for r in csv.reader(l for l in open(path) if l.startswith('"'))]
head, body = rows[0], rows[1:]
name, metric, value = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
t, n = collections.defaultdict(float), collections.Counter()
for r in body:
    if r[metric] == "gpu__time_duration.sum":
        k = r[name].split("(")[0].split("<")[0].strip().removeprefix("void ")
        t[k] += float(r[value].replace(",", "")) / 2  # ns per step (2 steps)
        n[k] += 0.5
total = sum(t.values())
print(f"### Kernel times of one GPT-2 124M step, batch {batch} x 1024, vocab {vocab}, attention {attention} "
      "(bench/gpu/profile.sh)")
print()
print(f"Sum of kernel times: {total/1e6:.1f} ms per step, {sum(n.values()):.0f} launches.")
print()
print("| kernel | launches per step | ms per step | share |")
print("| --- | --- | --- | --- |")
for k, v in sorted(t.items(), key=lambda kv: -kv[1])[:top]:
    print(f"| `{k[:70]}` | {n[k]:.0f} | {v/1e6:.2f} | {100*v/total:.1f}% |")
PY
if [ -n "${DETAIL:-}" ]; then
  echo "ncu sections on ${DETAIL_COUNT:-3} launches matching $DETAIL..." >&2
  "$ncu" --kernel-name "regex:$DETAIL" --launch-skip "${DETAIL_SKIP:-0}" --launch-count "${DETAIL_COUNT:-3}" \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    "$exe" --batch "$batch" --vocab "$vocab" --attention "$attention" --steps 1 --warmup 1 \
    > "$out/detail.txt" 2>&1 || echo "gpu/profile.sh: the DETAIL pass failed (see $out/detail.txt)" >&2
fi
echo "raw output: $out" >&2
