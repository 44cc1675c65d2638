# Sourced by scripts that need a PostgreSQL of their own: `start_postgres DIR` makes a cluster in DIR (Debian's
# postgresql; as the postgres user when run as root, since PostgreSQL refuses root), starts it on a free loopback
# port with the extra settings given after DIR, and sets PG_PORT, PG_PID and PG_BIN; `stop_postgres` stops it.
start_postgres() {
  local dir=$1
  shift
  PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [[ -x $PG_BIN/initdb ]] || { echo "postgresql is missing: apt-get install postgresql" >&2; return 1; }
  local as_pg=()
  if [[ $(id -u) == 0 ]]; then chown postgres "$dir"; as_pg=(setpriv --reuid=postgres --regid=postgres --init-groups --); fi
  PG_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "${as_pg[@]}" "$PG_BIN/initdb" -D "$dir/pg" -U richpush -A trust -E UTF8 --no-instructions >/dev/null
  local settings=()
  for s in "$@"; do settings+=(-c "$s"); done
  "${as_pg[@]}" "$PG_BIN/postgres" -D "$dir/pg" -p "$PG_PORT" -k "$dir" -c listen_addresses=127.0.0.1 "${settings[@]}" > "$dir/pg.log" 2>&1 &
  PG_PID=$!
  for _ in $(seq 200); do grep -q "ready to accept" "$dir/pg.log" 2>/dev/null && return 0; sleep 0.1; done
  echo "PostgreSQL did not start: $(tail -5 "$dir/pg.log")" >&2
  return 1
}

stop_postgres() {
  [[ -n ${PG_PID:-} ]] && kill -INT "$PG_PID" 2>/dev/null && wait "$PG_PID" 2>/dev/null
  PG_PID=
}
