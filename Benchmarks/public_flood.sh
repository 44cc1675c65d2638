#!/usr/bin/env bash
# What the public key can make the disk hold: registrations at the longest fields (a 200-character APNs token, 32 tags
# and 32 topics of 64 bytes, the longest locale, time zone and app version), each a new device, posted through an
# app's register key for SECONDS (default 60) by THREADS clients, to a release `richpush serve` on SQLite with its
# default limits. The server trusts loopback as a proxy and every request names another visitor (X-Forwarded-For),
# so that the per-client rate is no help and the key's own rate (rate_limit) is what bounds the flood: the worst a
# page's key can do. Then 10 s idle, and the database's files are weighed (the file, its WAL and shared memory).
# Prints the answers by status, the devices stored, bytes per device, the WAL's largest size seen while writing, and
# the files after idle against the bound (150 MB).
#   Benchmarks/public_flood.sh [SECONDS=60] [THREADS=16]
# BIN=path/to/richpush measures another build; the default is a release build.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
threads=${2:-16}
if [[ -z ${BIN:-} ]]; then swift build -c release --product richpush >/dev/null; fi
bin=${BIN:-$PWD/.build/release/richpush}
source Benchmarks/lib/sandbox.sh
scratch_and_cleanup

admin=flood-admin-key-0001
echo '{"trusted_proxies": ["127.0.0.1"]}' > "$dir/config.json"
"$bin" serve --config "$dir/config.json" --port 0 --db "$dir/rp.sqlite" --sandbox-dir "$dir/sandbox" \
  --admin-key "$admin" > "$dir/serve.log" 2>&1 &
server=$!
pids+=($server)
for _ in $(seq 200); do grep -q '"listening"' "$dir/serve.log" 2>/dev/null && break; sleep 0.1; done
base=$(grep -m1 '"listening"' "$dir/serve.log" | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['listening'])")
created=$(curl -s -XPOST "$base/v1/apps" -H "Authorization: Bearer $admin" -d '{"name":"Flood","bundle_id":"com.example.app"}')
app=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['app']['id'])" "$created")
manage=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['api_key'])" "$created")
public=$(curl -s -XPOST "$base/v1/apps/$app/keys" -H "Authorization: Bearer $manage" -d '{"scopes":["register"]}' \
  | python3 -c "import json,sys; print(json.load(sys.stdin)['api_key'])")

python3 - "$base" "$app" "$public" "$seconds" "$threads" "$dir/rp.sqlite" <<'PY'
import collections, http.client, json, os, random, sys, threading, time, urllib.parse
base, app, key, seconds, threads, db = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
u = urllib.parse.urlparse(base)
statuses = collections.Counter()
lock = threading.Lock()
stop = time.time() + seconds
largest_wal = [0]

def longest(i, n):
    # 64 bytes each, distinct per device so that nothing is shared in the indexes.
    return [f"{i:08x}{k:02x}".ljust(64, "x") for k in range(n)]

def flood(t):
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    rng = random.Random(t)
    i = 0
    while time.time() < stop:
        i += 1
        n = t * 10_000_000 + i
        body = json.dumps({
            "token": f"{n:0200x}"[:200], "platform": "ios",
            "tags": longest(n, 32), "topics": longest(n + 1, 32),
            "locale": "x" * 35, "time_zone": "y" * 64, "app_version": "z" * 64,
        })
        visitor = f"{rng.randrange(1, 224)}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
        try:
            conn.request("POST", f"/v1/apps/{app}/devices", body=body, headers={
                "Authorization": f"Bearer {key}", "Content-Type": "application/json", "X-Forwarded-For": visitor})
            r = conn.getresponse()
            r.read()
            status = r.status
            if status == 429:
                time.sleep(min(1, float(r.getheader("Retry-After") or 1)) / 10)
        except Exception as e:
            status = type(e).__name__
            conn.close()
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        with lock:
            statuses[status] += 1

def watch():
    while time.time() < stop + 1:
        try:
            largest_wal[0] = max(largest_wal[0], os.path.getsize(db + "-wal"))
        except OSError:
            pass
        time.sleep(0.1)

workers = [threading.Thread(target=flood, args=(t,)) for t in range(threads)] + [threading.Thread(target=watch)]
for w in workers: w.start()
for w in workers: w.join()
print("answers:", dict(sorted(statuses.items(), key=lambda kv: str(kv[0]))))
print(f"largest WAL while writing: {largest_wal[0] / 1e6:.1f} MB")
PY

sleep 10
sizes=$(for s in "" -wal -shm; do stat -c %s "$dir/rp.sqlite$s" 2>/dev/null || echo 0; done)
read -r main wal shm <<<"$(echo $sizes)"
devices=$(curl -s "$base/v1/apps/$app/devices?limit=1" -H "Authorization: Bearer $manage" | python3 -c "import json,sys; print(json.load(sys.stdin)['total'])")
total=$((main + wal + shm))
python3 - "$devices" "$main" "$wal" "$shm" "$total" <<'PY'
import sys
devices, main, wal, shm, total = (int(x) for x in sys.argv[1:])
print(f"devices stored: {devices}")
print(f"after 10 s idle: database {main / 1e6:.1f} MB, WAL {wal / 1e6:.1f} MB, shm {shm / 1e6:.2f} MB; "
      f"{total / 1e6:.1f} MB in all ({(total / max(devices, 1)) / 1e3:.1f} KB a device)")
print("bound 150 MB:", "held" if total < 150e6 else "PASSED OVER")
PY
