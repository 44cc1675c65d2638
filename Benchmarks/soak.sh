#!/usr/bin/env bash
# The soak: a legitimate rich send to DEVICES iOS devices delivering while nine hostile streams run for its whole
# length, against one `richpush serve` on SQLite with its default limits, the emulators in their own process:
#   - a receipt flood: 15 KB reports, each with 64 made-up skip reasons, posted again and again to the send's own
#     receipt addresses (read from the payloads the APNs emulator received);
#   - an open flood: opens and dismissals with made-up actions to the same addresses (one counts per delivery), and
#     to forged ones;
#   - live views: 50 streams of the send's events held open throughout;
#   - pipelined large media: `GET /health/live` and `GET` of a SIZE_MB video in one write, read to the last byte;
#   - random bearers: `GET /v1/apps/{app}` with a new made-up key each time;
#   - heavy read-scope queries: device searches and pages, notification lists, the send's outcomes;
#   - a push service that never answers: a second app's 1,000 web subscriptions at the sandbox's Web Push service,
#     silenced (TLS accepted, nothing ever answered), sent to every 10 s;
#   - a public-key flood: the send's app's register key (the one its pages ship) registering new devices at the
#     longest fields, each request from another visitor (X-Forwarded-For, loopback being a trusted proxy);
#   - a stream holder: that second app's read key opening 300 live views of its own notification and holding them;
# beside a legitimate caller (the console's look at the send, a dry run, the app: five rounds a second), timed, and a
# third app's one-device send every second, timed from the API call to the APNs emulator's receipt.
# Reports the send's outcomes (lost: deliveries without one), the server's peak resident memory (VmHWM, reset once
# the send is accepted), the p50/p99 of the legitimate calls and of the other app's sends, and what each stream got
# (statuses).
#   Benchmarks/soak.sh [DEVICES=100000] [SIZE_MB=49]
# BIN=path/to/richpush and BENCH=path/to/richpush-bench measure other builds; the default is a release build.
set -euo pipefail
cd "$(dirname "$0")/.."
devices=${1:-100000}
size_mb=${2:-49}
if [[ -z ${BIN:-} ]]; then
  swift build -c release --product richpush >/dev/null
  swift build -c release --product richpush-bench >/dev/null
fi
bin=${BIN:-$PWD/.build/release/richpush}
bench=${BENCH:-$PWD/.build/release/richpush-bench}
source Benchmarks/lib/sandbox.sh
scratch_and_cleanup

start_sandbox "$bin"
admin=soak-admin-key-0001
# Loopback is trusted as a proxy, so that the public-key flood can name a new visitor in each request
# (X-Forwarded-For), as a page's visitors would: the per-client rate is then no help, and the key's rate is what
# bounds the flood. Every other stream names none, and is counted as the one client it is.
echo '{"trusted_proxies": ["127.0.0.1"]}' > "$dir/config.json"
"$bin" serve --config "$dir/config.json" --port 0 --db "$dir/rp.sqlite" --sandbox-dir "$dir/sandbox" \
  --external-apns-port "$apns_port" --external-fcm-port "$fcm_port" --admin-key "$admin" > "$dir/serve.log" 2>&1 &
server=$!
pids+=($server)
for _ in $(seq 200); do grep -q '"listening"' "$dir/serve.log" 2>/dev/null && break; sleep 0.1; done
base=$(grep -m1 '"listening"' "$dir/serve.log" | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['listening'])")
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1], {}, {'d': d}))" "$1"; }
created=$(curl -s -XPOST "$base/v1/apps" -H "Authorization: Bearer $admin" -d '{"name":"Soak","bundle_id":"com.example.app"}')
app=$(json "d['app']['id']" <<<"$created")
key=$(json "d['api_key']" <<<"$created")
read_key=$(curl -s -XPOST "$base/v1/apps/$app/keys" -H "Authorization: Bearer $key" -d '{"scopes":["read"]}' | json "d['api_key']")
public_key=$(curl -s -XPOST "$base/v1/apps/$app/keys" -H "Authorization: Bearer $key" -d '{"scopes":["register"]}' | json "d['api_key']")
# The send's picture, and the large video of the media stream (uploaded with the admin key, which no quota counts).
python3 -c "import sys; sys.stdout.buffer.write(bytes([0xFF,0xD8,0xFF,0xE0,0,16]) + b'JFIF' + bytes([0,1,1,0,0,1,0,1,0,0]) + bytes(20000))" > "$dir/sale.jpg"
media=$(curl -s -XPOST "$base/v1/media" -H "Authorization: Bearer $key" --data-binary @"$dir/sale.jpg" | json "d['url']")
python3 - "$dir/clip.mp4" "$size_mb" <<'PY'
import sys, struct
path, mb = sys.argv[1], int(sys.argv[2])
head = struct.pack(">I", 24) + b"ftypisom" + struct.pack(">I", 0) + b"iso2mp41" + struct.pack(">I", 8) + b"free"
with open(path, "wb") as f:
    f.write(head); f.write((bytes(range(256)) * (mb * 4096))[: mb * 1_000_000 - len(head)])
PY
big=$(curl -s -XPOST "$base/v1/media" -H "Authorization: Bearer $admin" --data-binary @"$dir/clip.mp4" | json "d['url']")
echo "soak: $devices devices, one rich notification to all, nine hostile streams beside it; $(nproc) cores shared by the node, the emulators and every client"
echo "  $("$bench" seed-devices --db "$dir/rp.sqlite" --app "$app" --devices "$devices")"
# The hanging push service's app: a VAPID key, 1,000 subscriptions at the sandbox's Web Push service registered as its
# web devices; then the service falls silent. And the app whose one-device sends are timed.
flood=$(curl -s -XPOST "$base/v1/apps" -H "Authorization: Bearer $admin" -d '{"name":"Hanging service","bundle_id":"com.example.web"}')
flood_app=$(json "d['app']['id']" <<<"$flood")
flood_key=$(json "d['api_key']" <<<"$flood")
other=$(curl -s -XPOST "$base/v1/apps" -H "Authorization: Bearer $admin" -d '{"name":"Other app","bundle_id":"com.example.other"}')
other_app=$(json "d['app']['id']" <<<"$other")
other_key=$(json "d['api_key']" <<<"$other")
vapid=$(curl -s -XPOST "$base/v1/apps/$flood_app/webpush/keys" -H "Authorization: Bearer $flood_key" -d '{"subject":"mailto:ops@example.com"}' | json "d['webpush']['public_key']")
python3 - "$base" "$flood_app" "$flood_key" "$sandbox_admin" "$vapid" <<'PY'
import json, sys, time, urllib.request, urllib.error
base, app, key, admin, vapid = sys.argv[1:6]
def post(url, body, key=None):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    for _ in range(50):
        try:
            with urllib.request.urlopen(urllib.request.Request(url, json.dumps(body).encode(), headers), timeout=30) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code != 429:
                raise
            time.sleep(float(e.headers.get("Retry-After") or 1))
    raise RuntimeError("still refused: " + url)
for _ in range(1000):
    sub = post(admin + "/webpush/subscriptions", {"application_server_key": vapid})
    post(base + "/v1/apps/%s/devices" % app, {"platform": "web", "subscription": sub}, key)
PY
curl -s -XPOST "$sandbox_admin/webpush/mode" -d '{"mode":"silent"}' >/dev/null
# The notification the hanging service's app watches with every live view its read key may hold.
flood_read=$(curl -s -XPOST "$base/v1/apps/$flood_app/keys" -H "Authorization: Bearer $flood_key" -d '{"scopes":["read"]}' | json "d['api_key']")
flood_notification=$(curl -s -XPOST "$base/v1/apps/$flood_app/notifications" -H "Authorization: Bearer $flood_key" \
  -d '{"title":"Watched","audience":{"all":true}}' | json "d['id']")
echo "  a second app's 1,000 web subscriptions at a push service that now never answers"

status=$(curl -s -o "$dir/sent.json" -w '%{http_code}' -XPOST "$base/v1/apps/$app/notifications" -H "Authorization: Bearer $key" \
  -d '{"title":"Flash sale","body":"40% off until midnight","media":"'"$media"'","audience":{"all":true}}')
[[ $status == 202 ]] || { echo "the send was answered $status: $(cat "$dir/sent.json")"; exit 1; }
echo 5 > "/proc/$server/clear_refs"  # resets VmHWM: the peak is the send's and the streams'
id=$(json "d['id']" < "$dir/sent.json")
# The send's own receipt addresses, from the first payloads the emulator received.
receipts="[]"
for _ in $(seq 200); do
  receipts=$(curl -s "$sandbox_admin/apns/notifications?limit=100" | python3 -c '
import json, sys
rows = json.load(sys.stdin).get("notifications", [])
print(json.dumps([r["payload"]["rp"]["r"].rsplit("/", 1)[-1] for r in rows if "r" in (r.get("payload") or {}).get("rp", {})]))')
  [[ $(json "len(d)" <<<"$receipts") -ge 100 ]] && break
  sleep 0.05
done
cat > "$dir/soak.json" <<JSON
{"base": "$base", "app": "$app", "key": "$key", "read_key": "$read_key", "notification": "$id", "pid": $server,
 "devices": $devices, "receipts": $receipts, "big_media": "$big", "timeout": 1200, "sandbox_admin": "$sandbox_admin",
 "flood_app": "$flood_app", "flood_key": "$flood_key", "other_app": "$other_app", "other_key": "$other_key",
 "public_key": "$public_key", "flood_read_key": "$flood_read", "flood_notification": "$flood_notification",
 "threads": {"receipt_flood": 8, "open_flood": 8, "live_views": 50, "pipelined_media": 4, "random_bearers": 8, "heavy_reads": 4, "legitimate": 1,
             "hanging_push_service": 1, "other_app": 1, "public_flood": 8, "stream_holder": 300}}
JSON
python3 Benchmarks/lib/soak.py "$dir/soak.json" | tee "$dir/result.json"
python3 - "$dir/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["send"]
print("  the send: %d devices, outcomes %s in %.0f s; lost %d" % (s["devices"], s["counts"], s["seconds"], s["lost"]))
print("  the server's peak resident memory: %.0f MB (bound 300 MB)" % r["server_peak_rss_mb"])
l = r["streams"]["legitimate"]
print("  legitimate calls: %d, p50 %s ms, p99 %s ms, max %s ms, statuses %s" % (l["calls"], l["p50_ms"], l["p99_ms"], l["max_ms"], l["statuses"]))
o = r["streams"]["other app"]
print("  another app's one-device sends: %d (statuses %s), %d received, %d lost; API call to the emulator's receipt p50 %s ms, p99 %s ms, max %s ms"
      % (o["sends"], o["statuses"], o["received"], o["lost"], o["p50_ms"], o["p99_ms"], o["max_ms"]))
for name in ("receipt flood", "open flood", "live views", "pipelined large media", "random bearers", "heavy read-scope queries",
             "hanging push service", "public-key flood", "stream holder"):
    print("  %s: %s" % (name, r["streams"][name]))
PY
