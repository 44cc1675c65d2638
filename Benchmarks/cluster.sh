#!/usr/bin/env bash
# Several nodes on one PostgreSQL beside one node on SQLite, in one run: for each, wrk POSTs notifications (one
# target each, a hosted picture) to every node at once for SECONDS, first with every send scheduled for 2100
# (20 days ahead: accepting alone), then due at once (accepting while delivering to one external `richpush sandbox`), and waits
# until all the accepted ones are delivered. Only 2xx answers count as sends; the refused are printed by status and
# error code. Prints accepted/s with p99, delivered/s end to end, the claim's p99 (the nodes'
# histograms), and CPU seconds of each node per 1,000 deliveries (from /proc: steadier than wall time).
#   Benchmarks/cluster.sh [SECONDS=10] [CONNECTIONS=32]        (BIN=path/to/richpush to measure a given build)
# Release build. Needs wrk and Debian's postgresql (apt-get install wrk postgresql). PostgreSQL runs in a scratch
# folder with synchronous_commit=off, the durability SQLite's WAL with synchronous=NORMAL gives (commits reach disk
# at the next flush, a crash never corrupts). Everything shares this machine's cores: the figures say so.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
connections=${2:-32}
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk"; exit 1; }
source Scripts/lib/postgres.sh
[[ -n ${BIN:-} ]] || swift build -c release --product richpush >/dev/null
bin=$(realpath "${BIN:-.build/release/richpush}")
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  stop_postgres
  rm -rf "$dir"
}
trap cleanup EXIT
start_postgres "$dir" synchronous_commit=off shared_buffers=256MB max_connections=300
pgbin=$PG_BIN
pgport=$PG_PORT
psql() { "$pgbin/psql" -h 127.0.0.1 -p "$pgport" -U richpush -At "$@"; }

mkdir -p "$dir/sandbox"
"$bin" sandbox --dir "$dir/sandbox" --threads 1 > "$dir/sandbox.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "sandbox: serving" "$dir/sandbox.out" 2>/dev/null && break; sleep 0.1; done
read -r apns_port fcm_port < <(python3 - "$dir/sandbox.out" <<'PY'
import json, sys, urllib.parse
text = open(sys.argv[1]).read().split("sandbox: serving")[0]
s = json.loads(text)
print(s["apns"]["port"], urllib.parse.urlparse(s["fcm"]["url"]).port)
PY
)
admin=bench-admin-key-0001
ticks=$(getconf CLK_TCK)
token=$(printf 'ab%.0s' $(seq 32))
python3 -c "import sys; sys.stdout.buffer.write(bytes([0xFF,0xD8,0xFF,0xE0,0,16]) + b'JFIF' + bytes([0,1,1,0,0,1,0,1,0,0]) + bytes(20000))" > "$dir/sale.jpg"

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# run LABEL DATABASE NODES
run() {
  local label=$1 database=$2 n=$3 bases=() nodepids=() ports=()
  # Every node has the same public URL, as behind a load balancer (here the first node's address): hosted media is
  # then known as hosted to every node.
  for i in $(seq "$n"); do ports+=("$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"); done
  for i in $(seq "$n"); do
    mkdir -p "$dir/$label-$i"
    (cd "$dir/$label-$i" && RICHPUSH_CREDENTIALS_KEY_FILE="$dir/$label.key" exec "$bin" serve --port "${ports[$((i - 1))]}" --database "$database" --node-id "$label-$i" \
      --public-url "http://127.0.0.1:${ports[0]}" \
      --sandbox-dir "$dir/sandbox" --external-apns-port "$apns_port" --external-fcm-port "$fcm_port" --admin-key "$admin" \
      --rate-limit 1000000 > "$dir/$label-$i.log" 2>&1) &
    nodepids+=($!)
    pids+=($!)
    for _ in $(seq 200); do grep -q '"listening"' "$dir/$label-$i.log" 2>/dev/null && break; sleep 0.1; done
    bases+=("$(grep -m1 '"listening"' "$dir/$label-$i.log" | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['listening'])")")
  done
  local created app key media
  created=$(curl -s -XPOST "${bases[0]}/v1/apps" -H "Authorization: Bearer $admin" -d '{"name":"Bench","bundle_id":"com.example.app"}')
  app=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['app']['id'])" "$created")
  key=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['api_key'])" "$created")
  media=$(curl -s -XPOST "${bases[0]}/v1/media" -H "Authorization: Bearer $key" --data-binary @"$dir/sale.jpg" | python3 -c "import json,sys; print(json.load(sys.stdin)['url'])")
  curl -s -o /dev/null -XPOST "${bases[0]}/v1/apps/$app/devices" -H "Authorization: Bearer $key" -d "{\"token\":\"$token\",\"platform\":\"ios\"}"
  local per=$(( (connections + n - 1) / n ))
  phase() {  # $1: extra JSON members; prints "rate p99" summed over the nodes
    cat > "$dir/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer $key"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"title":"Flash sale","body":"40% off","media":"$media","audience":{"tokens":["$token"]}$1}'
$(cat Benchmarks/lib/answers.lua)
done = function(summary, latency, requests)
  local accepted, refused = tally()
  io.write(string.format("RESULT %d %.3f %.2f %s\n", accepted, summary.duration / 1e6, latency:percentile(99) / 1000, (refused:gsub(" ", "_"))))
end
LUA
    local outs=()
    for i in $(seq "$n"); do
      wrk -t1 -c"$per" -d"${seconds}s" -s "$dir/post.lua" "${bases[$((i - 1))]}/v1/apps/$app/notifications" > "$dir/wrk-$i" 2>&1 &
      outs+=($!)
    done
    wait "${outs[@]}"
    # Accepted sends (2xx) summed over the nodes, and the refused by status and code ("none" when there were none).
    cat "$dir"/wrk-* | python3 -c '
import sys
n, d, p, refused = 0, 0.0, 0.0, {}
for line in sys.stdin:
    f = line.split()
    if not f or f[0] != "RESULT": continue
    n += int(f[1]); d = max(d, float(f[2])); p = max(p, float(f[3]))
    if f[4] != "none":
        for part in f[4].replace("_", " ").split(", "):
            count, key = part.split(" × ")
            refused[key] = refused.get(key, 0) + int(count)
text = ",_".join(f"{c}_×_{k.replace(chr(32), chr(95))}" for k, c in sorted(refused.items())) or "none"
print("%d %.0f %.2f %s" % (n, n / max(d, 1e-9), p, text))'
  }
  read -r _ alone alone_p99 alone_errors < <(phase ',"send_at":'"$(($(date +%s) + 20 * 86400))"' ')
  local before=() start sent delivered=0 end
  for p in "${nodepids[@]}"; do before+=("$(cpu "$p")"); done
  start=$(date +%s.%N)
  read -r sent busy busy_p99 busy_errors < <(phase '')
  # Only the accepted sends queued deliveries: those are waited for.
  local want=$((sent + 0))
  for _ in $(seq 1500); do
    if [[ $database == postgres* ]]; then
      local db=${database##*/}
      delivered=$(psql -d "${db%%\?*}" -c "SELECT count(*) FROM deliveries WHERE state = 'delivered'" 2>/dev/null || echo 0)
    else
      delivered=$(curl -s "${bases[0]}/metrics" | awk '/^richpush_queue_deliveries\{state="delivered"\}/ {print $2 + 0}')
    fi
    [[ ${delivered:-0} -ge $want ]] && break
    sleep 0.2
  done
  end=$(date +%s.%N)
  local cpus=() total=0
  for idx in "${!nodepids[@]}"; do
    local p=${nodepids[$idx]} c
    c=$(cpu "$p")
    cpus+=("$(python3 -c "print('%.2f' % (($c - ${before[$idx]}) / $ticks / max($delivered, 1) * 1000))")")
  done
  local claim
  claim=$(for b in "${bases[@]}"; do curl -s "$b/metrics"; done | python3 Benchmarks/lib/histogram.py richpush_claim_seconds 0.5 0.99)
  python3 - "$label" "$n" "$alone" "$alone_p99" "$busy" "$busy_p99" "$delivered" "$start" "$end" "$claim" "$alone_errors" "$busy_errors" "${cpus[@]}" <<'PY'
import sys
label, n, alone, ap99, busy, bp99, delivered, start, end, claim, ae, be = sys.argv[1:13]
cpus = sys.argv[13:]
rate = int(delivered) / (float(end) - float(start))
refused = lambda r: r.replace("_", " ")
print(f"{label} ({n} node{'s' if n != '1' else ''}): accepting alone {alone}/s (p99 {ap99} ms); while delivering {busy}/s (p99 {bp99} ms), "
      f"{delivered} delivered end to end at {rate:.0f}/s; claim {claim}; CPU s per 1,000 deliveries by node: {', '.join(cpus)}; "
      f"sends refused: alone {refused(ae)}, while delivering {refused(be)}")
PY
  for p in "${nodepids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait "${nodepids[@]}" 2>/dev/null || true
}

cores=$(nproc)
echo "cluster: wrk -t1 -c$connections (split among the nodes) for ${seconds} s per phase; $cores cores shared by wrk, the nodes, PostgreSQL and the sandbox"
run sqlite "$dir/sqlite.db" 1
for n in 1 2 3; do
  psql -d postgres -c "CREATE DATABASE bench$n" >/dev/null
  run "postgres" "postgres://richpush@127.0.0.1:$pgport/bench$n?sslmode=disable" "$n"
done
