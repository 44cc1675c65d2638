#!/usr/bin/env bash
# Large media requests pipelined behind a routed request (the media fast path holds them until the routed answer has
# ended, then answers them from the file with sendfile, so no answer is read into memory), against `richpush serve`,
# with the server's resident memory: baseline, peak (VmHWM, reset before the run) and after.
#   Benchmarks/media_pipelined.sh [CONNECTIONS=16] [ROUNDS=3] [SIZE_MB=49]
# Each connection sends `GET /health/live` and `GET /media/<a SIZE_MB video>` in one write, ROUNDS times, reading
# and dropping every byte; then the same with HEAD. The video is larger than half the memory cache (64 MB by
# default), so it is never cached: every answer comes from disk.
set -euo pipefail
cd "$(dirname "$0")/.."
connections=${1:-16}
rounds=${2:-3}
size_mb=${3:-49}
# BIN=path/to/richpush measures another build (for example the debug one); the default is a release build.
bin=${BIN:-.build/release/richpush}
[[ -n ${BIN:-} ]] || swift build -c release --product richpush >/dev/null 2>&1
dir=$(mktemp -d)
trap 'kill $server 2>/dev/null || true; rm -rf "$dir"' EXIT

admin=bench-admin-key-0001
"$bin" serve --port 0 --db "$dir/rp.sqlite" --sandbox-dir "$dir/sandbox" --admin-key "$admin" > "$dir/serve.log" 2>&1 &
server=$!
for _ in $(seq 100); do grep -q listening "$dir/serve.log" 2>/dev/null && break; sleep 0.1; done
base=$(grep -m1 '"listening"' "$dir/serve.log" | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['listening'])")

python3 - "$dir/clip.mp4" "$size_mb" <<'PY'
import sys, struct
path, mb = sys.argv[1], int(sys.argv[2])
head = struct.pack(">I", 24) + b"ftypisom" + struct.pack(">I", 0) + b"iso2mp41" + struct.pack(">I", 8) + b"free"
with open(path, "wb") as f:
    f.write(head); f.write((bytes(range(256)) * (mb * 4096))[: mb * 1_000_000 - len(head)])
PY
url=$(curl -s -XPOST "$base/v1/media" -H "Authorization: Bearer $admin" -H 'Content-Type: application/octet-stream' \
  --data-binary @"$dir/clip.mp4" | python3 -c 'import json,sys; print(json.load(sys.stdin)["url"])')
kb() { awk -v f="$1:" '$1 == f { print $2 }' /proc/$server/status; }

for method in GET HEAD; do
  echo 5 > /proc/$server/clear_refs  # resets VmHWM
  baseline=$(kb VmRSS)
  python3 - "$url" "$method" "$connections" "$rounds" <<'PY'
import socket, sys, threading, time, urllib.parse
url, method, connections, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
u = urllib.parse.urlsplit(url)
request = (f"GET /health/live HTTP/1.1\r\nHost: b\r\n\r\n{method} {u.path} HTTP/1.1\r\nHost: b\r\n\r\n").encode()
totals, statuses, lock = [0], {}, threading.Lock()

def answers(sock, count, head_for_last):
    buf = b""
    for i in range(count):
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(1 << 16)
            if not chunk: raise EOFError("closed")
            buf += chunk
        header, buf = buf.split(b"\r\n\r\n", 1)
        lines = header.decode("latin-1").split("\r\n")
        status = lines[0].split(" ")[1]
        length = 0
        for l in lines[1:]:
            k, _, v = l.partition(":")
            if k.lower() == "content-length": length = int(v)
        if head_for_last and i == count - 1: length = 0
        got = min(len(buf), length); buf = buf[got:]; left = length - got
        while left:
            chunk = sock.recv(min(left, 1 << 20))
            if not chunk: raise EOFError("closed mid-body")
            left -= len(chunk)
        with lock:
            totals[0] += length; statuses[status] = statuses.get(status, 0) + 1

def client():
    s = socket.create_connection((u.hostname, u.port))
    for _ in range(rounds):
        s.sendall(request)
        answers(s, 2, method == "HEAD")
    s.close()

start = time.time()
threads = [threading.Thread(target=client) for _ in range(connections)]
for t in threads: t.start()
for t in threads: t.join()
print(f"{method}: {connections} connections x {rounds} rounds pipelined in {time.time() - start:.1f} s; "
      f"statuses {dict(sorted(statuses.items()))}; {totals[0] / 1e6:.0f} MB of bodies read")
PY
  echo "server resident memory: baseline $((baseline / 1024)) MB, peak $(( $(kb VmHWM) / 1024 )) MB, after $(( $(kb VmRSS) / 1024 )) MB (anonymous $(( $(kb RssAnon) / 1024 )) MB, files $(( $(kb RssFile) / 1024 )) MB)"
done
