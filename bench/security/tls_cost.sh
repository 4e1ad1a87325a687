#!/usr/bin/env bash
# The cost of security on the REST API's hottest read: GET /v1/jobs/{id} (a
# real job row) with a bearer token, measured with wrk in one run against
#   1. ringmasterd over plain HTTP,
#   2. ringmasterd serving HTTPS itself (--tls-cert/--tls-key),
#   3. nginx over TLS serving the same bytes (a static file of that job's
#      JSON at the same path, same certificate): the ceiling of TLS serving
#      on this machine.
# Each is run RUNS times (default 3), interleaved, and the median is kept.
#
#   bench/security/tls_cost.sh [BUILD_DIR]    (default: build)
#   DURATION=10 RUNS=3 CONNS=32 THREADS=2 bench/security/tls_cost.sh
#
# The token: when the daemon wrote <db folder>/admin.token (authentication
# on), a viewer token is made with it (POST /v1/tokens) and sent; without
# one (a daemon without authentication) the header is still sent, so the
# request bytes are the same. Prints a markdown table with the machine's load;
# raw wrk output goes to $OUT_DIR (default a temp dir).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
daemon=$build/coordinatord/ringmasterd
[ -x "$daemon" ] || { echo "tls_cost.sh: $daemon not built (meson compile -C $build)" >&2; exit 1; }
for tool in wrk nginx curl openssl; do
  command -v $tool >/dev/null || [ -x /usr/sbin/$tool ] ||
    { echo "tls_cost.sh: needs $tool: apt-get install wrk nginx-light curl openssl" >&2; exit 1; }
done
nginx=$(command -v nginx || echo /usr/sbin/nginx)

work=$(mktemp -d /tmp/rm-tlscost.XXXXXX)
out=${OUT_DIR:-$work/out}
mkdir -p "$out"
duration=${DURATION:-10}
runs=${RUNS:-3}
conns=${CONNS:-32}
threads=${THREADS:-2}
base=$((20000 + RANDOM % 20000))
plain_port=$base; tls_port=$((base + 1)); nginx_port=$((base + 2))
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  rm -rf "$work/plain" "$work/tls" "$work/www"
}
trap cleanup EXIT

openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/tls.key" -out "$work/tls.crt" -days 2 \
  -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" 2>/dev/null
chmod 600 "$work/tls.key"

# start NAME PORT [ARGS...]: a daemon with its own database
start() {
  local name=$1 port=$2; shift 2
  mkdir -p "$work/$name"
  "$daemon" --listen 127.0.0.1:$port --broker tcp://127.0.0.1:$((port + 100)) --db "$work/$name/rm.db" \
    --log-level warn "$@" 2>"$work/$name.log" &
  pids+=($!)
}
start plain $plain_port
start tls $tls_port --tls-cert "$work/tls.crt" --tls-key "$work/tls.key"
plain_url=http://127.0.0.1:$plain_port
tls_url=https://127.0.0.1:$tls_port
C=(curl -sf --cacert "$work/tls.crt")
for url in $plain_url $tls_url; do
  for _ in $(seq 100); do "${C[@]}" "$url/readyz" >/dev/null && break; sleep 0.1; done
done

# token NAME URL: a viewer token made with the admin token, or "" without authentication
token() {
  local admin_file=$work/$1/admin.token
  [ -f "$admin_file" ] || { echo ""; return; }
  local admin; admin=$(cat "$admin_file")
  "${C[@]}" -X POST -H "Authorization: Bearer $admin" -H "Content-Type: application/json" \
    -d '{"name":"bench-'"$1"'","role":"viewer"}' "$2/v1/tokens" |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])'
}
# submit NAME URL: one job (the admin token when there is one); prints its id
submit() {
  local h=()
  [ -f "$work/$1/admin.token" ] && h=(-H "Authorization: Bearer $(cat "$work/$1/admin.token")")
  "${C[@]}" -X POST "${h[@]}" -H "Content-Type: application/json" \
    -d '{"name":"tls-cost","data":{"train":"data/tiny/train.bin"}}' "$2/v1/jobs" |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}
plain_tok=$(token plain $plain_url); tls_tok=$(token tls $tls_url)
plain_id=$(submit plain $plain_url); tls_id=$(submit tls $tls_url)
auth_plain="Authorization: Bearer ${plain_tok:-rmt_not-checked-without-auth}"
auth_tls="Authorization: Bearer ${tls_tok:-rmt_not-checked-without-auth}"
"${C[@]}" -H "$auth_tls" "$tls_url/v1/jobs/$tls_id" > "$work/job.json"
size=$(wc -c < "$work/job.json")

# nginx: the TLS daemon's job JSON at the same path, same certificate
mkdir -p "$work/www/v1/jobs"
cp "$work/job.json" "$work/www/v1/jobs/$tls_id"
chmod 755 "$work" "$work/www" "$work/www/v1" "$work/www/v1/jobs"; chmod 644 "$work/www/v1/jobs/$tls_id"
chmod 644 "$work/tls.crt"
cat > "$work/nginx.conf" <<NGX
worker_processes 2;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  default_type application/json;
  server {
    listen 127.0.0.1:$nginx_port ssl;
    ssl_certificate $work/tls.crt;
    ssl_certificate_key $work/tls.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    root $work/www;
  }
}
NGX
"$nginx" -p "$work" -e "$work/nginx-error.log" -c "$work/nginx.conf"
nginx_url=https://127.0.0.1:$nginx_port
for _ in $(seq 50); do "${C[@]}" "$nginx_url/v1/jobs/$tls_id" >/dev/null && break; sleep 0.1; done
cmp -s "$work/job.json" <("${C[@]}" "$nginx_url/v1/jobs/$tls_id") ||
  { echo "tls_cost.sh: nginx does not serve the job's bytes" >&2; exit 1; }

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
W=(wrk -t$threads -c$conns -d${duration}s --latency)
for i in $(seq "$runs"); do
  echo "== run $i/$runs: plain, TLS, nginx TLS (${duration}s each)" >&2
  "${W[@]}" -H "$auth_plain" "$plain_url/v1/jobs/$plain_id" > "$out/plain-$i.txt"
  "${W[@]}" -H "$auth_tls" "$tls_url/v1/jobs/$tls_id" > "$out/tls-$i.txt"
  "${W[@]}" -H "$auth_tls" "$nginx_url/v1/jobs/$tls_id" > "$out/nginx-$i.txt"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

/usr/bin/python3 - "$out" "$runs" "$size" "$load_before" "$load_after" "${tls_tok:+yes}" <<'PY'
import re, statistics, sys
out, runs, size, lb, la, tok = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
def ms(v):
    n, u = re.match(r"([\d.]+)(us|ms|s)", v).groups()
    return float(n) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[u]
def parse(path):
    t = open(path).read()
    errs = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
    if errs or re.search(r"Socket errors", t):
        sys.exit(f"{path}: errors in the run, the figures would be meaningless:\n{t}")
    return (float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1)),
            ms(re.search(r"^\s+50%\s+(\S+)\s*$", t, re.M).group(1)),
            ms(re.search(r"^\s+99%\s+(\S+)\s*$", t, re.M).group(1)))
res = {}
for name in ("plain", "tls", "nginx"):
    rs = [parse(f"{out}/{name}-{i}.txt") for i in range(1, runs + 1)]
    res[name] = [statistics.median(r[k] for r in rs) for k in range(3)] + [[round(r[0]) for r in rs]]
print(f"job JSON {size} B; bearer token: {'a viewer token (authentication on)' if tok and tok[0] else 'sent, not checked (no authentication in this build)'}; "
      f"median of {runs} interleaved runs; load average before {lb}, after {la}")
print()
print("| what | requests/s (median) | runs | p50 ms | p99 ms |")
print("| --- | ---: | --- | ---: | ---: |")
for label, k in (("ringmasterd, plain HTTP", "plain"), ("ringmasterd, TLS (--tls-cert)", "tls"),
                 ("nginx, TLS, static file of the same bytes", "nginx")):
    r = res[k]
    print(f"| {label} | {r[0]:.0f} | {' / '.join(map(str, r[3]))} | {r[1]:.2f} | {r[2]:.2f} |")
print()
print(f"TLS ringmasterd / TLS nginx: {res['tls'][0] / res['nginx'][0]:.2f}x (goal >= 0.3x); "
      f"TLS / plain ringmasterd: {res['tls'][0] / res['plain'][0]:.2f}x")
PY
