#!/usr/bin/env bash
# Recovery benchmark: time from a rank's SIGKILL to the first step after
# resuming, ringmaster against torchrun --max_restarts, in one run (see
# bench/recovery/recovery.py).
#
#   bench/recovery/run.sh [BUILD_DIR]       (default: build)
#
# Knobs: SHAPE (small | 124m; default small), KILLS (3), EVERY (5 steps
# between checkpoints), TORCH_PY (/usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
for exe in "$build/coordinatord/ringmasterd" "$build/worker/ringworker"; do
  [ -x "$exe" ] || { echo "recovery bench: $exe not found: build first" >&2; exit 2; }
done
torch_py=${TORCH_PY:-/usr/bin/python3}
"$torch_py" -c 'import torch.distributed' 2>/dev/null ||
  { echo "recovery bench: $torch_py cannot import torch.distributed (apt-get install python3-torch)" >&2; exit 2; }
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores" >&2
exec /usr/bin/python3 bench/recovery/recovery.py --ringmasterd "$build/coordinatord/ringmasterd" \
  --ringworker "$build/worker/ringworker" --python "$torch_py" --shape "${SHAPE:-small}" \
  --kills "${KILLS:-3}" --every "${EVERY:-5}"
