#!/usr/bin/env bash
# A torchrun user's script under ringmaster and under torchrun, same run:
# launch to every rank past init_process_group, and SIGKILL of a rank to the
# first step after the gang's restart, with the share of `import torch`
# (see bench/program/launch_recovery.py).
#
#   bench/program/run.sh [BUILD_DIR] [extra options]     (default: build)
#
# e.g. bench/program/run.sh build --monitor-interval 0.1   (torchrun's best)
#      bench/program/run.sh build --only torchrun           (no build needed)
# Knobs: RUNS (3), TORCH_PY (/usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
shift || true
torch_py=${TORCH_PY:-/usr/bin/python3}
"$torch_py" -c 'import torch.distributed' 2>/dev/null ||
  { echo "program bench: $torch_py cannot import torch.distributed (apt-get install python3-torch)" >&2; exit 2; }
case " $* " in
  *" --only torchrun "*) ;;
  *) for exe in "$build/coordinatord/ringmasterd" "$build/worker/ringworker"; do
       [ -x "$exe" ] || { echo "program bench: $exe not found: build first" >&2; exit 2; }
     done ;;
esac
exec /usr/bin/python3 bench/program/launch_recovery.py --build "$build" --python "$torch_py" \
  --runs "${RUNS:-3}" "$@"
