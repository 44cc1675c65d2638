#!/usr/bin/env bash
# The delivery path of one node on SQLite, with the emulators in their own process (`richpush sandbox`): DEVICES iOS
# devices registered, one notification sent to all of them through the API, timed until the last is delivered to the
# APNs emulator (the fan-out into the queue included). Prints the time, deliveries per second, the node's CPU seconds
# per 1,000 deliveries (from /proc: steadier than wall time) and its peak memory; then, in the same run, what
# RichPushAPNs alone sends to the same emulator with the worker's concurrency, and the ratio.
#   [BATCH=500] [LANES=2] [WEBHOOKS=1] [BARE=no] [PIN=1] Benchmarks/delivery.sh [DEVICES=1000000] [CONCURRENCY=200]
# WEBHOOKS=1: the app has a webhook endpoint hearing every event type, at the sandbox's receiver; the node's CPU is
# then counted until the receiver has every delivery's event (run once without and once with, in one sitting).
# PIN=1: the node on core 0 and the emulator process (the receiver with it) on core 1, so that a pair of runs compares
# the node's own work: without it, what the receiver does runs between the node's threads on the same cores and the
# node's unchanged code costs more CPU (a profile of such a pair: the receipt's stamp 23 % more per delivery).
# Release build (BIN=path/to/richpush and BENCH=path/to/richpush-bench measure other builds). Everything shares this
# machine's cores: the node, its workers and the emulator process.
set -euo pipefail
cd "$(dirname "$0")/.."
devices=${1:-1000000}
concurrency=${2:-200}
if [[ -z ${BIN:-} ]]; then
  swift build -c release --product richpush >/dev/null
  swift build -c release --product richpush-bench >/dev/null
fi
bin=${BIN:-$PWD/.build/release/richpush}
bench=${BENCH:-$PWD/.build/release/richpush-bench}
source Benchmarks/lib/sandbox.sh
scratch_and_cleanup
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
delivered() { curl -s "$base/metrics" | awk '/^richpush_queue_deliveries\{state="delivered"\}/ {print $2 + 0}'; }

[[ -n ${PIN:-} ]] && export SANDBOX_CPU=1
start_sandbox "$bin" --record-limit-small
admin=bench-admin-key-0001
cat > "$dir/config.json" <<JSON
{"workers": {"batch_size": ${BATCH:-500}, "concurrency": $concurrency, "lanes": ${LANES:-2}}}
JSON
${PIN:+taskset -c 0} "$bin" serve --port 0 --config "$dir/config.json" --db "$dir/rp.sqlite" --sandbox-dir "$dir/sandbox" \
  --external-apns-port "$apns_port" --external-fcm-port "$fcm_port" --admin-key "$admin" --rate-limit 1000000 > "$dir/serve.log" 2>&1 &
server=$!
pids+=($server)
for _ in $(seq 200); do grep -q '"listening"' "$dir/serve.log" 2>/dev/null && break; sleep 0.1; done
base=$(grep -m1 '"listening"' "$dir/serve.log" | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['listening'])")
created=$(curl -s -XPOST "$base/v1/apps" -H "Authorization: Bearer $admin" -d '{"name":"Bench","bundle_id":"com.example.app"}')
app=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['app']['id'])" "$created")
key=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['api_key'])" "$created")
# The picture the send carries, hosted by the node itself (a hosted URL is judged without a fetch).
python3 -c "import sys; sys.stdout.buffer.write(bytes([0xFF,0xD8,0xFF,0xE0,0,16]) + b'JFIF' + bytes([0,1,1,0,0,1,0,1,0,0]) + bytes(20000))" > "$dir/sale.jpg"
media=$(curl -s -XPOST "$base/v1/media" -H "Authorization: Bearer $key" --data-binary @"$dir/sale.jpg" | python3 -c "import json,sys; print(json.load(sys.stdin)['url'])")
if [[ -n ${WEBHOOKS:-} ]]; then
  hook_url=$(python3 -c "import json; print(json.load(open('$dir/sandbox/sandbox.json'))['webhooks']['url'])")bench
  curl -s -o /dev/null -XPOST "$base/v1/apps/$app/webhooks" -H "Authorization: Bearer $key" -d '{"url":"'"$hook_url"'"}'
fi
received() { curl -s "$sandbox_admin/webhooks/received?limit=1" | python3 -c "import json,sys; print(json.load(sys.stdin)['events'])"; }
echo "delivery: $devices devices, one notification to all; worker concurrency $concurrency; ${WEBHOOKS:+webhooks on (every event type, batches of 100); }$(nproc) cores shared by the node and the emulator process"
echo "  $("$bench" seed-devices --db "$dir/rp.sqlite" --app "$app" --devices "$devices")"
before=$(cpu "$server")
start=$(date +%s.%N)
status=$(curl -s -o "$dir/sent.json" -w '%{http_code}' -XPOST "$base/v1/apps/$app/notifications" -H "Authorization: Bearer $key" \
  -d '{"title":"Flash sale","body":"40% off until midnight","media":"'"$media"'","audience":{"all":true}}')
[[ $status == 202 ]] || { echo "the send was answered $status: $(cat "$dir/sent.json")"; exit 1; }
if [[ -n ${PERF_OUT:-} ]]; then  # profile the node for PERF_SECONDS (20) of the send: PERF_OUT=/tmp/delivery.perf
  perf record -F 499 ${PERF_CALLGRAPH:--g} -p "$server" -o "$PERF_OUT" -- sleep "${PERF_SECONDS:-20}" >/dev/null 2>&1 &
fi
n=0
# Once a second: each look at /metrics counts the queue by state, which the node pays for.
for _ in $(seq 1200); do
  n=$(delivered)
  [[ ${n:-0} -ge $devices ]] && break
  sleep 1
done
end=$(date +%s.%N)
if [[ -n ${WEBHOOKS:-} ]]; then
  for _ in $(seq 1200); do
    [[ $(received) -ge $devices ]] && break
    sleep 1
  done
  echo "  the receiver had every delivery's event $(python3 -c "print('%.1f' % ($(date +%s.%N) - $end))") s after the last delivery"
fi
after=$(cpu "$server")
peak=$(awk '/VmHWM/ {print $2}' "/proc/$server/status")
rate=$(python3 -c "print('%.0f' % ($n / ($end - $start)))")
python3 -c "print('  the node: %d delivered in %.1f s = %s/s; CPU %.3f s per 1,000 deliveries; peak memory %.1f MB' % ($n, $end - $start, '$rate', ($after - $before) / $ticks / max($n, 1) * 1000, $peak / 1024))"
[[ ${BARE:-yes} == no ]] && exit 0  # BARE=no: the node alone (pairs of runs compare the node with itself)
bare=$("$bench" apns --sandbox-dir "$dir/sandbox" --apns-port "$apns_port" --count 200000 --concurrency "$concurrency" | awk '/RichPushAPNs alone/ {for (i = 1; i <= NF; i++) if ($i == "notifications/s") print $(i - 1)}')
python3 -c "print('  RichPushAPNs alone to the same emulator, %d in flight: %s/s; the node delivers %.2f of it' % ($concurrency, '$bare', $rate / float('$bare')))"
