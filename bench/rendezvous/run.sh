#!/usr/bin/env bash
# Rendezvous benchmark: ringmaster (coordinator KV + Gloo) against torchrun
# (c10d rendezvous + Gloo) for 2, 8 and 32 processes on loopback, in one run.
#
#   bench/rendezvous/run.sh [BUILD_DIR]      (default: build)
#
# ringmaster: placed (the coordinator's "scheduled" event) to the moment the
# last rank has its communicator; torchrun: launch to the moment the last
# worker is past init_process_group('gloo') + barrier. Medians of REPEATS runs
# (default 3). Prints a markdown table and the load average; see
# bench/rendezvous/rendezvous.py for what each clock covers.
#
# Environment: SIZES (2,8,32), REPEATS (3), TORCH_PY (/usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/../.."

build=${1:-build}
for exe in "$build/coordinatord/ringmasterd" "$build/worker/ringworker"; do
  if [ ! -x "$exe" ]; then
    echo "rendezvous bench: $exe not found: build first (meson setup $build && meson compile -C $build)" >&2
    exit 2
  fi
done
torch_py=${TORCH_PY:-/usr/bin/python3}
if ! "$torch_py" -c 'import torch.distributed' 2>/dev/null; then
  echo "rendezvous bench: $torch_py cannot import torch.distributed (apt-get install python3-torch)" >&2
  exit 2
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores" >&2
exec /usr/bin/python3 bench/rendezvous/rendezvous.py \
  --ringmasterd "$build/coordinatord/ringmasterd" --ringworker "$build/worker/ringworker" \
  --sizes "${SIZES:-2,8,32}" --repeats "${REPEATS:-3}" --python "$torch_py"
