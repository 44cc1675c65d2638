#!/usr/bin/env bash
# What the cheapest callers of the keyless routes Web Push added cost the server: GET /sdk/web/sw.js (h2load, HTTP/1.1,
# 16 connections, 50,000 requests) and the registration's CORS preflight (8 threads, 20,000 OPTIONS for a made-up app):
# CPU ms per 1,000 (from /proc) and peak memory. Release build (BIN=path/to/richpush measures another). Needs h2load.
#   Benchmarks/keyless_routes.sh
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -n ${BIN:-} ]] || swift build -c release --product richpush >/dev/null 2>&1
bin=$(realpath "${BIN:-.build/release/richpush}")
dir=$(mktemp -d)
$bin serve --port 0 --db $dir/db.sqlite --sandbox-dir $dir/sbx --admin-key adm-key-0001-abcdefgh > $dir/out.log 2>&1 &
pid=$!
trap 'kill $pid; rm -rf $dir' EXIT
for _ in $(seq 100); do grep -q '"listening"' $dir/out.log && break; sleep 0.1; done
base=$(grep -m1 '"listening"' $dir/out.log | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['listening'])")
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' /proc/$pid/stat; }
echo 5 > /proc/$pid/clear_refs
c0=$(cpu)
h2load --h1 -n 50000 -c 16 -t 1 "$base/sdk/web/sw.js" | grep -E "finished in|requests:|status codes"
c1=$(cpu)
python3 - "$base" <<'PY' > $dir/pre.txt
import http.client, sys, time, urllib.parse, threading
u = urllib.parse.urlsplit(sys.argv[1]); n = 20000; counts = {}; lock = threading.Lock()
def run():
    c = http.client.HTTPConnection(u.hostname, u.port)
    for _ in range(n // 8):
        c.request("OPTIONS", "/v1/apps/app_made_up/devices", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
        r = c.getresponse(); r.read()
        with lock: counts[r.status] = counts.get(r.status, 0) + 1
t0 = time.time(); ts = [threading.Thread(target=run) for _ in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
print(f"preflights: {sum(counts.values())} in {time.time()-t0:.1f} s, statuses {counts}")
PY
c2=$(cpu)
cat $dir/pre.txt
python3 -c "print('sdk GET: %.1f ms CPU per 1,000; preflight: %.1f ms CPU per 1,000; peak RSS %d MB' % (($c1-$c0)/$ticks*1000/50, ($c2-$c1)/$ticks*1000/20, $(awk '/VmHWM/ {print $2}' /proc/$pid/status)/1024))"
