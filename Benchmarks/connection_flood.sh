#!/usr/bin/env bash
# What a caller without a key can make a node hold with connections alone: CONNECTIONS (default 12,000) TCP
# connections opened from one client address (127.0.0.2) to a release `richpush serve` (SQLite, sandbox; its
# descriptor limit set to SERVER_FDS, default 8,192, hard and soft, so that the flood can exceed it) and held
# with nothing sent on them, beside one slow-loris connection (a request head a byte a second). Meanwhile another
# client (127.0.0.1) asks GET /health twenty times and sends a notification to a registered device. Prints how many
# of the flood's connections the node accepted and kept, its descriptors and resident memory, the other client's
# statuses and slowest answer, and the same after the idle time (30 s) has passed.
#   [SERVER_FDS=8192] [SOURCES=1] Benchmarks/connection_flood.sh [CONNECTIONS=12000]
# SOURCES spreads the flood over that many client addresses (127.0.0.2, 127.0.0.3, …): enough of them reach the
# node's own bound. KEEP=folder keeps the node's log there.
# BIN=path/to/richpush measures another build; the default is a release build.
set -euo pipefail
cd "$(dirname "$0")/.."
connections=${1:-12000}
if [[ -z ${BIN:-} ]]; then swift build -c release --product richpush >/dev/null; fi
bin=${BIN:-$PWD/.build/release/richpush}
source Benchmarks/lib/sandbox.sh
scratch_and_cleanup
# The flood's own descriptors: as many as the shell may have.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

admin=flood-admin-key-0001
(ulimit -n "${SERVER_FDS:-8192}" && exec "$bin" serve --port 0 --db "$dir/rp.sqlite" --sandbox-dir "$dir/sandbox" \
  --admin-key "$admin") > "$dir/serve.log" 2>&1 &
[[ -n ${KEEP:-} ]] && trap 'cp "$dir/serve.log" "$KEEP/" 2>/dev/null; for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"' EXIT
server=$!
pids+=($server)
for _ in $(seq 200); do grep -q '"listening"' "$dir/serve.log" 2>/dev/null && break; sleep 0.1; done
base=$(grep -m1 '"listening"' "$dir/serve.log" | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['listening'])")
created=$(curl -s -XPOST "$base/v1/apps" -H "Authorization: Bearer $admin" -d '{"name":"Other","bundle_id":"com.example.app"}')
app=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['app']['id'])" "$created")
key=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['api_key'])" "$created")
token=$(printf '%064x' 4711)
curl -s -o /dev/null -XPOST "$base/v1/apps/$app/devices" -H "Authorization: Bearer $key" \
  -d "{\"token\":\"$token\",\"platform\":\"ios\"}"
echo "connection_flood: $connections idle connections from ${SOURCES:-1} address(es) (127.0.0.2, …) and one slow-loris, against $bin (the node's descriptor limit: ${SERVER_FDS:-8192})"

python3 - "$base" "$server" "$connections" "$app" "$key" "${SOURCES:-1}" <<'PY'
import http.client, json, os, resource, socket, sys, threading, time, urllib.parse
base, pid, n, app, key, sources = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6])
u = urllib.parse.urlparse(base)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

def server_fds():
    try: return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError: return -1
def server_rss_mb():
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"): return int(line.split()[1]) // 1024
    except OSError: return -1
def alive():
    try: return open(f"/proc/{pid}/stat").read().split()[2] != "Z"
    except OSError: return False

held, refused = [], 0
started = time.time()
for i in range(n):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((f"127.0.0.{2 + i % sources}", 0))
        s.settimeout(2)
        s.connect((u.hostname, u.port))
        s.setblocking(False)
        held.append(s)
    except OSError:
        refused += 1
        s.close()
opened = time.time() - started

# The slow-loris: a request head, a byte a second, never ended.
loris = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
loris.bind(("127.0.0.2", 0))
loris.connect((u.hostname, u.port))
loris.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
loris_alive = [True]
def trickle():
    while loris_alive[0]:
        try: loris.send(b"X")
        except OSError: loris_alive[0] = False; break
        time.sleep(1)
threading.Thread(target=trickle, daemon=True).start()

def still_open():
    kept = 0
    for s in held:
        try:
            if s.recv(1, socket.MSG_PEEK) == b"": continue  # closed by the server
        except BlockingIOError:
            kept += 1
        except OSError:
            continue
    return kept

def other_client():
    statuses, slowest = {}, 0.0
    for _ in range(20):
        t = time.time()
        try:
            c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
            c.request("GET", "/health"); r = c.getresponse(); r.read(); st = r.status; c.close()
        except Exception as e:
            st = type(e).__name__
        slowest = max(slowest, time.time() - t)
        statuses[st] = statuses.get(st, 0) + 1
    t = time.time()
    try:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        c.request("POST", f"/v1/apps/{app}/notifications", body=json.dumps({"title": "t", "audience": {"all": True}}),
                  headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        r = c.getresponse(); r.read(); send = r.status; c.close()
    except Exception as e:
        send = type(e).__name__
    return statuses, slowest, send, time.time() - t

time.sleep(3)
kept = still_open()
statuses, slowest, send, send_s = other_client()
print(f"  opened in {opened:.1f} s: {len(held)} connected, {refused} failed to connect; the node kept {kept} after 3 s; "
      f"node: {server_fds()} descriptors, {server_rss_mb()} MB resident, alive: {alive()}")
print(f"  the other client: GET /health {statuses}, slowest {slowest*1000:.0f} ms; a send: {send} in {send_s*1000:.0f} ms")
time.sleep(35)
kept = still_open()
statuses, slowest, send, send_s = other_client()
print(f"  after 38 s: the node kept {kept} of the flood's connections, the slow-loris {'open' if loris_alive[0] else 'closed'}; "
      f"node: {server_fds()} descriptors, {server_rss_mb()} MB resident, alive: {alive()}")
print(f"  the other client: GET /health {statuses}, slowest {slowest*1000:.0f} ms; a send: {send} in {send_s*1000:.0f} ms")
loris_alive[0] = False
PY
