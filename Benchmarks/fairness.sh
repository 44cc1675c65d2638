#!/usr/bin/env bash
# Fairness between apps on one node (SQLite), the emulators in their own process (`richpush sandbox`): app A sends
# one notification to DEVICES iOS devices while app B sends to one device every second; each of B's sends is timed
# from its API call to the APNs emulator's receipt. Prints B's p50, p99 and max with A's throughput (delivered per
# second, from the send's call to its last delivery).
#   [WEBHOOKS=hang] Benchmarks/fairness.sh [DEVICES=1000000]
# WEBHOOKS=hang: app A has a webhook endpoint (every event type) at a receiver that never answers, and app B one at a
# receiver that answers: A's hanging receiver must slow neither A's deliveries nor B's, nor B's webhooks.
# BIN=path/to/richpush and BENCH=path/to/richpush-bench measure other builds (a debug build for a small run); the
# default is a release build; SANDBOX_BIN=path runs another build's emulators (an older node against today's emulators,
# whose lookup by token no longer scans every kept notification). Everything shares this machine's cores: the node,
# its workers and the emulator process.
set -euo pipefail
cd "$(dirname "$0")/.."
devices=${1:-1000000}
if [[ -z ${BIN:-} ]]; then
  swift build -c release --product richpush >/dev/null
  swift build -c release --product richpush-bench >/dev/null
fi
bin=${BIN:-$PWD/.build/release/richpush}
bench=${BENCH:-$PWD/.build/release/richpush-bench}
source Benchmarks/lib/sandbox.sh
scratch_and_cleanup

start_sandbox "$bin"
admin=fairness-admin-key-01
"$bin" serve --port 0 --db "$dir/rp.sqlite" --sandbox-dir "$dir/sandbox" \
  --external-apns-port "$apns_port" --external-fcm-port "$fcm_port" --admin-key "$admin" --rate-limit 1000000 > "$dir/serve.log" 2>&1 &
server=$!
pids+=($server)
for _ in $(seq 200); do grep -q '"listening"' "$dir/serve.log" 2>/dev/null && break; sleep 0.1; done
base=$(grep -m1 '"listening"' "$dir/serve.log" | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['listening'])")
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1], {}, {'d': d}))" "$1"; }
created_a=$(curl -s -XPOST "$base/v1/apps" -H "Authorization: Bearer $admin" -d '{"name":"Big sender","bundle_id":"com.example.app"}')
created_b=$(curl -s -XPOST "$base/v1/apps" -H "Authorization: Bearer $admin" -d '{"name":"One device","bundle_id":"com.example.app"}')
app_a=$(json "d['app']['id']" <<<"$created_a")
key_a=$(json "d['api_key']" <<<"$created_a")
app_b=$(json "d['app']['id']" <<<"$created_b")
key_b=$(json "d['api_key']" <<<"$created_b")
if [[ ${WEBHOOKS:-} == hang ]]; then
  hooks=$(python3 -c "import json; print(json.load(open('$dir/sandbox/sandbox.json'))['webhooks']['url'])")
  curl -s -o /dev/null -XPOST "$base/v1/apps/$app_a/webhooks" -H "Authorization: Bearer $key_a" -d '{"url":"'"$hooks"'a"}'
  curl -s -o /dev/null -XPOST "$base/v1/apps/$app_b/webhooks" -H "Authorization: Bearer $key_b" -d '{"url":"'"$hooks"'b"}'
  curl -s -o /dev/null -XPOST "$sandbox_admin/webhooks/mode" -d '{"hook":"a","hang":1}'
fi
echo "fairness: app A sends to $devices devices while app B sends to one device every second; $(nproc) cores shared by the node and the emulator process"
echo "  $("$bench" seed-devices --db "$dir/rp.sqlite" --app "$app_a" --devices "$devices")"
cat > "$dir/fairness.json" <<JSON
{"base": "$base", "app_b": "$app_b", "key_b": "$key_b", "sandbox_admin": "$sandbox_admin", "devices": $devices,
 "timeout": 3600}
JSON
status=$(curl -s -o "$dir/sent.json" -w '%{http_code}' -XPOST "$base/v1/apps/$app_a/notifications" -H "Authorization: Bearer $key_a" \
  -d '{"title":"Flash sale","body":"40% off until midnight","audience":{"all":true}}')
[[ $status == 202 ]] || { echo "A's send was answered $status: $(cat "$dir/sent.json")"; exit 1; }
python3 Benchmarks/lib/fairness.py "$dir/fairness.json" > "$dir/result.json"
python3 - "$dir/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
a, b = r["a"], r["b"]
print("  A: %d of %d delivered in %.1f s = %d/s" % (a["delivered"], a["devices"], a["seconds"], a["per_second"]))
print("  B: %d sends (statuses %s), %d received, %d lost; API call to the emulator's receipt p50 %s ms, p99 %s ms, max %s ms"
      % (b["sends"], b["statuses"], b["received"], b["lost"], b["p50_ms"], b["p99_ms"], b["max_ms"]))
PY
if [[ ${WEBHOOKS:-} == hang ]]; then
  curl -s "$sandbox_admin/webhooks/received?hook=b&limit=10000" | python3 -c "
import json, sys
r = json.load(sys.stdin)
print('  webhooks: A\'s receiver left %d requests unanswered; B\'s received %d events in %d requests' % (r['hung'], r['events'], r['count']))"
fi
