#!/usr/bin/env bash
# What the cheapest callers of the Live Activity routes make a node spend (SQLite, sandbox on, release build):
#   1. POST /v1/apps/{app}/live/tokens with a made-up bearer (401);
#   2. the same with the app's register-only key, the one an app ships, one token registered over and over;
#   3. GET /v1/apps/{app}/live/channels/{made-up id} with a read key: each is a request to APNs' channel host (here
#      the sandbox's emulator), answered 404.
# Each: h2load (HTTP/1.1, 8 connections, 20,000 requests), the node's CPU ms per 1,000 (from /proc), statuses, and the
# database's growth; then the node's peak memory. Rate limit raised to 1,000,000 so the server itself is measured
# (a real node holds each key to its rate). Needs h2load.
#   Benchmarks/live_routes.sh
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
app=$(curl -s -XPOST "$base/v1/apps" -H "Authorization: Bearer $admin" -d '{"name":"L","bundle_id":"com.example.app"}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["app"]["id"])')
key() { curl -s -XPOST "$base/v1/apps/$app/keys" -H "Authorization: Bearer $admin" -d "{\"scopes\":[\"$1\"]}" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["api_key"])'; }
register=$(key register)
read=$(key read)
printf '{"kind":"activity","token":"%s","activity_type":"T","activity_id":"a1"}' "$(printf 'ab%.0s' $(seq 32))" > $dir/body.json
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
echo "live_routes: 20,000 requests each, h2load HTTP/1.1 8 connections; $(nproc) cores shared with h2load and the emulators"
run "1. made-up bearer, POST live/tokens" -H "Authorization: Bearer rp_made_up_key" -H "Content-Type: application/json" -d $dir/body.json "$base/v1/apps/$app/live/tokens"
run "2. register key, one token again and again" -H "Authorization: Bearer $register" -H "Content-Type: application/json" -d $dir/body.json "$base/v1/apps/$app/live/tokens"
run "3. read key, a made-up channel (proxied to APNs)" -H "Authorization: Bearer $read" "$base/v1/apps/$app/live/channels/bm8tc3VjaA%3D%3D"
echo "peak memory $(( $(awk '/VmHWM/ {print $2}' /proc/$pid/status) / 1024 )) MB"
