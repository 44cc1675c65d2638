#!/usr/bin/env bash
# What the console's live view costs a node while it sends: DEVICES iOS devices registered (SQLite, release build,
# the emulators in their own process as in delivery.sh), then two sends to all of them, each timed until the last is
# delivered to the APNs emulator:
#   1. with nobody watching;
#   2. with WATCHERS streams of the notification's events open from the 202 on (curl, as many browsers would; each
#      stream reads its events to the end); with BROWSERS=1, WATCHERS tabs of the console in headless Chromium (five
#      to a browser: a browser holds six connections to a server), signed in and on the Sent view before the send,
#      each turned to the notification's live view at the 202 (Benchmarks/lib/watch_in_browsers.py; the browsers
#      share the machine's two cores with the send, which a watcher's own computer would not).
# Prints each send's node CPU (from /proc), the difference, and what the live views' turns themselves took
# (richpush_insight_turn_seconds_total: every read and write of the views, whatever the watchers), as a share of
# the send's CPU.
#   Benchmarks/insight_watchers.sh [DEVICES=100000] [WATCHERS=50]
set -euo pipefail
cd "$(dirname "$0")/.."
devices=${1:-100000}
watchers=${2:-50}
swift build -c release --product richpush >/dev/null
swift build -c release --product richpush-bench >/dev/null
bin=$PWD/.build/release/richpush
bench=$PWD/.build/release/richpush-bench
source Benchmarks/lib/sandbox.sh
scratch_and_cleanup
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
metric() { curl -s "$base/metrics" | awk -v m="$1" '$1 == m {print $2 + 0}'; }

start_sandbox "$bin" --record-limit-small
admin=bench-admin-key-0001
"$bin" serve --port 0 --db "$dir/rp.sqlite" --sandbox-dir "$dir/sandbox" \
  --external-apns-port "$apns_port" --external-fcm-port "$fcm_port" --admin-key "$admin" --rate-limit 1000000 > "$dir/serve.log" 2>&1 &
server=$!
pids+=($server)
for _ in $(seq 200); do grep -q '"listening"' "$dir/serve.log" 2>/dev/null && break; sleep 0.1; done
base=$(grep -m1 '"listening"' "$dir/serve.log" | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['listening'])")
created=$(curl -s -XPOST "$base/v1/apps" -H "Authorization: Bearer $admin" -d '{"name":"Bench","bundle_id":"com.example.app"}')
app=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['app']['id'])" "$created")
key=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['api_key'])" "$created")
echo "insight: $devices devices, two sends to all; $watchers live views on the second; $(nproc) cores shared by the node, the emulator process and the watchers"
echo "  $("$bench" seed-devices --db "$dir/rp.sqlite" --app "$app" --devices "$devices")"

send() {  # label, watchers
  local label=$1 n=$2 before after start end id status count turns0 turns1 secs0 secs1
  if [[ -n ${BROWSERS:-} && $n -gt 0 ]]; then
    mkfifo "$dir/tabs.in"
    .venv/bin/python3 Benchmarks/lib/watch_in_browsers.py "$base" "$key" "$app" "$n" < "$dir/tabs.in" > "$dir/tabs.out" 2>&1 &
    pids+=($!)
    exec 7> "$dir/tabs.in"
    for _ in $(seq 600); do grep -q '^ready' "$dir/tabs.out" 2>/dev/null && break; sleep 0.5; done
    grep -q '^ready' "$dir/tabs.out" || { echo "the browser's tabs did not open: $(tail -5 "$dir/tabs.out")"; exit 1; }
  fi
  turns0=$(metric richpush_insight_turns_total); secs0=$(metric richpush_insight_turn_seconds_total)
  before=$(cpu "$server")
  start=$(date +%s.%N)
  status=$(curl -s -o "$dir/sent.json" -w '%{http_code}' -XPOST "$base/v1/apps/$app/notifications" -H "Authorization: Bearer $key" \
    -d '{"title":"Turnout","body":"By hour","chart":{"type":"bar","values":[3,5,4]},"audience":{"all":true}}')
  [[ $status == 202 ]] || { echo "the send was answered $status: $(cat "$dir/sent.json")"; exit 1; }
  id=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['id'])" "$dir/sent.json")
  local streams=()
  if [[ -n ${BROWSERS:-} && $n -gt 0 ]]; then
    echo "$id" >&7
  else
    for _ in $(seq "$n"); do
      curl -sN -H "Authorization: Bearer $key" "$base/v1/apps/$app/notifications/$id/events?seconds=3600" > /dev/null &
      streams+=($!)
      pids+=($!)
    done
  fi
  for _ in $(seq 1200); do
    count=$(curl -s "$base/v1/apps/$app/notifications/$id?limit=1" -H "Authorization: Bearer $key" |
      python3 -c "import json,sys; print(json.load(sys.stdin).get('counts', {}).get('delivered', 0))")
    [[ $count -ge $devices ]] && break
    sleep 1
  done
  end=$(date +%s.%N)
  after=$(cpu "$server")
  turns1=$(metric richpush_insight_turns_total); secs1=$(metric richpush_insight_turn_seconds_total)
  for p in "${streams[@]}"; do kill "$p" 2>/dev/null || true; done
  if [[ -n ${BROWSERS:-} && $n -gt 0 ]]; then
    for _ in $(seq 600); do grep -q '^watching' "$dir/tabs.out" && break; sleep 0.5; done
    echo "    the browser: $(grep -m1 '^ready' "$dir/tabs.out") tabs signed in; $(grep -m1 '^watching' "$dir/tabs.out" || echo "not every tab drew the view: $(tail -3 "$dir/tabs.out")") drew the live view"
    exec 7>&-
  fi
  python3 - "$label" "$count" "$start" "$end" "$before" "$after" "$ticks" "${turns0:-0}" "${turns1:-0}" "${secs0:-0}" "${secs1:-0}" "$n" <<'PY'
import sys
label, count, start, end, before, after, ticks, t0, t1, s0, s1, n = sys.argv[1:]
cpu = (float(after) - float(before)) / float(ticks)
print("  %s: %s delivered in %.1f s; node CPU %.2f s" % (label, count, float(end) - float(start), cpu))
if int(n):
    busy = float(s1) - float(s0)
    print("    %s live views: %d turns (one reader for all of them), %.3f s in turns = %.2f %% of this send's CPU" % (n, float(t1) - float(t0), busy, busy / cpu * 100))
open("/tmp/insight-bench-%s" % ("b" if int(n) else "a"), "w").write(str(cpu))
PY
}
send "send 1, nobody watching" 0
sleep 3
send "send 2, $watchers watching" "$watchers"
python3 -c "a = float(open('/tmp/insight-bench-a').read()); b = float(open('/tmp/insight-bench-b').read()); print('  node CPU with the views / without: %.3f (difference %+.2f s = %+.1f %% of the send; includes the run-to-run noise of this shared machine)' % (b / a, b - a, (b - a) / a * 100))"
