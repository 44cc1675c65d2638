#!/usr/bin/env bash
# Installs what the benchmarks run beside RichPush, on a fresh machine: Debian's wrk (loads the API), nghttp2-client
# (h2load), nginx (serves the same file as the media benchmark), postgresql (the cluster benchmark); the Python peers
# (aioapns, firebase-admin, matplotlib) into the project's .venv/. Then run the benchmarks with .venv/bin first on
# PATH, for example:  PATH=$PWD/.venv/bin:$PATH swift run -c release richpush-bench apns
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
need=()
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v h2load >/dev/null 2>&1 || need+=(nghttp2-client)
command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || need+=(nginx)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
command -v perf >/dev/null 2>&1 || need+=(linux-perf)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if ((${#need[@]})); then
  echo "installing ${need[*]} (apt)"
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
[[ -x .venv/bin/python3 ]] || python3 -m venv .venv
.venv/bin/python3 -m pip install -q --disable-pip-version-check -r Scripts/python-peers.txt -r Benchmarks/requirements.txt
echo "benchmarks: ready (PATH=\$PWD/.venv/bin:\$PATH)"
