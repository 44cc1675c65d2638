#!/usr/bin/env bash
# The server's accept rate: wrk POSTs notifications (one target each) to a release `richpush serve` for 10 s, then
# waits for the workers to deliver the accepted ones to the sandbox emulators. Prints wrk's rate and latency
# distribution, the sends accepted (2xx: only those are counted as sends) and those refused by status and error code,
# and the end-to-end delivery rate. Needs wrk (apt-get install wrk).
#   Benchmarks/server_accept.sh        (BIN=path/to/richpush to measure a given build)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk"; exit 1; }
[[ -n ${BIN:-} ]] || swift build -c release --product richpush >/dev/null
bin=$(realpath "${BIN:-.build/release/richpush}")
dir=$(mktemp -d)
trap 'kill $server 2>/dev/null || true; rm -rf "$dir"' EXIT
admin=bench-admin-key-0001
# The rate limit is per key; the benchmark measures the server, so it is raised out of the way.
"$bin" serve --port 0 --db "$dir/rp.sqlite" --sandbox-dir "$dir/sandbox" --admin-key "$admin" --rate-limit 1000000 > "$dir/serve.log" 2>&1 &
server=$!
for _ in $(seq 100); do grep -q listening "$dir/serve.log" 2>/dev/null && break; sleep 0.1; done
base=$(grep -m1 '"listening"' "$dir/serve.log" | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['listening'])")
created=$(curl -s -XPOST "$base/v1/apps" -H "Authorization: Bearer $admin" -d '{"name":"Bench","bundle_id":"com.example.app"}')
app=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['app']['id'])" "$created")
key=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['api_key'])" "$created")
token=$(printf 'ab%.0s' $(seq 32))
# The picture the sends carry, hosted by the server itself (a hosted URL is judged without a fetch).
python3 -c "import sys; sys.stdout.buffer.write(bytes([0xFF,0xD8,0xFF,0xE0,0,16]) + b'JFIF' + bytes([0,1,1,0,0,1,0,1,0,0]) + bytes(20000))" > "$dir/sale.jpg"
media=$(curl -s -XPOST "$base/v1/media" -H "Authorization: Bearer $key" --data-binary @"$dir/sale.jpg" | python3 -c "import json,sys; print(json.load(sys.stdin)['url'])")
curl -s -o /dev/null -XPOST "$base/v1/apps/$app/devices" -H "Authorization: Bearer $key" -d "{\"token\":\"$token\",\"platform\":\"ios\"}"
lua() {  # $1: extra JSON members of the message
cat > "$dir/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer $key"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"title":"Flash sale","body":"40% off","media":"$media","audience":{"tokens":["$token"]}$1}'
$(cat Benchmarks/lib/answers.lua)
done = function(summary, latency, requests)
  local accepted, refused = tally()
  local secs = summary.duration / 1e6
  io.write(string.format("accepted: %d sends in %.1f s = %.0f/s (2xx only); refused %s\n", accepted, secs, accepted / secs, refused))
  io.write(string.format("latency: p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
LUA
}
echo "server_accept: wrk -t1 -c32 -d10s, one target per request, 2 cores shared by wrk, the server, its workers and the emulators"
echo "1. accepting alone (each send scheduled 20 days ahead, so the workers stay idle):"
lua ',"send_at":'"$(($(date +%s) + 20 * 86400))"' '
wrk -t1 -c32 -d10s -s "$dir/post.lua" "$base/v1/apps/$app/notifications" | grep -E "^(accepted|latency)" | sed 's/^/   /'
echo "2. accepting while the workers deliver every notification to the APNs emulator in the same process:"
lua ''
start=$(date +%s.%N)
wrk -t1 -c32 -d10s -s "$dir/post.lua" "$base/v1/apps/$app/notifications" | grep -E "^(accepted|latency)" | sed 's/^/   /' | tee "$dir/phase2"
sent=$(awk '/accepted:/ {print $2}' "$dir/phase2")
# Wait until every notification phase 2 had accepted is delivered (the metrics show the queue by state); a refused
# send queued nothing, so none is waited for.
for _ in $(seq 600); do
  done_=$(curl -s "$base/metrics" | awk '/^richpush_queue_deliveries\{state="delivered"\}/ {print $2 + 0}')
  [ "${done_:-0}" -ge "$sent" ] && break
  sleep 0.2
done
end=$(date +%s.%N)
delivered=$(curl -s "$base/metrics" | awk '/^richpush_queue_deliveries\{state="delivered"\}/ {print $2}')
python3 -c "print('end to end: %d delivered to the APNs emulator in %.1f s from the first request = %.0f/s' % ($delivered, $end - $start, $delivered / ($end - $start)))"
# Accept to delivery: the server's histogram of seconds from a delivery being due (accepted, for an immediate
# send) to the provider's 200, read at quantiles by interpolating inside its buckets.
curl -s "$base/metrics" | python3 -c '
import re, sys
buckets = []
for line in sys.stdin:
    m = re.match(r"richpush_delivery_latency_seconds_bucket\{provider=\"apns\",le=\"([^\"]+)\"\} (\S+)", line)
    if m: buckets.append((float("inf") if m.group(1) == "+Inf" else float(m.group(1)), float(m.group(2))))
buckets.sort()
total = buckets[-1][1]
def q(p):
    want, lo, below = p * total, 0.0, 0.0
    for le, n in buckets:
        if n >= want:
            return (lo + (le - lo) * (want - below) / max(n - below, 1)) if le != float("inf") else lo
        lo, below = le, n
print("accept to delivery: p50 %.1f ms, p99 %.1f ms (%d deliveries, from the server histogram)" % (q(0.5) * 1000, q(0.99) * 1000, total))
'

