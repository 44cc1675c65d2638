#!/usr/bin/env bash
# Webhooks under a receiver that misbehaves: one notification to DEVICES iOS devices, each delivery's event sent to
# the sandbox's webhook receiver, which fails FAIL of the requests (500, nothing recorded) and leaves HANG of them
# unanswered (nothing recorded; the node gives up after timeout_seconds). With KILL=1 a node is killed with SIGKILL
# once half the events arrived, and started again on the same database. Prints, from what the receiver recorded:
# every event there at least once (the deliveries' and the notification's completion), the duplicates, whether each
# event's first arrival came in the order the events were recorded, and the time from the send to the last event.
#   [MODE=sqlite|postgres] [KILL=1] [FAIL=0.3] [HANG=0.05] [BATCH=1000] Benchmarks/webhooks.sh [DEVICES=100000]
# MODE=postgres runs two nodes on one PostgreSQL (Debian's postgresql), the send through the first; the kill takes
# the first. Release build (BIN=path/to/richpush and BENCH=path/to/richpush-bench measure other builds).
set -euo pipefail
cd "$(dirname "$0")/.."
devices=${1:-100000}
mode=${MODE:-sqlite}
if [[ -z ${BIN:-} ]]; then
  swift build -c release --product richpush >/dev/null
  swift build -c release --product richpush-bench >/dev/null
fi
bin=$(realpath "${BIN:-.build/release/richpush}")
bench=$(realpath "${BENCH:-.build/release/richpush-bench}")
source Benchmarks/lib/sandbox.sh
source Scripts/lib/postgres.sh
scratch_and_cleanup
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; stop_postgres; wait 2>/dev/null || true; rm -rf "$dir"' EXIT

start_sandbox "$bin" --record-limit-small
admin=webhooks-admin-key-01
cat > "$dir/config.json" <<JSON
{"lease_seconds": 10, "webhooks": {"timeout_seconds": 2}}
JSON
if [[ $mode == postgres ]]; then
  start_postgres "$dir" synchronous_commit=off shared_buffers=256MB max_connections=200
  "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U richpush -d postgres -Atc "CREATE DATABASE soak" >/dev/null
  database="postgres://richpush@127.0.0.1:$PG_PORT/soak?sslmode=disable"
  nodes=2
else
  database="$dir/rp.sqlite"
  nodes=1
fi
ports=()
for i in $(seq "$nodes"); do ports+=("$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"); done
node_pids=()
# start_node I: node I in its own folder, on its port, the same database and credentials key as the others.
start_node() {
  local i=$1
  mkdir -p "$dir/node-$i"
  (cd "$dir/node-$i" && RICHPUSH_CREDENTIALS_KEY_FILE="$dir/credentials.key" exec "$bin" serve --port "${ports[$((i - 1))]}" \
    --config "$dir/config.json" --database "$database" --node-id "node-$i" --sandbox-dir "$dir/sandbox" \
    --external-apns-port "$apns_port" --external-fcm-port "$fcm_port" --admin-key "$admin" --rate-limit 1000000) \
    >> "$dir/node-$i.log" 2>&1 &
  node_pids[i]=$!
  pids+=($!)
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:${ports[$((i - 1))]}/health/live" >/dev/null && return 0; sleep 0.1; done
  echo "node $i did not start: $(tail -5 "$dir/node-$i.log")"
  exit 1
}
for i in $(seq "$nodes"); do start_node "$i"; done
base="http://127.0.0.1:${ports[0]}"
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1], {}, {'d': d}))" "$1"; }
created=$(curl -s -XPOST "$base/v1/apps" -H "Authorization: Bearer $admin" -d '{"name":"Soak","bundle_id":"com.example.app"}')
app=$(json "d['app']['id']" <<<"$created")
key=$(json "d['api_key']" <<<"$created")
if [[ $mode == postgres ]]; then
  "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U richpush -d soak -Atc "INSERT INTO devices (app_id, token, platform, provider, updated_at)
    SELECT '$app', lpad(to_hex(i), 64, '0'), 'ios', 'apns', now() FROM generate_series(1, $devices) AS i" >/dev/null
  seeded="registered $devices devices"
else
  seeded=$("$bench" seed-devices --db "$database" --app "$app" --devices "$devices")
fi
hook_url=$(python3 -c "import json; print(json.load(open('$dir/sandbox/sandbox.json'))['webhooks']['url'])")soak
made=$(curl -s -XPOST "$base/v1/apps/$app/webhooks" -H "Authorization: Bearer $key" \
  -d '{"url":"'"$hook_url"'","batch_size":'"${BATCH:-1000}"',"events":["delivery.delivered","delivery.failed","notification.completed"]}')
secret=$(json "d['secret']" <<<"$made")
curl -s -XPOST "$sandbox_admin/webhooks/secrets" -d '{"hook":"soak","secret":"'"$secret"'"}' >/dev/null
curl -s -XPOST "$sandbox_admin/webhooks/mode" -d '{"fail":'"${FAIL:-0.3}"',"hang":'"${HANG:-0.05}"'}' >/dev/null
echo "webhooks: $devices deliveries, the receiver failing ${FAIL:-0.3} and hanging ${HANG:-0.05} of the requests; $mode, $nodes node(s)${KILL:+, one killed with SIGKILL halfway}; $(nproc) cores shared by everything"
echo "  $seeded"
start=$(date +%s.%N)
sent=$(curl -s -XPOST "$base/v1/apps/$app/notifications" -H "Authorization: Bearer $key" -d '{"title":"Soak","audience":{"all":true}}')
notification=$(json "d['id']" <<<"$sent")
# What the receiver recorded, summed up (RESULT: events unique and in all, completions, first arrivals in order).
summary() {
  curl -s "$sandbox_admin/webhooks/received?hook=soak&limit=10000" | python3 -c "
import json, sys
r = json.load(sys.stdin)
ids, firsts, done, verified = [], {}, 0, all(q.get('verified') for q in r['requests'])
for q in r['requests']:
    for e in q['events']:
        ids.append(e['id'])
        if e['id'] not in firsts: firsts[e['id']] = e
        if e['type'] == 'notification.completed': done = 1
# In order: each delivery's events as they were recorded (its outcomes are successive transactions), and the
# notification's completion after all of them.
by_delivery, ordered = {}, True
for i, e in firsts.items():
    d = e.get('delivery_id')
    if d is None: continue
    if by_delivery.get(d, -1) > int(i[4:]): ordered = False
    by_delivery[d] = int(i[4:])
last = list(firsts.values())[-1]['type'] if firsts else ''
print(len(firsts), len(ids), done, int(ordered), last, int(verified), len(r['requests']), r['failed'], r['hung'])
"
}
killed=0
while true; do
  read -r unique total done ordered last verified requests failed hung < <(summary)
  if [[ -n ${KILL:-} && $killed == 0 && $unique -ge $((devices / 2)) ]]; then
    { kill -9 "${node_pids[1]}"; wait "${node_pids[1]}"; } 2>/dev/null || true
    killed=1
    echo "  SIGKILL to node 1 at $unique events received"
    sleep 1
    start_node 1
  fi
  [[ $done == 1 && $unique -ge $((devices + 1)) ]] && break
  if python3 -c "import sys; sys.exit(0 if $(date +%s.%N) - $start > ${TIMEOUT:-1800} else 1)"; then
    echo "  timed out: $unique of $((devices + 1)) events"
    break
  fi
  sleep 2
done
end=$(date +%s.%N)
python3 - "$unique" "$total" "$devices" "$ordered" "$last" "$verified" "$requests" "$failed" "$hung" "$start" "$end" <<'PY'
import sys
unique, total, devices, ordered, last, verified, requests, failed, hung = map(lambda v: int(v) if v.isdigit() else v, sys.argv[1:10])
start, end = float(sys.argv[10]), float(sys.argv[11])
expected = devices + 1
print("  every event at least once: %s (%d of %d unique); duplicates %d = %.2f %%" % (
    "yes" if unique == expected else "NO", unique, expected, total - unique, 100.0 * (total - unique) / max(unique, 1)))
print("  each delivery's events in the order recorded: %s; the completion after every delivery's: %s; every signature verified: %s" % (
    "yes" if ordered else "NO", "yes" if last == "notification.completed" else "NO (%s)" % last, "yes" if verified else "NO"))
print("  %d requests recorded, %d answered with an error, %d left unanswered; %.1f s from the send to the last event" % (
    requests, failed, hung, end - start))
PY
