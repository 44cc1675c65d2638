#!/usr/bin/env bash
# PostgreSQL's cost per delivery. NODES nodes (default 1) on a PostgreSQL of their own send one notification to
# DEVICES iOS devices, delivered to one external `richpush sandbox`. Then PostgreSQL's statistics say what the
# database spent on it, per 1,000 deliveries:
#   - its processes' CPU seconds (from /proc: the postmaster's children, those that ended included);
#   - WAL records and bytes (pg_stat_wal);
#   - statement by statement (pg_stat_statements): calls, execution time, rows and WAL bytes.
# The nodes' own CPU is printed beside it, and the inputs of the capacity model in docs/operations.md.
#   [NODES=1] [BATCH=500] [TOP=12] Benchmarks/pg_cost.sh [DEVICES=100000] [CONCURRENCY=200]
# To look inside: EXPLAIN_AT=N prints the claim's plans once N are delivered (to EXPLAIN_OUT, /tmp/claim-explain.txt);
# PG_SETTINGS="session_preload_libraries=auto_explain auto_explain.log_min_duration=50" logs slow statements' plans,
# and PG_LOG_OUT=FILE keeps PostgreSQL's log.
# The send has no media (no quota or fetch enters). The devices are written by SQL before the send, and the
# statistics are reset after that, so they hold the send alone: the fan-out into the queue, the claims, the settles,
# the counts, the leader's periodic work. Watching for the end costs the database nothing: the sandbox's count of
# accepted notifications is read, then the database is asked once, as another role (left out of the statements).
# Release build (BIN=path/to/richpush measures another build). Needs Debian's postgresql. PostgreSQL runs with
# synchronous_commit=off, as in Benchmarks/cluster.sh. Everything shares this machine's cores.
set -euo pipefail
cd "$(dirname "$0")/.."
devices=${1:-100000}
concurrency=${2:-200}
nodes=${NODES:-1}
top=${TOP:-12}
[[ $devices =~ ^[0-9]+$ && $devices -ge 1000 && $devices -le 10000000 ]] || { echo "DEVICES must be from 1000 to 10000000"; exit 2; }
[[ $nodes =~ ^[1-8]$ ]] || { echo "NODES must be from 1 to 8"; exit 2; }
[[ -n ${BIN:-} ]] || swift build -c release --product richpush >/dev/null
bin=$(realpath "${BIN:-.build/release/richpush}")
source Scripts/lib/postgres.sh
source Benchmarks/lib/sandbox.sh
scratch_and_cleanup
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait "${pids[@]}" 2>/dev/null || true; stop_postgres
  [[ -n ${PG_LOG_OUT:-} ]] && cp "$dir/pg.log" "$PG_LOG_OUT"; rm -rf "$dir"' EXIT
start_postgres "$dir" shared_preload_libraries=pg_stat_statements pg_stat_statements.track=all \
  pg_stat_statements.max=1000 synchronous_commit=off shared_buffers=256MB max_connections=300 ${PG_SETTINGS:-}
psql() { "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -At -v ON_ERROR_STOP=1 "$@"; }
psql -U richpush -d postgres -c "CREATE DATABASE bench" -c "CREATE ROLE watcher LOGIN SUPERUSER" >/dev/null
psql -U richpush -d bench -c "CREATE EXTENSION pg_stat_statements" >/dev/null
url="postgres://richpush@127.0.0.1:$PG_PORT/bench?sslmode=disable"
watch() { psql -U watcher -d bench -F $'\t' -c "$1"; }
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# The database's CPU in ticks, as "total backends exited other": the postmaster and its children, running or reaped
# (cutime + cstime: autovacuum workers end after each table); the connections' backends ("postgres: richpush …");
# the children that ended; the rest (checkpointer, WAL writer, autovacuum launcher, the postmaster itself).
pg_cpu() {
  local own exited backends=0 other=0 c t
  own=$(awk '{print $14 + $15}' "/proc/$PG_PID/stat")
  exited=$(awk '{print $16 + $17}' "/proc/$PG_PID/stat")
  for c in $(pgrep -P "$PG_PID"); do
    t=$(cpu "$c" 2>/dev/null) || continue
    if tr '\0' ' ' < "/proc/$c/cmdline" 2>/dev/null | grep -q "^postgres: richpush "; then
      backends=$((backends + t))
    else
      other=$((other + t))
    fi
  done
  echo "$((own + exited + backends + other)) $backends $exited $((own + other))"
}

start_sandbox "$bin" --record-limit-small
admin=bench-admin-key-0001
cat > "$dir/config.json" <<JSON
{"workers": {"batch_size": ${BATCH:-500}, "concurrency": $concurrency}}
JSON
"$bin" migrate --database "$url" >/dev/null
nodepids=()
bases=()
for i in $(seq "$nodes"); do
  mkdir -p "$dir/node-$i"
  (cd "$dir/node-$i" && RICHPUSH_CREDENTIALS_KEY_FILE="$dir/credentials.key" exec "$bin" serve --port 0 \
    --config "$dir/config.json" --database "$url" --node-id "node-$i" --sandbox-dir "$dir/sandbox" \
    --external-apns-port "$apns_port" --external-fcm-port "$fcm_port" --admin-key "$admin" --rate-limit 1000000 \
    > "$dir/node-$i.log" 2>&1) &
  nodepids+=($!)
  pids+=($!)
  for _ in $(seq 300); do grep -q '"listening"' "$dir/node-$i.log" 2>/dev/null && break; sleep 0.1; done
  bases+=("$(grep -m1 '"listening"' "$dir/node-$i.log" | python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['listening'])")")
done
base=${bases[0]}
created=$(curl -s -XPOST "$base/v1/apps" -H "Authorization: Bearer $admin" -d '{"name":"Bench","bundle_id":"com.example.app"}')
app=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['app']['id'])" "$created")
key=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['api_key'])" "$created")
watch "INSERT INTO devices (app_id, token, platform, provider, updated_at)
  SELECT '$app', lpad(to_hex(g), 64, '0'), 'ios', 'apns', now() FROM generate_series(1, $devices) g" >/dev/null
watch "ANALYZE devices" >/dev/null
accepted() { curl -s "$sandbox_admin/apns/stats" | python3 -c "import json,sys; print(json.load(sys.stdin)['accepted'])"; }
already=$(accepted)
echo "pg_cost: $devices devices, one notification to all; $nodes node(s), worker concurrency $concurrency; PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}'); $(nproc) cores shared by the nodes, PostgreSQL and the sandbox"
sleep 2  # the nodes' start-up work settles
watch "SELECT pg_stat_statements_reset()" >/dev/null
watch "SELECT pg_stat_reset_shared('wal')" >/dev/null
before_pg=$(pg_cpu)
before_nodes=0
for p in "${nodepids[@]}"; do before_nodes=$((before_nodes + $(cpu "$p"))); done
start=$(date +%s.%N)
status=$(curl -s -o "$dir/sent.json" -w '%{http_code}' -XPOST "$base/v1/apps/$app/notifications" -H "Authorization: Bearer $key" \
  -d '{"title":"Flash sale","body":"40% off until midnight","audience":{"all":true}}')
[[ $status == 202 ]] || { echo "the send was answered $status: $(cat "$dir/sent.json")"; exit 1; }
if [[ -n ${EXPLAIN_AT:-} ]]; then  # EXPLAIN_AT=N: once N are accepted, the claim's plan with its buffers (rolled back)
  ( for _ in $(seq 3000); do [[ $(($(accepted) - already)) -ge $EXPLAIN_AT ]] && break; sleep 0.1; done
    python3 - Sources/RichPushServer/Storage/Postgres/PostgresStatements.swift > "$dir/explain.sql" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
sql = text.split("struct Claim: PostgresPreparedStatement")[1].split('static let sql = """')[1].split('"""')[0]
# As the nodes run it: prepared, with the plan PostgreSQL keeps for a prepared statement (generic), and with one
# planned for these values (custom).
for mode in ("force_generic_plan", "force_custom_plan"):
    print(f"SET plan_cache_mode = {mode};\nBEGIN;\nPREPARE claim(timestamptz, int8, text, timestamptz, int8, text[], int8[]) AS {sql};")
    print(f"EXPLAIN (ANALYZE, BUFFERS) EXECUTE claim(now(), 64, 'explain', now() + interval '1 minute', 64, '{{}}', '{{}}');")
    print("ROLLBACK;")
PY
    psql -U watcher -d bench -f "$dir/explain.sql" > "$dir/explain" 2>&1 || true
    cp "$dir/explain" "${EXPLAIN_OUT:-/tmp/claim-explain.txt}" ) &
fi
for _ in $(seq 3000); do
  [[ $(($(accepted) - already)) -ge $devices ]] && break
  sleep 0.2
done
# Every send arrived; the last settles may still be on their way.
for _ in $(seq 300); do
  [[ $(watch "SELECT count(*) FROM deliveries WHERE state = 'delivered'") -ge $devices ]] && break
  sleep 0.1
done
end=$(date +%s.%N)
sleep 1  # the last counts and the leader's next round land in the statistics too
after_pg=$(pg_cpu)
after_nodes=0
for p in "${nodepids[@]}"; do after_nodes=$((after_nodes + $(cpu "$p"))); done
n=$(watch "SELECT count(*) FROM deliveries WHERE state = 'delivered'")
watch "SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal" > "$dir/wal"
watch "SELECT s.calls, s.total_exec_time, s.rows, s.wal_bytes, s.shared_blks_hit + s.shared_blks_read,
    regexp_replace(s.query, '\s+', ' ', 'g')
  FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid WHERE r.rolname = 'richpush'
  ORDER BY s.total_exec_time DESC" > "$dir/statements"
python3 - "$n" "$start" "$end" "$before_pg" "$after_pg" "$before_nodes" "$after_nodes" "$ticks" "$dir/wal" "$dir/statements" "$top" "$nodes" <<'PY'
import sys
n, start, end, b_pg, a_pg, b_nodes, a_nodes, ticks, wal_file, statements_file, top, nodes = sys.argv[1:]
n = int(n); ticks = float(ticks); k = 1000 / max(n, 1)
seconds = float(end) - float(start)
pg, backends, exited, other = [(int(a) - int(b)) / ticks for a, b in zip(a_pg.split(), b_pg.split())]
node = (int(a_nodes) - int(b_nodes)) / ticks
records, fpi, wal = open(wal_file).read().split("\t")
rows = []
for line in open(statements_file):
    f = line.rstrip("\n").split("\t")
    if len(f) < 6: continue
    rows.append((int(f[0]), float(f[1]), int(f[2]), int(f[3] or 0), int(f[4] or 0), f[5]))
calls = sum(r[0] for r in rows); ms = sum(r[1] for r in rows); stmt_wal = sum(r[3] for r in rows)
print(f"  {n} delivered in {seconds:.1f} s = {n / seconds:.0f}/s")
who = "the node's" if nodes == "1" else "the nodes'"
print(f"  per 1,000 deliveries: PostgreSQL CPU {pg * k:.3f} s; {who} CPU {node * k:.3f} s; "
      f"WAL {int(wal) * k / 1024:.0f} KiB in {int(records) * k:.0f} records ({int(fpi) * k:.1f} full pages); "
      f"{calls * k:.1f} statements taking {ms * k:.0f} ms to execute")
print(f"  PostgreSQL's CPU per 1,000 deliveries: the connections' backends {backends * k:.3f} s, processes that ended "
      f"(autovacuum workers) {exited * k:.3f} s, the rest (checkpointer, WAL writer, launcher) {other * k:.3f} s")
print(f"  the statements, by execution time (per 1,000 deliveries; {len(rows)} kinds, the first {top}):")
print("    share   calls   exec ms     rows  WAL KiB  statement")
for c, t, r, w, _, q in rows[: int(top)]:
    share = 100 * t / ms if ms else 0
    print(f"   {share:5.1f} % {c * k:7.1f} {t * k:9.1f} {r * k:8.0f} {w * k / 1024:8.1f}  {q[:110]}")
print(f"  inputs of the capacity model: db_cpu_s_per_1000={pg * k:.3f} node_cpu_s_per_1000={node * k:.3f} "
      f"wal_bytes_per_delivery={int(wal) / max(n, 1):.0f} statements_per_1000={calls * k:.1f}")
PY
