#!/usr/bin/env bash
# Live Activities through one node: ACTIVITIES activities (their update tokens registered through the API), each
# updated once a second for SECONDS, one API request per update (audience.live_activity) or BATCH updates per
# request (POST /live/updates), on SQLite, with the APNs
# emulator in its own process (`richpush sandbox`). Prints the API's answer times, how far the rounds fell behind the
# clock, what the emulator received and when, whether any update arrived after a later one of its activity, what the
# emulated devices show, and the node's CPU per 1,000 updates (from /proc).
#   [PERF_OUT=FILE] Benchmarks/live_activities.sh [ACTIVITIES=10000] [SECONDS=60] [CONNECTIONS=128] [BATCH=1]
# Release build. The node, its workers, the load generator and the emulator share this machine's cores.
set -euo pipefail
cd "$(dirname "$0")/.."
activities=${1:-10000}
seconds=${2:-60}
connections=${3:-128}
batch=${4:-1}
# BIN=path/to/richpush and BENCH=path/to/richpush-bench measure other builds (SANDBOX_BIN: the emulators').
if [[ -z ${BIN:-} ]]; then
  swift build -c release --product richpush >/dev/null
  swift build -c release --product richpush-bench >/dev/null
fi
bin=$(realpath "${BIN:-$PWD/.build/release/richpush}")
bench=$(realpath "${BENCH:-$PWD/.build/release/richpush-bench}")
source Benchmarks/lib/sandbox.sh
scratch_and_cleanup
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }

start_sandbox "$bin"
admin=bench-admin-key-0001
"$bin" serve --port 0 --db "$dir/rp.sqlite" --sandbox-dir "$dir/sandbox" \
  --external-apns-port "$apns_port" --external-fcm-port "$fcm_port" --admin-key "$admin" --rate-limit 1000000 ${SERVE_ARGS:-} > "$dir/serve.log" 2>&1 &
server=$!
pids+=($server)
for _ in $(seq 200); do grep -q '"listening"' "$dir/serve.log" 2>/dev/null && break; sleep 0.1; done
base=$(grep -m1 '"listening"' "$dir/serve.log" | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['listening'])")
created=$(curl -s -XPOST "$base/v1/apps" -H "Authorization: Bearer $admin" -d '{"name":"Bench","bundle_id":"com.example.app"}')
app=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['app']['id'])" "$created")
key=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['api_key'])" "$created")
echo "live_activities: $activities activities, each updated once a second for $seconds s through one node (SQLite); $([[ $batch == 1 ]] && echo "one request per update" || echo "$batch updates per request"); $connections connections; $(nproc) cores shared by the node, the load generator and the emulator process"
before=$(cpu "$server")
sandbox_before=$(cpu "${pids[0]}")
if [[ -n ${PERF_OUT:-} ]]; then  # profile the node for 20 s of the rounds: PERF_OUT=/tmp/live.perf
  (sleep 3; perf record -F ${PERF_HZ:-499} -g -p "$server" -o "$PERF_OUT" -- sleep 20 >/dev/null 2>&1) &
fi
# Sends in flight from the node to the push service, sampled each second while the rounds run.
(while sleep 1; do
  curl -s "$base/v1/apps/$app/push-services" -H "Authorization: Bearer $key" \
    | python3 -c "import json,sys; print(sum(o['in_flight'] for o in json.load(sys.stdin).get('push_services', [])))" 2>/dev/null
done > "$dir/in-flight.txt") &
sampler=$!
"$bench" live-updates --base "$base" --key "$key" --app "$app" --sandbox-admin "$sandbox_admin" \
  --activities "$activities" --seconds "$seconds" --connections "$connections" --batch "$batch"
kill $sampler 2>/dev/null || true
after=$(cpu "$server")
# How the worker took the updates from the queue: claims made, and deliveries per claim.
curl -s "$base/metrics" > "$dir/metrics.txt"
claims=$(awk '/^richpush_claim_seconds_count/ {n += $2} END {print n + 0}' "$dir/metrics.txt")
claim_seconds=$(awk '/^richpush_claim_seconds_sum/ {n += $2} END {print n + 0}' "$dir/metrics.txt")
deferred=$(awk -F'[{}" ]+' '/^richpush_deliveries_deferred_total/ {printf "%s%s %s", sep, $3, $NF; sep=", "}' "$dir/metrics.txt")
sandbox_after=$(cpu "${pids[0]}")
peak=$(awk '/VmHWM/ {print $2}' "/proc/$server/status")
python3 -c "
n = $activities * $seconds
print('  the node: CPU %.1f s in all = %.1f ms per 1,000 updates (token registration included); peak memory %.0f MB' % (($after - $before) / $ticks, ($after - $before) / $ticks / n * 1e6, $peak / 1024))
print('  the worker: %d claims, %.1f updates per claim, %.1f ms per claim; given back untried: %s' % ($claims, n / max(1, $claims), $claim_seconds * 1000 / max(1, $claims), '${deferred:-none}'))
f = [int(x) for x in open('$dir/in-flight.txt').read().split()]
print('  sends in flight to the push service, sampled each second: mean %.0f, max %d' % (sum(f) / max(1, len(f)), max(f or [0])))
print('  the emulator process: CPU %.1f s' % (($sandbox_after - $sandbox_before) / $ticks))"
