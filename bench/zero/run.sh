#!/usr/bin/env bash
# ZeRO benchmark: the four parallel.sharding modes (none, zero1, zero2,
# zero3) of the trainer at the same world size, global batch and model, in
# one run, with bench_ddp_step (one process per rank, Gloo over loopback).
#
#   bench/zero/run.sh [BUILD_DIR]     (default: build)
#
# Shape: GPT-2 124M (12 layers, 12 heads, 768 channels, vocab 50257), T 64,
# B 2 per rank, fp32, world size 4 (WORLD), one OpenMP thread per rank, rank
# r pinned to core r mod nproc (four ranks share this machine's two cores:
# the figure to read is each mode against `none` in the same run, not the
# absolute rate). Per mode it prints rank 0's median tokens/s of the whole
# group, the largest peak RSS over the ranks, what the trainer says one rank
# holds (parameters, gradients, optimizer state, activations) and the ratios
# to `none`. Raw JSON and logs stay in $BENCH_OUT (default: a temporary
# folder, printed at the end). About 4 minutes on 2 idle cores.
#
# Environment knobs: STEPS / WARMUP (4 / 1), REPEATS (1), WORLD (4), BATCH (2),
# SEQ (64), MODES ("none zero1 zero2 zero3").
set -euo pipefail
cd "$(dirname "$0")/../.."

build=${1:-build}
ours="$build/bench/ddp/bench_ddp_step"
py=/usr/bin/python3
steps=${STEPS:-4}
warmup=${WARMUP:-1}
repeats=${REPEATS:-1}
world=${WORLD:-4}
batch=${BATCH:-2}
seq=${SEQ:-64}
modes=${MODES:-none zero1 zero2 zero3}
if [ ! -x "$ours" ]; then
  echo "zero/run.sh: $ours not found: build first (meson setup $build && meson compile -C $build)" >&2
  exit 2
fi

export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 OMP_NUM_THREADS=1
out=${BENCH_OUT:-$(mktemp -d /tmp/zero-bench.XXXXXX)}
mkdir -p "$out"
cut -d' ' -f1 /proc/loadavg > "$out/load-before"

# 1M random uint16 tokens below the vocabulary (the content does not change
# the work of a step).
"$py" - "$out/tokens.bin" <<'PY'
import random, struct, sys
rng = random.Random(1337)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<%dH" % 1000000, *(rng.randrange(50257) for _ in range(1000000))))
PY

ncpu=$(nproc)
for ((i = 1; i <= repeats; i++)); do
  for mode in $modes; do
    name="$mode-$i"
    echo "$name: $world ranks..." >&2
    mkdir -p "$out/kv-$name"
    pids=()
    for ((r = 0; r < world; r++)); do
      taskset -c $((r % ncpu)) "$ours" --world "$world" --rank "$r" --kv "$out/kv-$name" \
        --data "$out/tokens.bin" --layers 12 --heads 12 --embd 768 --vocab 50257 \
        --batch "$batch" --seq "$seq" --steps "$steps" --warmup "$warmup" --sharding "$mode" \
        > "$out/$name-rank$r.json" 2> "$out/$name-rank$r.log" &
      pids+=($!)
    done
    status=0
    for pid in "${pids[@]}"; do wait "$pid" || status=1; done
    if [ "$status" -ne 0 ]; then
      echo "zero/run.sh: $name failed; see $out/$name-rank*.log" >&2
    fi
  done
done
cut -d' ' -f1 /proc/loadavg > "$out/load-after"

"$py" - "$out" "$repeats" "$world" "$modes" <<'PY'
import json, os, statistics, sys
out, repeats, world, modes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split()

def load(name, r):
    try:
        lines = [l for l in open(os.path.join(out, f"{name}-rank{r}.json")) if l.strip()]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None

rows = {}
for mode in modes:
    runs = []
    for i in range(1, repeats + 1):
        ranks = [load(f"{mode}-{i}", r) for r in range(world)]
        if all(ranks):
            runs.append(ranks)
    if not runs:
        rows[mode] = None
        continue
    rows[mode] = {
        "tok": statistics.median(rs[0]["tokens_per_s"] for rs in runs),
        "ms": statistics.median(rs[0]["median_ms"] for rs in runs),
        "rss": statistics.median(max(x["peak_rss_mib"] for x in rs) for rs in runs),
        "mem": runs[0][0],
        "loss": runs[0][0]["last_loss"],
    }
base = rows.get("none")
print(f"| mode | median tok/s (all {world} ranks) | ms/step | peak RSS per rank MiB (largest) | params / grads / optimizer / activations MiB (rank 0) | RSS vs none | tok/s vs none | last loss |")
print("|---|---:|---:|---:|---|---:|---:|---:|")
for mode in modes:
    s = rows[mode]
    if s is None:
        print(f"| {mode} | failed | | | | | | |")
        continue
    m = s["mem"]
    rss_ratio = f"{s['rss'] / base['rss']:.2f}x" if base else "n/a"
    tok_ratio = f"{s['tok'] / base['tok']:.2f}x" if base else "n/a"
    print(f"| {mode} | {s['tok']:.1f} | {s['ms']:.0f} | {s['rss']:.0f} | "
          f"{m['params_mib']:.0f} / {m['grads_mib']:.0f} / {m['optim_mib']:.0f} / {m['activations_mib']:.0f} | "
          f"{rss_ratio} | {tok_ratio} | {s['loss']:.4f} |")
before = float(open(os.path.join(out, "load-before")).read())
after = float(open(os.path.join(out, "load-after")).read())
print(f"\nload average before {before:.2f}, after {after:.2f}" +
      (" (the machine was busy before the run: treat the figures with care)" if before > 0.5 else ""))
print(f"raw results: {out}")
PY
