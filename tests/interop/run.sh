#!/usr/bin/env bash
# The TypeScript clients against both servers, each client on a server of its own
# (a fresh ledger; the 2.x servers each with a fresh SQLite store):
#
#   ts_client.mjs    (SDK 1.x, 2025-11-25 initialize)  over stdio  against server.py       on mcp 1.x
#   ts_client.mjs    (SDK 1.x, 2025-11-25 initialize)  over HTTP   against the 2.x ledger server  on mcp 2.x
#   ts_client_v2.mjs (SDK 2.x, 2026-07-28 discover)    over HTTP   against the 2.x ledger server  on mcp 2.x
#
#   tests/interop/run.sh PYTHON_1X PYTHON_2X     e.g. tests/interop/run.sh .venv/bin/python .venv-2x/bin/python
#
# Every client runs even if one fails; exit 0 only if all passed. Loopback only; every
# wait is bounded; the servers are stopped on exit, whatever happens.
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: $0 PYTHON_1X PYTHON_2X" >&2; exit 2; }
python1x=$1
python2x=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
CLIENT_SECONDS=120  # a whole client run; the SDKs' own request timeout is 60 s
READY_SECONDS=20    # for a server to accept connections
STOP_SECONDS=5      # for a server to exit on SIGTERM, before SIGKILL

# What the lockfile pins, installed again if it changed since (npm writes node_modules/.package-lock.json).
[ "$here/node_modules/.package-lock.json" -nt "$here/package-lock.json" ] || (cd "$here" && npm ci --no-audit --no-fund --silent)

tmp=$(mktemp -d)
server=""  # the one 2.x server running, if any
log=""     # its decision log (--verbose)
cleanup() {
  [ -z "$server" ] || stop "$server"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

stop() {  # SIGTERM, then SIGKILL if it is still there after STOP_SECONDS
  local pid=$1 tick
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((tick = 0; tick < STOP_SECONDS * 10; tick++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

free_port() {  # a loopback port nobody listens on now
  "$python2x" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_2x() {  # start the 2.x ledger server over HTTP with a fresh store; sets server, log and url
  local dir port tick
  dir=$(mktemp -d "$tmp/2x.XXXX")
  port=$(free_port)
  log=$dir/server.log
  "$python2x" -m mcp_idempotency_demo.ledger_server --transport http --host 127.0.0.1 --port "$port" --placement params \
    --store "sqlite:$dir/store.db" --verbose >"$log" 2>&1 &
  server=$!
  url=http://127.0.0.1:$port/mcp
  for ((tick = 0; tick < READY_SECONDS * 10; tick++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  echo "the 2.x ledger server did not come up on $url:" >&2
  cat "$log" >&2
  return 1
}

failed=0
client() {  # run one client, bounded; a failure is counted, not fatal, and shows the server's decisions
  echo
  echo "=== node ${*#"$root/"}"
  timeout "$CLIENT_SECONDS" node "$@" && return 0
  echo "(exit $?)"
  failed=$((failed + 1))
  [ -z "$log" ] || sed 's/^/  server: /' "$log"
}

client "$here/ts_client.mjs" stdio "$python1x" "$root/server.py"

start_2x
client "$here/ts_client.mjs" http "$url"
stop "$server"; server=""

start_2x
client "$here/ts_client_v2.mjs" "$url"
stop "$server"; server=""

echo
if [ "$failed" -ne 0 ]; then echo "interop: $failed client(s) failed"; exit 1; fi
echo "interop: every client passed"
