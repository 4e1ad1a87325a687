#!/usr/bin/env bash
# Snapshot benchmark, in one run on one disk:
#   1. the disk's sequential write speed: dd of SIZE_MB MiB with fsync
#      (conv=fsync), REPEATS times;
#   2. snapshot write throughput: bench_snapshot_write writes one shard of the
#      small shape's state (PARAMS floats x 3: parameters, AdamW m and v, as
#      safetensors with XXH3-64 and fsync), REPEATS times;
#   3. the step-time overhead of asynchronous snapshots: bench_ddp_step
#      (1 rank, small shape: 6 layers, 6 heads, 384 channels, vocab 50257,
#      T 64, B 8, 2 threads) for STEPS steps without snapshots and with a
#      snapshot every EVERY steps, alternating, REPEATS times each.
# Prints a markdown table. Raw output stays in $BENCH_OUT (default: a
# temporary folder on the disk under test, printed at the end).
#
#   bench/snapshot/run.sh [BUILD_DIR]     (default: build)
#
# Knobs: REPEATS (3), SIZE_MB (1024), PARAMS (30000000), STEPS (30), EVERY (5).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
repeats=${REPEATS:-3}
size_mb=${SIZE_MB:-1024}
params=${PARAMS:-30000000}
steps=${STEPS:-30}
every=${EVERY:-5}
for b in bench/snapshot/bench_snapshot_write bench/ddp/bench_ddp_step; do
  [ -x "$build/$b" ] || { echo "snapshot/run.sh: $build/$b not found: build first" >&2; exit 2; }
done
out=${BENCH_OUT:-$(mktemp -d /var/tmp/snapshot-bench.XXXXXX)}
mkdir -p "$out"
py=/usr/bin/python3
cut -d' ' -f1 /proc/loadavg > "$out/load-before"

for ((i = 1; i <= repeats; i++)); do
  echo "dd $i..." >&2
  rm -f "$out/dd.bin"
  dd if=/dev/zero of="$out/dd.bin" bs=1M count="$size_mb" conv=fsync 2> "$out/dd-$i.log"
  rm -f "$out/dd.bin"
done
echo "snapshot writes..." >&2
mkdir -p "$out/shards"
"$build/bench/snapshot/bench_snapshot_write" --dir "$out/shards" --params "$params" \
  --repeats "$repeats" > "$out/write.json"
rm -rf "$out/shards"

"$py" - "$out/tokens.bin" <<'PY'
import random, struct, sys
rng = random.Random(1337)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<%dH" % 1000000, *(rng.randrange(50257) for _ in range(1000000))))
PY
export OMP_NUM_THREADS=2 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000
for ((i = 1; i <= repeats; i++)); do
  for mode in off on; do
    echo "steps $mode $i..." >&2
    rm -rf "$out/kv" "$out/ck"
    mkdir -p "$out/kv"
    extra=()
    [ "$mode" = on ] && extra=(--checkpoint-dir "$out/ck" --checkpoint-every "$every")
    "$build/bench/ddp/bench_ddp_step" --world 1 --rank 0 --kv "$out/kv" --data "$out/tokens.bin" \
      --steps "$steps" --warmup 2 "${extra[@]}" > "$out/steps-$mode-$i.json" 2> "$out/steps-$mode-$i.log"
  done
done
rm -rf "$out/ck" "$out/kv"
cut -d' ' -f1 /proc/loadavg > "$out/load-after"

"$py" - "$out" "$repeats" "$every" "$size_mb" <<'PY'
import json, os, re, statistics, sys
out, repeats, every, size_mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
dd = []
for i in range(1, repeats + 1):
    text = open(os.path.join(out, "dd-%d.log" % i)).read()
    m = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", text)
    dd.append(int(m.group(1)) / float(m.group(2)) / 1e6)
w = json.load(open(os.path.join(out, "write.json")))
runs = {mode: [json.loads(open(os.path.join(out, "steps-%s-%d.json" % (mode, i))).read())
               for i in range(1, repeats + 1)] for mode in ("off", "on")}
dd_med = statistics.median(dd)
print("| measure | median | runs |")
print("|---|---:|---|")
print("| disk: dd %d MiB, conv=fsync | %.0f MB/s | %s |" % (
    size_mb, dd_med, ", ".join("%.0f" % x for x in dd)))
print("| snapshot shard write (%d params x 3 = %.0f MB, XXH3 + fsync + rename) | %.0f MB/s (%.2fx dd) | %s s |" % (
    w["params"], w["bytes"] / 1e6, w["median_mb_s"], w["median_mb_s"] / dd_med,
    ", ".join("%.2f" % s for s in w["seconds"])))
for key in ("mean_ms", "median_ms"):
    off = statistics.median(r[key] for r in runs["off"])
    on = statistics.median(r[key] for r in runs["on"])
    print("| step time, %s: no snapshots / snapshot every %d steps | %.1f / %.1f ms (%+.1f%%) | off %s; on %s |" % (
        key.replace("_ms", ""), every, off, on, 100 * (on / off - 1),
        ", ".join("%.1f" % r[key] for r in runs["off"]), ", ".join("%.1f" % r[key] for r in runs["on"])))
before = float(open(os.path.join(out, "load-before")).read())
print("\nload average before %.2f%s; raw results: %s" % (
    before, " (busy: treat with care)" if before > 0.5 else "", out))
PY
