#!/usr/bin/env bash
# Runs every server scenario of the MCP conformance suite against
# examples/mcp_conformance_server.py (agentrt's hosting layer over streamable
# HTTP) and prints a pass/fail table.  Exits non-zero if any check fails, a
# scenario cannot run, or the server dies.
#
# Needs Node >= 20 with npm (the suite is installed once, pinned, under
# $AGENTRT_CACHE) and the project venv.  Environment knobs:
#   PYTHON               interpreter with agentrt installed (default .venv/bin/python)
#   AGENTRT_CACHE        cache root (default ~/.cache/agentrt)
#   CONFORMANCE_JOBS     scenarios run concurrently (default 2)
#   CONFORMANCE_RESULTS  where to keep per-scenario results (default: a temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE_VERSION=0.1.13   # 0.1.14+ needs Node 22 (fs.globSync)
SUITE="@modelcontextprotocol/conformance@${SUITE_VERSION}"
PYTHON=${PYTHON:-.venv/bin/python}
CACHE=${AGENTRT_CACHE:-$HOME/.cache/agentrt}
PREFIX="$CACHE/npm/conformance-$SUITE_VERSION"
JOBS=${CONFORMANCE_JOBS:-2}
RESULTS=${CONFORMANCE_RESULTS:-$(mktemp -d -t mcp-conformance.XXXXXX)}
SCENARIO_TIMEOUT=120

command -v node >/dev/null || { echo "mcp-conformance: node is not installed" >&2; exit 2; }
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
  echo "mcp-conformance: $SUITE needs Node >= 20, found $(node --version)" >&2
  exit 2
fi

# The suite, installed once per version (no npx: one resolution, then plain node).
BIN="$PREFIX/node_modules/.bin/conformance"
if [ ! -x "$BIN" ]; then
  echo "installing $SUITE into $PREFIX"
  mkdir -p "$PREFIX"
  npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$PREFIX" "$SUITE" >&2
fi

PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
URL="http://127.0.0.1:$PORT/mcp"
mkdir -p "$RESULTS"
SERVER_LOG="$RESULTS/server.log"

"$PYTHON" examples/mcp_conformance_server.py --port "$PORT" >"$SERVER_LOG" 2>&1 &
SERVER_PID=$!
stop_server() {
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -INT "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
  fi
}
trap stop_server EXIT

ready=0
for _ in $(seq 150); do
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then break; fi
  if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then ready=1; break; fi
  sleep 0.2
done
if [ "$ready" != 1 ]; then
  echo "mcp-conformance: the example server did not come up on $URL" >&2
  cat "$SERVER_LOG" >&2
  exit 1
fi

mapfile -t SCENARIOS < <("$BIN" list --server | sed -n 's/^  - //p')
if [ "${#SCENARIOS[@]}" -eq 0 ]; then
  echo "mcp-conformance: the suite listed no server scenarios" >&2
  exit 1
fi
echo "running ${#SCENARIOS[@]} server scenarios of $SUITE against $URL ($JOBS at a time)"

run_one() {  # scenario -> $RESULTS/<scenario>/{out.txt,exit,started,ended,server-*/checks.json}
  local scenario=$1 dir="$RESULTS/$1" code
  mkdir -p "$dir"
  date +%s.%N >"$dir/started"
  set +e
  timeout "$SCENARIO_TIMEOUT" "$BIN" server --url "$URL" --scenario "$scenario" -o "$dir" \
    >"$dir/out.txt" 2>&1
  code=$?
  set -e
  echo "$code" >"$dir/exit"
  date +%s.%N >"$dir/ended"
}
export -f run_one
export BIN URL RESULTS SCENARIO_TIMEOUT

started=$(date +%s.%N)
printf '%s\n' "${SCENARIOS[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_one "$1"' _ {}
ended=$(date +%s.%N)

server_alive=1
kill -0 "$SERVER_PID" 2>/dev/null || server_alive=0

"$PYTHON" - "$RESULTS" "$started" "$ended" "$server_alive" "${SCENARIOS[@]}" <<'EOF'
"""Per-scenario table from the suite's checks.json files; exit 1 on any failure."""
import json
import pathlib
import sys

results, elapsed, server_alive, scenarios = (
    pathlib.Path(sys.argv[1]),
    float(sys.argv[3]) - float(sys.argv[2]),
    sys.argv[4] == "1",
    sys.argv[5:],
)
rows, bad = [], []
for name in scenarios:
    where = results / name
    code = int((where / "exit").read_text())
    seconds = float((where / "ended").read_text()) - float((where / "started").read_text())
    files = sorted(where.glob("*/checks.json"))
    counts = {"SUCCESS": 0, "FAILURE": 0, "WARNING": 0}
    if files:
        for check in json.loads(files[-1].read_text()):
            if check.get("status") in counts:
                counts[check["status"]] += 1
    ok = code == 0 and files and counts["FAILURE"] == 0
    if not ok:
        bad.append(name)
    rows.append((name, counts["SUCCESS"], counts["FAILURE"], counts["WARNING"], seconds,
                 "pass" if ok else f"FAIL (exit {code})"))
width = max(len(r[0]) for r in rows)
print(f"\n{'scenario':<{width}}  passed  failed  warnings  seconds  result")
for name, passed, failed, warned, seconds, verdict in rows:
    print(f"{name:<{width}}  {passed:>6}  {failed:>6}  {warned:>8}  {seconds:>7.1f}  {verdict}")
total = [sum(r[i] for r in rows) for i in (1, 2, 3)]
print(f"{'TOTAL':<{width}}  {total[0]:>6}  {total[1]:>6}  {total[2]:>8}  {elapsed:>7.1f}  "
      f"{len(rows) - len(bad)}/{len(rows)} scenarios passed")
for name in bad:
    print(f"\n--- {name} ---\n" + (results / name / "out.txt").read_text()[-4000:])
if not server_alive:
    print("\nthe example server died during the run; its log:")
    print((results / "server.log").read_text()[-4000:])
sys.exit(1 if bad or not server_alive else 0)
EOF
