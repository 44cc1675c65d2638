#!/usr/bin/env bash
# Concurrent uploads against a release `richpush serve`: N uploads of a SIZE_MB file at once to POST /v1/media,
# then the server's resident memory: its peak (VmHWM) and now (VmRSS), from /proc, with the baseline before the
# uploads. Each upload is a different file (the last bytes differ), so nothing is deduplicated.
#   Benchmarks/upload_memory.sh [N=10] [SIZE_MB=49]
# (49 MB: under Apple's 50 MB video limit, the largest file the server hosts.)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10}
size_mb=${2:-49}
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

# MP4 files: an ftyp box, then filler, then a distinct tail.
python3 - "$dir" "$n" "$size_mb" <<'PY'
import sys, struct
d, n, mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
head = struct.pack(">I", 24) + b"ftypisom" + struct.pack(">I", 0) + b"iso2mp41" + struct.pack(">I", 8) + b"free"
body = bytes(range(256)) * (mb * 4096)
for i in range(n):
    with open(f"{d}/clip{i}.mp4", "wb") as f:
        f.write(head); f.write(body[: mb * 1_000_000 - len(head) - 8]); f.write(struct.pack(">Q", i))
PY
kb() { awk -v f="$1:" '$1 == f { print $2 }' /proc/$server/status; }
baseline=$(kb VmRSS)
start=$(date +%s.%N)
for i in $(seq 0 $((n - 1))); do
  curl -s -o "$dir/answer$i.json" -w '%{http_code}\n' -XPOST "$base/v1/media" -H "Authorization: Bearer $admin" \
    -H 'Content-Type: application/octet-stream' --data-binary @"$dir/clip$i.mp4" > "$dir/status$i" &
done
wait $(jobs -p | grep -v "^$server$") 2>/dev/null || true
end=$(date +%s.%N)
statuses=$(cat "$dir"/status* | sort | uniq -c | tr '\n' ' ')
echo "uploads: $n x ${size_mb} MB at once in $(python3 -c "print(round($end - $start, 2))") s; statuses: $statuses"
echo "server resident memory: baseline $((baseline / 1024)) MB, peak $(( $(kb VmHWM) / 1024 )) MB, now $(( $(kb VmRSS) / 1024 )) MB"
