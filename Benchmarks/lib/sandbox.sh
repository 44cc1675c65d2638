# Sourced by the benchmarks that run the emulators in their own process.

# A scratch folder `dir` and a list `pids` of background processes, both cleaned up when the script ends.
scratch_and_cleanup() {
  dir=$(mktemp -d)
  pids=()
  trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"' EXIT
}

# start_sandbox BIN [ARGS...]: `richpush sandbox` on one thread in $dir/sandbox, in the background (its pid added to
# pids), once it serves; sets apns_port, fcm_port and sandbox_admin (the admin API's URL). SANDBOX_BIN=path runs the
# emulators of another build than the node's (an older node measured against today's emulators).
start_sandbox() {
  local bin=${SANDBOX_BIN:-$1}
  shift
  mkdir -p "$dir/sandbox"
  # SANDBOX_CPU=N: the emulators on that core alone (taskset), so that what they do does not share the node's.
  ${SANDBOX_CPU:+taskset -c "$SANDBOX_CPU"} "$bin" sandbox --dir "$dir/sandbox" --threads 1 "$@" > "$dir/sandbox.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q "sandbox: serving" "$dir/sandbox.out" 2>/dev/null && break; sleep 0.1; done
  read -r apns_port fcm_port sandbox_admin < <(python3 - "$dir/sandbox.out" <<'PY'
import json, sys, urllib.parse
s = json.loads(open(sys.argv[1]).read().split("sandbox: serving")[0])
print(s["apns"]["port"], urllib.parse.urlparse(s["fcm"]["url"]).port, s["admin"])
PY
  )
}
