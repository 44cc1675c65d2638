#!/usr/bin/env bash
# What the cheapest callers of the insight routes make a node spend (SQLite, sandbox on, release build):
#   1. POST /v1/receipts/{forged address}/opens, no key (403: the signature is checked before anything is read);
#   2. POST /v1/receipts/{a real address}/opens again and again (one counts; the rest are 409 after one indexed read);
#   3. POST /v1/apps/{app}/notifications/{id}/opens with the register key (the one an app ships) and a token the
#      notification was not sent to (404 after one indexed read);
#   4. GET /v1/apps/{app}/notifications/{id}/funnel with a read key on a send to DEVICES registered devices (default
#      1,000), read through the per-notification cache the live view shares (a read of the
#      database at most once a second whatever the readers).
# Each: h2load (HTTP/1.1, 8 connections, 20,000 requests), the node's CPU ms per 1,000 (from /proc), statuses, and the
# database's growth; then the node's peak memory. The per-key rate is raised so the server itself is measured (the
# receipts' 2,000 a second per notification with bursts of 20,000 covers route 2's 20,000). Needs h2load.
#   Benchmarks/insight_routes.sh        (BIN=path/to/richpush to measure a given build, DEVICES=10000)
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -n ${BIN:-} ]] || swift build -c release --product richpush >/dev/null 2>&1
bin=$(realpath "${BIN:-.build/release/richpush}")
dir=$(mktemp -d)
admin=adm-key-0001-abcdefgh
# The rates are raised out of the way (the key's, and the public key's per client: every request here comes from one
# address): what is measured is what each route costs once admitted.
$bin serve --port 0 --db $dir/db.sqlite --sandbox-dir $dir/sbx --admin-key $admin --rate-limit 1000000 \
  --public-rate-per-client 1000000 > $dir/out.log 2>&1 &
pid=$!
trap 'kill $pid; rm -rf $dir' EXIT
for _ in $(seq 100); do grep -q '"listening"' $dir/out.log && break; sleep 0.1; done
base=$(grep -m1 '"listening"' $dir/out.log | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['listening'])")
sandbox_admin=$(grep -m1 '"listening"' $dir/out.log | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['sandbox_admin'])")
app=$(curl -s -XPOST "$base/v1/apps" -H "Authorization: Bearer $admin" -d '{"name":"I","bundle_id":"com.example.app"}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["app"]["id"])')
key() { curl -s -XPOST "$base/v1/apps/$app/keys" -H "Authorization: Bearer $admin" -d "{\"scopes\":[\"$1\"]}" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["api_key"])'; }
register=$(key register)
read=$(key read)
devices=${DEVICES:-1000}
# The devices are registered (one keep-alive connection) and the send goes to them all: a request holds at most
# 10,000 tokens and 256 KB, so a larger send is a registry send.
python3 - "$base" "$app" "$admin" "$devices" <<'PY'
import http.client, json, sys, urllib.parse
base, app, admin, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
u = urllib.parse.urlparse(base)
c = http.client.HTTPConnection(u.hostname, u.port)
for i in range(n):
    c.request("POST", f"/v1/apps/{app}/devices", json.dumps({"token": "%064x" % (i + 1), "platform": "ios"}),
              {"Authorization": f"Bearer {admin}", "Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    assert r.status in (200, 201), r.status
PY
id=$(curl -s -XPOST "$base/v1/apps/$app/notifications" -H "Authorization: Bearer $admin" \
  -d "{\"title\":\"T\",\"chart\":{\"type\":\"bar\",\"values\":[1,2]},\"audience\":{\"all\":true}}" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
address=""
for _ in $(seq 100); do
  address=$(curl -s "$sandbox_admin/apns/notifications?limit=1" | python3 -c '
import json, sys
rows = json.load(sys.stdin).get("notifications", [])
print(rows[0]["payload"]["rp"]["r"] if rows and "r" in rows[0]["payload"].get("rp", {}) else "")')
  [[ -n $address ]] && break
  sleep 0.1
done
[[ -n $address ]] || { echo "no receipt address came"; exit 1; }
path=${address#*/v1/}
# The send delivered first, so that its work is not counted against the routes.
for _ in $(seq 1500); do
  [[ $(curl -s "$base/v1/apps/$app/notifications/$id?limit=1" -H "Authorization: Bearer $admin" |
    python3 -c 'import json,sys; print(json.load(sys.stdin).get("counts", {}).get("delivered", 0))') -ge $devices ]] && break
  sleep 0.2
done
echo '{"event":"opened","action":"read-later"}' > $dir/open.json
printf '{"event":"opened","token":"%s"}' "$(printf 'ff%.0s' $(seq 32))" > $dir/app-open.json
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' /proc/$pid/stat; }
size() { du -sk $dir/db.sqlite* | awk '{s += $1} END {print s}'; }
run() {  # name, then h2load arguments
  local name=$1 c0 c1 s0 s1
  shift
  s0=$(size); c0=$(cpu)
  local out; out=$(h2load --h1 -n 20000 -c 8 -t 1 "$@" 2>&1)
  c1=$(cpu); s1=$(size)
  echo "$name: $(grep -E "^status codes" <<<"$out" | sed 's/status codes: //'); $(grep -E "finished in" <<<"$out" | sed 's/finished in //;s/,.*//')"
  python3 -c "print('  %.1f ms CPU per 1,000; database grew %d KB' % (($c1 - $c0) / $ticks * 1000 / 20, $s1 - $s0))"
}
echo "insight_routes: 20,000 requests each, h2load HTTP/1.1 8 connections; $(nproc) cores shared with h2load and the emulators"
run "1. forged receipt address, POST …/opens" -H "Content-Type: application/json" -d $dir/open.json "$base/v1/receipts/$id.zzzzzzz.0000000000001.AAAAAAAAAAAAAAAAAAAAAA/opens"
run "2. a real address, the same open again and again" -H "Content-Type: application/json" -d $dir/open.json "$base/v1/$path/opens"
run "3. register key, an open for a token not sent to" -H "Authorization: Bearer $register" -H "Content-Type: application/json" -d $dir/app-open.json "$base/v1/apps/$app/notifications/$id/opens"
run "4. read key, the funnel of a $devices-device send" -H "Authorization: Bearer $read" "$base/v1/apps/$app/notifications/$id/funnel"
echo "peak memory $(( $(awk '/VmHWM/ {print $2}' /proc/$pid/status) / 1024 )) MB"
