#!/usr/bin/env bash
# Serving hosted media through the spike: the same 200 KB JPEG from `richpush serve` (/media/<sha256>.jpg, from
# its in-memory cache) and from nginx (sendfile, default settings, 2 workers), each hit by wrk with 1,000
# connections for 15 s, one after the other on this machine. Prints both rates, latency percentiles and the
# ratios. Needs wrk and nginx (apt-get install wrk nginx) and Pillow, which the project's .venv has
# (Benchmarks/setup.sh). STAT=1 adds each server's CPU per 1,000 requests, user and system apart (from /proc), and its
# system calls per request (perf stat): the two servers' kernel work is about the same, so the gap is user space.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python3 ] && PATH="$PWD/.venv/bin:$PATH"
python3 -c "import PIL" 2>/dev/null || { echo "Pillow is missing: run Benchmarks/setup.sh"; exit 1; }
for tool in wrk nginx python3; do command -v $tool >/dev/null || { echo "$tool is missing"; exit 1; }; done
ulimit -n 20000 2>/dev/null || true
# BIN=path/to/richpush measures another build.
[[ -n ${BIN:-} ]] || swift build -c release --product richpush >/dev/null 2>&1
bin=$(realpath "${BIN:-.build/release/richpush}")
dir=$(mktemp -d)
server=
chmod 755 "$dir"  # nginx workers read the file as another user
trap '[ -n "$server" ] && kill $server 2>/dev/null || true; [ -f "$dir/nginx.pid" ] && kill $(cat "$dir/nginx.pid") 2>/dev/null || true; rm -rf "$dir"' EXIT

# A 200 KB photo-like JPEG (noise over a gradient, so it does not compress away).
python3 - "$dir/photo.jpg" <<'PY'
import random, sys
from PIL import Image
random.seed(7)
w, h = 800, 600
img = Image.new("RGB", (w, h))
img.putdata([((x * 255) // w ^ random.randrange(64), (y * 255) // h ^ random.randrange(64), random.randrange(256)) for y in range(h) for x in range(w)])
for q in range(100, 5, -1):
    img.save(sys.argv[1], quality=q)
    import os
    if os.path.getsize(sys.argv[1]) <= 205_000: break
PY
size=$(stat -c %s "$dir/photo.jpg")

admin=bench-admin-key-0001
"$bin" serve --port 0 --db "$dir/rp.sqlite" --sandbox-dir "$dir/sandbox" --admin-key "$admin" > "$dir/serve.log" 2>&1 &
server=$!
for _ in $(seq 100); do grep -q listening "$dir/serve.log" 2>/dev/null && break; sleep 0.1; done
base=$(grep -m1 '"listening"' "$dir/serve.log" | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['listening'])")
uploaded=$(curl -s -XPOST "$base/v1/media" -H "Authorization: Bearer $admin" --data-binary @"$dir/photo.jpg")
name=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['name'])" "$uploaded")

mkdir -p "$dir/www/media" "$dir/logs"
cp "$dir/photo.jpg" "$dir/www/media/$name"
cat > "$dir/nginx.conf" <<CONF
worker_processes 2;
pid $dir/nginx.pid;
error_log $dir/logs/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 100000;
  types { image/jpeg jpg; }
  server {
    listen 127.0.0.1:18481;
    root $dir/www;
    location /media/ { add_header Cache-Control "public, max-age=31536000, immutable"; }
  }
}
CONF
nginx -c "$dir/nginx.conf" -p "$dir"
sleep 0.5
curl -sf -o /dev/null "http://127.0.0.1:18481/media/$name" || { echo "nginx does not serve the file"; cat "$dir/logs/error.log"; ls -la "$dir/www/media"; exit 1; }
curl -sf -o /dev/null "$base/media/$name" || { echo "richpush does not serve the file"; exit 1; }

ticks() {  # user and system clock ticks of the processes $1 (comma-separated)
  local u=0 s=0 f
  for p in ${1//,/ }; do
    f=$(sed 's/.*) //' "/proc/$p/stat")
    u=$((u + $(echo "$f" | cut -d' ' -f12))) s=$((s + $(echo "$f" | cut -d' ' -f13)))
  done
  echo "$u $s"
}
run() {  # $1 label, $2 URL, $3 the serving processes (comma-separated) when STAT=1
  if [ -n "${STAT:-}" ]; then  # the servers' CPU and system calls while wrk runs: STAT=1
    perf stat -x, -e raw_syscalls:sys_enter -p "$3" -o "$dir/$1.stat" -- sleep "${DURATION:-15}" >/dev/null 2>&1 &
    stat=$!
    ticks "$3" > "$dir/$1.ticks"
  fi
  wrk -t2 -c1000 -d${DURATION:-15}s --latency "$2" > "$dir/$1.txt"
  if [ -n "${STAT:-}" ]; then
    ticks "$3" >> "$dir/$1.ticks"
    wait $stat
    python3 - "$dir/$1.stat" "$dir/$1.txt" "$1" "$dir/$1.ticks" <<'PY'
import os, re, sys
calls = [float(l.split(",")[0]) for l in open(sys.argv[1]) if "raw_syscalls" in l][0]
requests = int(re.search(r"(\d+) requests in", open(sys.argv[2]).read()).group(1))
(u0, s0), (u1, s1) = [map(int, l.split()) for l in open(sys.argv[4])]
hz = os.sysconf("SC_CLK_TCK")
user, system = (u1 - u0) / hz / requests * 1e6, (s1 - s0) / hz / requests * 1e6
print("%-8s server CPU %.1f ms per 1,000 requests (user %.1f, system %.1f), %.1f system calls per request" % (
    sys.argv[3], user + system, user, system, calls / requests))
PY
  fi
  [ -n "${SHOW_WRK:-}" ] && cat "$dir/$1.txt"
  python3 - "$dir/$1.txt" "$1" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
rate = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
def ms(p):
    m = re.search(r"^\s+%s%%\s+([\d.]+)(us|ms|s)\s*$" % p, text, re.M)
    v, u = float(m.group(1)), m.group(2)
    return v / 1000 if u == "us" else v * 1000 if u == "s" else v
errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
sock = re.search(r"Socket errors: (.*)", text)
print("%-8s %9.0f req/s  p50 %7.2f ms  p99 %7.2f ms  non-2xx %s  socket errors: %s" % (sys.argv[2], rate, ms(50), ms(99), errors.group(1) if errors else 0, sock.group(1) if sock else "none"))
open(sys.argv[1] + ".sum", "w").write("%f %f\n" % (rate, ms(99)))
PY
}
echo "media_serve: one ${size}-byte JPEG, wrk -t2 -c1000 -d15s, 2 cores shared by wrk and the server"
if [ -n "${PERF_OUT:-}" ]; then  # profile the server while wrk loads it: PERF_OUT=/tmp/media.perf
  perf record -F 499 -g -p "$server" -o "$PERF_OUT" -- sleep "${DURATION:-15}" >/dev/null 2>&1 &
  profiler=$!
fi
run richpush "$base/media/$name" "$server"
[ -n "${PERF_OUT:-}" ] && wait $profiler
run nginx "http://127.0.0.1:18481/media/$name" "$(pgrep -d, -P "$(cat "$dir/nginx.pid")")"
read -r rp_rate rp_p99 < "$dir/richpush.txt.sum"
read -r ng_rate ng_p99 < "$dir/nginx.txt.sum"
python3 -c "print('richpush/nginx: rate %.2fx (goal >= 1.0), p99 %.2fx (goal <= 1.2)' % ($rp_rate / $ng_rate, $rp_p99 / $ng_p99))"
