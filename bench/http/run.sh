#!/usr/bin/env bash
# HTTP benchmark of ringmasterd against nginx in the same run.
#
#   bench/http/run.sh [BUILD_DIR]     (default: build)
#
# 1. POST /v1/jobs (durable: 201 only after fsync'ed commit) for 10 s with
#    wrk -t2 -c32, then tops the store up to 10,000 jobs.
# 2. GET /v1/jobs/{id} over 1,000 random ids for 10 s, wrk -t2 -c32 --latency.
#    Then GET /v1/jobs?limit=100 (a page of the list) the same way.
# 3. nginx serving a static file of the same size as one job's JSON, same wrk
#    settings: the ceiling of HTTP serving on this machine.
# Prints a markdown table; raw wrk output goes to $OUT_DIR (default a temp dir).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
daemon=$build/coordinatord/ringmasterd
[ -x "$daemon" ] || { echo "run.sh: $daemon not built (meson compile -C $build)" >&2; exit 1; }
for tool in wrk nginx curl; do
  command -v $tool >/dev/null || { echo "run.sh: needs $tool: apt-get install wrk nginx-light curl" >&2; exit 1; }
done

work=$(mktemp -d /tmp/rm-httpbench.XXXXXX)
out=${OUT_DIR:-$work}
mkdir -p "$out"
port=$((20000 + RANDOM % 20000))
nport=$((port + 1))
bport=$((port + 2))
duration=${DURATION:-10}
cleanup() {
  [ -n "${dpid:-}" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null || true
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  rm -rf "$work/db" "$work/www"
}
trap cleanup EXIT

mkdir -p "$work/db"
"$daemon" --listen 127.0.0.1:$port --broker tcp://127.0.0.1:$bport --db "$work/db/rm.db" \
  --log-level warn --max-queued-per-token 1000000 --submit-rate 0 2>"$work/daemon.log" &
dpid=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:$port/readyz >/dev/null && break; sleep 0.1; done
# every request carries the admin token (authentication is on)
RM_TOKEN=$(cat "$work/db/admin.token")
export RM_TOKEN
auth=(-H "Authorization: Bearer $RM_TOKEN")

echo "== POST /v1/jobs, wrk -t2 -c32 -d${duration}s" >&2
wrk -t2 -c32 -d${duration}s --latency -s bench/http/post.lua http://127.0.0.1:$port > "$out/post.txt"
jobs=$(curl -s "${auth[@]}" "http://127.0.0.1:$port/metrics" | awk '/^ringmaster_jobs\{/ {s += $2} END {print s+0}')
echo "   $jobs jobs stored; topping up to 10000" >&2
if [ "$jobs" -lt 10000 ]; then
  /usr/bin/python3 - "$port" $((10000 - jobs)) <<'PY'
import http.client, os, sys, threading
port, n = int(sys.argv[1]), int(sys.argv[2])
auth = "Bearer " + os.environ["RM_TOKEN"]
def worker(k):
    c = http.client.HTTPConnection("127.0.0.1", port)
    for i in range(k):
        c.request("POST", "/v1/jobs", body='{"name":"fill","data":{"train":"x.bin"}}',
                  headers={"Content-Type": "application/json", "Authorization": auth})
        r = c.getresponse(); r.read()
        assert r.status == 201, r.status
threads = [threading.Thread(target=worker, args=(n // 8 + (1 if i < n % 8 else 0),)) for i in range(8)]
[t.start() for t in threads]; [t.join() for t in threads]
PY
fi

# 1,000 ids drawn across the whole store, through the paging API.
/usr/bin/python3 - "$port" > "$work/ids.txt" <<'PY'
import json, os, random, sys, urllib.request
port = int(sys.argv[1]); ids = []; cursor = None
auth = {"Authorization": "Bearer " + os.environ["RM_TOKEN"]}
while True:
    url = f"http://127.0.0.1:{port}/v1/jobs?limit=1000" + (f"&cursor={cursor}" if cursor else "")
    d = json.load(urllib.request.urlopen(urllib.request.Request(url, headers=auth)))
    ids += [j["id"] for j in d["jobs"]]
    cursor = d.get("next_cursor")
    if not cursor: break
random.seed(1); print("\n".join(random.sample(ids, 1000)))
print(len(ids), file=sys.stderr)
PY
total=$(curl -s "${auth[@]}" "http://127.0.0.1:$port/metrics" | awk '/^ringmaster_jobs\{/ {s += $2} END {print s+0}')
size=$(curl -s "${auth[@]}" "http://127.0.0.1:$port/v1/jobs/$(head -1 "$work/ids.txt")" | wc -c)

echo "== GET /v1/jobs/{id} ($total jobs in store, ${size} B), wrk -t2 -c32 -d${duration}s" >&2
IDS="$work/ids.txt" wrk -t2 -c32 -d${duration}s --latency -s bench/http/get.lua http://127.0.0.1:$port > "$out/get.txt"

echo "== GET /v1/jobs?limit=100, wrk -t2 -c32 -d${duration}s" >&2
wrk -t2 -c32 -d${duration}s --latency "${auth[@]}" "http://127.0.0.1:$port/v1/jobs?limit=100" > "$out/list.txt"

kill "$dpid"; wait "$dpid" 2>/dev/null || true; dpid=""

mkdir -p "$work/www"
head -c "$size" /dev/urandom | base64 -w0 | head -c "$size" > "$work/www/job.json"
# nginx workers run as an unprivileged user: let them read the file.
chmod 755 "$work" "$work/www"; chmod 644 "$work/www/job.json"
cat > "$work/nginx.conf" <<NGX
worker_processes 2;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  default_type application/json;
  server { listen 127.0.0.1:$nport; root $work/www; }
}
NGX
nginx -c "$work/nginx.conf" -p "$work"
for _ in $(seq 50); do curl -sf http://127.0.0.1:$nport/job.json >/dev/null && break; sleep 0.1; done
echo "== nginx static file ${size} B, wrk -t2 -c32 -d${duration}s" >&2
wrk -t2 -c32 -d${duration}s --latency http://127.0.0.1:$nport/job.json > "$out/nginx.txt"

/usr/bin/python3 - "$out" "$total" "$size" <<'PY'
import re, sys
out, total, size = sys.argv[1], sys.argv[2], sys.argv[3]
def ms(v):
    n, u = re.match(r"([\d.]+)(us|ms|s)", v).groups()
    return float(n) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[u]
def parse(name):
    t = open(f"{out}/{name}.txt").read()
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
    p50 = ms(re.search(r"^\s+50%\s+([\d.]+(?:us|ms|s))\s*$", t, re.M).group(1))
    p99 = ms(re.search(r"^\s+99%\s+([\d.]+(?:us|ms|s))\s*$", t, re.M).group(1))
    errs = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
    n_err = int(errs.group(1)) if errs else 0
    if n_err:
        sys.exit(f"{name}: {n_err} answers were not 2xx: the figures would be meaningless")
    return rps, p50, p99, n_err
post, get, lst, ngx = parse("post"), parse("get"), parse("list"), parse("nginx")
print(f"jobs in store: {total}; job JSON {size} B; wrk -t2 -c32, 2 cores shared with wrk")
print()
print("| what | requests/s | p50 ms | p99 ms | non-2xx |")
print("| --- | ---: | ---: | ---: | ---: |")
for label, r in (("ringmasterd POST /v1/jobs (durable)", post),
                 ("ringmasterd GET /v1/jobs/{id}", get),
                 ("ringmasterd GET /v1/jobs?limit=100", lst),
                 ("nginx static file, same size", ngx)):
    print(f"| {label} | {r[0]:.0f} | {r[1]:.2f} | {r[2]:.2f} | {r[3]} |")
print()
print(f"GET rate / nginx rate: {get[0]/ngx[0]:.2f}x (target >= 0.3x); "
      f"GET p99 / nginx p99: {get[2]/ngx[2]:.2f}x (target <= 2x); POST: {post[0]:.0f}/s (target >= 2000/s)")
PY
