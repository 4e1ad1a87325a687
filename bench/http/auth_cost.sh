#!/usr/bin/env bash
# The cost of authentication on the hot read path: GET /v1/jobs/{id} over
# 1,000 jobs with a bearer token (authentication on: the token hashed and
# found in the in-memory cache on each request) against the same daemon and
# database restarted with --auth off, in the same run, wrk -t2 -c32.
#
# usage: bench/http/auth_cost.sh [BUILD_DIR]   (DURATION=10 by default)
# Prints a markdown table; the raw wrk output goes to $OUT_DIR (default a
# temp folder).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
daemon=$build/coordinatord/ringmasterd
for tool in wrk curl; do
  command -v $tool >/dev/null || { echo "auth_cost.sh: needs $tool" >&2; exit 1; }
done
work=$(mktemp -d /tmp/rm-authcost.XXXXXX)
out=${OUT_DIR:-$work}
duration=${DURATION:-10}
port=$((20000 + RANDOM % 20000))
bport=$((port + 2))
dpid=""
cleanup() { [ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null || true; rm -rf "$work/db"; }
trap cleanup EXIT
start() {
  "$daemon" --listen 127.0.0.1:$port --broker tcp://127.0.0.1:$bport --db "$work/db/rm.db" \
    --log-level warn --submit-rate 0 --max-queued-per-token 1000000 "$@" 2>>"$work/daemon.log" &
  dpid=$!
  for _ in $(seq 100); do curl -sf http://127.0.0.1:$port/readyz >/dev/null && break; sleep 0.1; done
}
stop() { kill "$dpid"; wait "$dpid" 2>/dev/null || true; dpid=""; }

mkdir -p "$work/db"
start
RM_TOKEN=$(cat "$work/db/admin.token")
export RM_TOKEN
for i in $(seq 1000); do
  printf '{"name":"cost-%d","data":{"train":"x.bin"}}\n' "$i"
done | /usr/bin/python3 -c '
import http.client, os, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]))
h = {"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["RM_TOKEN"]}
ids = []
for line in sys.stdin:
    c.request("POST", "/v1/jobs", body=line, headers=h)
    r = c.getresponse(); body = r.read()
    assert r.status == 201, (r.status, body)
    ids.append(__import__("json").loads(body)["id"])
open(sys.argv[2], "w").write("\n".join(ids) + "\n")
' "$port" "$work/ids.txt"

echo "== GET /v1/jobs/{id} with a bearer token, wrk -t2 -c32 -d${duration}s" >&2
IDS="$work/ids.txt" wrk -t2 -c32 -d${duration}s --latency -s bench/http/get.lua http://127.0.0.1:$port > "$out/token.txt"
stop
start --auth off
echo "== GET /v1/jobs/{id} with --auth off, wrk -t2 -c32 -d${duration}s" >&2
IDS="$work/ids.txt" RM_TOKEN= wrk -t2 -c32 -d${duration}s --latency -s bench/http/get.lua http://127.0.0.1:$port > "$out/off.txt"
stop

/usr/bin/python3 - "$out" <<'PY'
import re, sys
out = sys.argv[1]
def parse(name):
    t = open("%s/%s.txt" % (out, name)).read()
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
    p50 = re.search(r"^\s+50%\s+(\S+)", t, re.M).group(1)
    p99 = re.search(r"^\s+99%\s+(\S+)", t, re.M).group(1)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
    return rps, p50, p99, int(bad.group(1)) if bad else 0
on, off = parse("token"), parse("off")
print("| GET /v1/jobs/{id}, wrk -t2 -c32 | req/s | p50 | p99 | non-2xx |")
print("| --- | --- | --- | --- | --- |")
print("| bearer token (auth on) | %.0f | %s | %s | %d |" % on)
print("| --auth off | %.0f | %s | %s | %d |" % off)
print("\nauth on / auth off: %.2fx" % (on[0] / off[0]))
PY
