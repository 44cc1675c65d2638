#!/usr/bin/env bash
# Concurrent uploads and preflight fetches against a release `richpush serve`, with the server's resident memory
# for each: its peak (VmHWM, reset between the two) and now (VmRSS), from /proc, with the baseline before.
#   1. N uploads of a SIZE_MB file at once to POST /v1/media;
#   2. N sends at once, each with a SIZE_MB video on a local web server and rehost: always, so the preflight
#      fetches every byte and keeps it to re-host.
# Each file is different (the last bytes differ), so nothing is deduplicated.
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
trap 'kill $server $web 2>/dev/null || true; rm -rf "$dir"' EXIT
web=

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

# 2. Preflight: the same files from a local web server, sent as media with rehost: always.
app=$(curl -s -XPOST "$base/v1/apps" -H "Authorization: Bearer $admin" -d '{"name":"Bench","bundle_id":"com.example.bench"}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["app"]["id"])')
webport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
(cd "$dir" && exec python3 -m http.server "$webport" --bind 127.0.0.1 > /dev/null 2>&1) &
web=$!
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$webport/" && break; sleep 0.1; done
echo 5 > /proc/$server/clear_refs  # resets VmHWM
baseline=$(kb VmRSS)
token=$(python3 -c 'print("ab" * 32)')
start=$(date +%s.%N)
for i in $(seq 0 $((n - 1))); do
  curl -s -o "$dir/send$i.json" -w '%{http_code}\n' -XPOST "$base/v1/apps/$app/notifications" -H "Authorization: Bearer $admin" \
    -d "{\"title\": \"clip $i\", \"media\": {\"url\": \"http://127.0.0.1:$webport/clip$i.mp4\", \"kind\": \"video\"}, \"rehost\": \"always\", \"audience\": {\"apns_tokens\": [\"$token\"]}}" > "$dir/sendstatus$i" &
done
wait $(jobs -p | grep -v -e "^$server$" -e "^$web$") 2>/dev/null || true
end=$(date +%s.%N)
statuses=$(cat "$dir"/sendstatus* | sort | uniq -c | tr '\n' ' ')
rehosted=$(cat "$dir"/send*.json | grep -o '"rehosted"' | wc -l)
echo "preflight: $n sends with a ${size_mb} MB video each at once in $(python3 -c "print(round($end - $start, 2))") s; statuses: $statuses; re-hosted: $rehosted"
echo "server resident memory: baseline $((baseline / 1024)) MB, peak $(( $(kb VmHWM) / 1024 )) MB, now $(( $(kb VmRSS) / 1024 )) MB"
