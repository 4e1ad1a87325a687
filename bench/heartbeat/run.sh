#!/bin/sh
# bench/heartbeat/run.sh: N simulated agents (default 1000) REGISTER and
# HEARTBEAT at 1 Hz against one ringmasterd for DURATION seconds (default
# 60). Reports the daemon's CPU use over the window (utime + stime from
# /proc/PID/stat, as a share of one core), the load average, and any false
# expiry: a worker the coordinator reports dead (GET /v1/workers, its log)
# or an ERROR the agents received, while every agent kept heartbeating.
#
# Usage: bench/heartbeat/run.sh [BUILD_DIR] [N_AGENTS] [DURATION_S]
# Environment: OUT_DIR (a folder to write result.json into; created).
set -eu
BUILD=${1:-build}
N=${2:-1000}
DURATION=${3:-60}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
DAEMON=$BUILD/coordinatord/ringmasterd
LOAD=$BUILD/bench/heartbeat/hb_load
for f in "$DAEMON" "$LOAD"; do
	[ -x "$f" ] || { echo "missing $f: meson compile -C $BUILD" >&2; exit 1; }
done

TMP=$(mktemp -d /tmp/rm-hb-bench-XXXXXX)
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
HTTP=$(port)
BROKER=$(port)
"$DAEMON" --listen 127.0.0.1:$HTTP --broker tcp://127.0.0.1:$BROKER --db "$TMP/rm.db" \
	--log-level info >"$TMP/daemon.log" 2>&1 &
PID=$!
cleanup() { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT INT TERM
for i in $(seq 100); do
	curl -sf "http://127.0.0.1:$HTTP/readyz" >/dev/null 2>&1 && break
	sleep 0.1
done

WARMUP=5
"$LOAD" tcp://127.0.0.1:$BROKER "$N" $((DURATION + WARMUP + 2)) >"$TMP/load.json" &
LPID=$!
sleep $WARMUP
cpu_ticks() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
T0=$(date +%s.%N)
C0=$(cpu_ticks)
sleep "$DURATION"
C1=$(cpu_ticks)
T1=$(date +%s.%N)
LOADAVG=$(cut -d' ' -f1-3 /proc/loadavg)
WORKERS=$(curl -sf -H "Authorization: Bearer $(cat "$TMP/admin.token")" "http://127.0.0.1:$HTTP/v1/workers")
set +e
wait "$LPID"
LOAD_RC=$?
set -e

HZ=$(getconf CLK_TCK)
echo "$WORKERS" >"$TMP/workers.json"
/usr/bin/python3 - "$N" "$DURATION" "$C0" "$C1" "$T0" "$T1" "$HZ" "$LOADAVG" "$LOAD_RC" "$TMP" <<'PY' >"$TMP/result.json"
import json, sys
n, duration, c0, c1, t0, t1, hz, loadavg, load_rc, tmp = sys.argv[1:]
wall = float(t1) - float(t0)
cpu_s = (int(c1) - int(c0)) / int(hz)
workers = json.load(open(tmp + "/workers.json"))["workers"]
log = open(tmp + "/daemon.log", errors="replace").read()
load = json.load(open(tmp + "/load.json"))
print(json.dumps({
    "agents": int(n),
    "window_s": round(wall, 2),
    "daemon_cpu_s": round(cpu_s, 2),
    "daemon_cpu_percent_of_one_core": round(100.0 * cpu_s / wall, 2),
    "loadavg_1_5_15": loadavg,
    "workers_alive": sum(w["state"] == "alive" for w in workers),
    "workers_dead": sum(w["state"] == "dead" for w in workers),
    "declared_dead_in_log": log.count("declared dead"),
    "load_generator": load,
    "load_generator_rc": int(load_rc),
}, indent=1))
PY
cat "$TMP/result.json"
if [ -n "${OUT_DIR:-}" ]; then
	mkdir -p "$OUT_DIR"
	cp "$TMP/result.json" "$OUT_DIR/result.json"
fi
/usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
ok = r["workers_dead"] == 0 and r["declared_dead_in_log"] == 0 and r["load_generator_rc"] == 0 and r["workers_alive"] == r["agents"]
print("false expiry: %s" % ("none" if ok else "YES (see above)"))
sys.exit(0 if ok else 1)' "$TMP/result.json"
