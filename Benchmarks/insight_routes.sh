#!/usr/bin/env bash
# What the cheapest callers of the insight routes make a node spend (SQLite, sandbox on, release build):
#   1. POST /v1/receipts/{forged address}/opens, no key (403: the signature is checked before anything is read);
#   2. POST /v1/receipts/{a real address}/opens again and again (one counts; the rest are 409 after one indexed read);
#   3. POST /v1/apps/{app}/notifications/{id}/opens with the register key (the one an app ships) and a token the
#      notification was not sent to (404 after one indexed read);
#   4. GET /v1/apps/{app}/notifications/{id}/funnel with a read key on a 1,000-device send (three grouped reads).
# Each: h2load (HTTP/1.1, 8 connections, 20,000 requests), the node's CPU ms per 1,000 (from /proc), statuses, and the
# database's growth; then the node's peak memory. The per-key rate is raised so the server itself is measured (the
# receipts' 2,000 a second per notification with bursts of 20,000 covers route 2's 20,000). Needs h2load.
#   Benchmarks/insight_routes.sh
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -n ${BIN:-} ]] || swift build -c release --product richpush >/dev/null 2>&1
bin=$(realpath "${BIN:-.build/release/richpush}")
dir=$(mktemp -d)
admin=adm-key-0001-abcdefgh
$bin serve --port 0 --db $dir/db.sqlite --sandbox-dir $dir/sbx --admin-key $admin --rate-limit 1000000 > $dir/out.log 2>&1 &
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
tokens=$(python3 -c 'print(",".join("\"%064x\"" % (i + 1) for i in range(1000)))')
id=$(curl -s -XPOST "$base/v1/apps/$app/notifications" -H "Authorization: Bearer $admin" \
  -d "{\"title\":\"T\",\"chart\":{\"type\":\"bar\",\"values\":[1,2]},\"audience\":{\"apns_tokens\":[$tokens]}}" |
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
for _ in $(seq 300); do
  [[ $(curl -s "$base/v1/apps/$app/notifications/$id?limit=1" -H "Authorization: Bearer $admin" |
    python3 -c 'import json,sys; print(json.load(sys.stdin).get("counts", {}).get("delivered", 0))') -ge 1000 ]] && break
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
run "4. read key, the funnel of a 1,000-device send" -H "Authorization: Bearer $read" "$base/v1/apps/$app/notifications/$id/funnel"
echo "peak memory $(( $(awk '/VmHWM/ {print $2}' /proc/$pid/status) / 1024 )) MB"
