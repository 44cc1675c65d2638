#!/usr/bin/env bash
# What the cheapest caller makes a cluster node spend: `GET /media/<random>.png` (a well-formed name no node stored)
# from THREADS keep-alive connections for SECONDS, against node B of two nodes on one PostgreSQL, while one
# legitimate client on node B fetches pictures that node A stored (each one first fetched from the shared database
# to B's disk, then answered from there). Prints the hostile requests answered per second and their statuses, node
# B's CPU ms and PostgreSQL transactions per 1,000 of them, node B's peak memory, and the legitimate fetches'
# statuses and p50/p99 beside a baseline run without the flood. The flood comes from 127.0.0.1, the legitimate
# client from 127.0.0.2.
#   Benchmarks/media_miss.sh [SECONDS=15] [THREADS=8] [FILES=300]
# Release build (BIN=path/to/richpush measures another). Needs Debian's postgresql.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-15}
threads=${2:-8}
files=${3:-300}
[[ -n ${BIN:-} ]] || swift build -c release --product richpush >/dev/null 2>&1
bin=$(realpath "${BIN:-.build/release/richpush}")
source Scripts/lib/postgres.sh
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  stop_postgres
  rm -rf "$dir"
}
trap cleanup EXIT
start_postgres "$dir" synchronous_commit=off
"$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U richpush -d postgres -Atc "CREATE DATABASE bench" >/dev/null
database="postgres://richpush@127.0.0.1:$PG_PORT/bench?sslmode=disable"
xacts() { "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U richpush -d bench -Atc "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'bench'"; }
admin=bench-admin-key-0001
ports=()
for _ in 1 2; do ports+=("$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"); done
bases=()
for i in 0 1; do
  mkdir -p "$dir/node$i"
  (cd "$dir/node$i" && RICHPUSH_CREDENTIALS_KEY_FILE="$dir/creds.key" exec "$bin" serve --port "${ports[$i]}" --database "$database" \
    --node-id "node$i" --public-url "http://127.0.0.1:${ports[0]}" --sandbox-dir "$dir/sandbox$i" --admin-key "$admin" \
    > "$dir/node$i.log" 2>&1) &
  pids+=($!)
  for _ in $(seq 300); do grep -q '"listening"' "$dir/node$i.log" 2>/dev/null && break; sleep 0.1; done
  grep -q '"listening"' "$dir/node$i.log" || { echo "node $i did not start:" >&2; tail -20 "$dir/node$i.log" >&2; exit 1; }
  bases+=("http://127.0.0.1:${ports[$i]}")
done
nodeb=${pids[1]}
# Node B's process is the server itself (the subshell exec'd it).
python3 - "${bases[0]}" "$admin" "$files" > "$dir/names" <<'PY'
import json, struct, sys, urllib.request, zlib
base, admin, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def png(seed):
    raw = b"".join(b"\x00" + bytes(((x * seed + y) & 255) for x in range(64 * 3)) for y in range(64))
    def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 64, 64, 8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
for i in range(n):
    req = urllib.request.Request(base + "/v1/media", data=png(i + 1), method="POST",
                                 headers={"Authorization": "Bearer " + admin, "Content-Type": "image/png"})
    print(json.load(urllib.request.urlopen(req))["url"].rsplit("/", 1)[1])
PY
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
kb() { awk -v f="$1:" '$1 == f { print $2 }' /proc/$nodeb/status; }

# run FLOOD(0|1) NAMES-FILE: prints one JSON line
run() {
  local flood=$1 names=$2
  echo 5 > /proc/$nodeb/clear_refs
  local c0 x0
  c0=$(cpu "$nodeb"); x0=$(xacts)
  python3 - "${bases[1]}" "$seconds" "$threads" "$flood" "$names" <<'PY' > "$dir/run.json"
import http.client, json, os, sys, threading, time, urllib.parse
base, seconds, threads, flood, names = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
u = urllib.parse.urlsplit(base)
stop = time.time() + seconds
hostile, lock = {}, threading.Lock()
def hammer():
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    counts = {}
    while time.time() < stop:
        try:
            c.request("GET", "/media/" + os.urandom(32).hex() + ".png")
            r = c.getresponse(); r.read()
            counts[r.status] = counts.get(r.status, 0) + 1
        except Exception as e:
            counts[type(e).__name__] = counts.get(type(e).__name__, 0) + 1
            c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    with lock:
        for k, v in counts.items(): hostile[str(k)] = hostile.get(str(k), 0) + v
ts = [threading.Thread(target=hammer) for _ in range(threads if flood else 0)]
for t in ts: t.start()
legit, lat = {}, []
# The legitimate client comes from another address (127.0.0.2), as a phone or a CDN does.
c = http.client.HTTPConnection(u.hostname, u.port, timeout=30, source_address=("127.0.0.2", 0))
todo = open(names).read().split()
start = time.time()
i = 0
while time.time() < stop and i < len(todo):
    t0 = time.time()
    c.request("GET", "/media/" + todo[i]); r = c.getresponse(); body = r.read()
    lat.append((time.time() - t0) * 1000)
    legit[str(r.status)] = legit.get(str(r.status), 0) + 1
    i += 1
    time.sleep(0.02)
for t in ts: t.join()
lat.sort()
pick = lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))], 1) if lat else None
print(json.dumps({"hostile": hostile, "hostile_total": sum(v for k, v in hostile.items()), "elapsed": time.time() - start,
                  "legit": legit, "legit_p50_ms": pick(0.5), "legit_p99_ms": pick(0.99), "legit_max_ms": pick(1.0)}))
PY
  local c1 x1
  c1=$(cpu "$nodeb"); x1=$(xacts)
  python3 - "$dir/run.json" "$c0" "$c1" "$x0" "$x1" "$ticks" "$(kb VmHWM)" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); c0, c1, x0, x1, ticks, hwm = map(float, sys.argv[2:])
n = max(r["hostile_total"], 1)
r["hostile_per_s"] = round(r["hostile_total"] / r["elapsed"])
r["node_cpu_ms_per_1000_hostile"] = round((c1 - c0) / ticks * 1000 / n * 1000, 1) if r["hostile_total"] else None
r["pg_xacts_per_1000_hostile"] = round((x1 - x0) / n * 1000, 1) if r["hostile_total"] else None
r["pg_xacts"] = int(x1 - x0)
r["node_peak_mb"] = round(hwm / 1024, 1)
print(json.dumps(r))
PY
}
half=$((files / 2))
head -n "$half" "$dir/names" > "$dir/first"
tail -n +"$((half + 1))" "$dir/names" > "$dir/second"
echo "media_miss: node B of two on PostgreSQL; $threads hostile connections for ${seconds} s; legitimate: $half pictures stored by node A, one every 20 ms"
echo "baseline (no flood): $(run 0 "$dir/first")"
echo "flood:               $(run 1 "$dir/second")"
