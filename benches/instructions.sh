#!/usr/bin/env bash
# Instructions Concert executes per proxied page, counted by callgrind: unlike requests/s and
# CPU time, the count does not move with the machine's load, so two builds can be compared to
# within a fraction of a percent on a busy shared host. Each mode runs Concert twice under
# callgrind, with a small and a large number of keep-alive requests against a fast nginx origin
# on loopback, and divides the difference in instructions by the difference in requests, so
# start-up and shutdown cancel out.
#
#   bash benches/instructions.sh                          # the dist build (as shipped)
#   CONCERT=/tmp/old-concert bash benches/instructions.sh # any other binary, for an A/B
#   SMALL=1000 LARGE=5000 bash benches/instructions.sh
#
# Modes: `cookieless` (every request gets a new admission pass, as with wrk) and `with pass`
# (each connection returns the cookies it was given, as a browser does). Counts include only
# Concert's own user-space instructions; under valgrind SHA-256 runs without the CPU's SHA
# extensions, so the pass signature weighs more here than on real hardware.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/common.sh
source benches/common.sh

SMALL=${SMALL:-2000}
LARGE=${LARGE:-10000}
ORIGIN_PORT=${ORIGIN_PORT:-18180}
CONCERT_PORT=${CONCERT_PORT:-18183}

install_missing valgrind:valgrind nginx:nginx-light
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

# Profile dist, as shipped: with release's four codegen units the count moved by up to 1.5%
# between builds of the same request path, as code elsewhere changed how they were split.
if [ -z "${CONCERT:-}" ]; then
  CONCERT=$(build_shipped_concert)
fi
cargo build --release --locked --quiet --example exchanges
EXCHANGES=target/release/examples/exchanges

work=$(mktemp -d)
origin_pid=
cleanup() {
  if [ -n "$origin_pid" ]; then kill "$origin_pid" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

nginx_conf "$work/origin.conf" 1 "server { listen 127.0.0.1:$ORIGIN_PORT; location / { return 200 'ok'; } }"
"$NGINX" -c "$work/origin.conf" -p "$work" &
origin_pid=$!
wait_port "$ORIGIN_PORT"

# Prints the instructions Concert executed while answering $1 requests (mode flags follow).
instructions_for() {
  local requests=$1 out="$work/callgrind.$1" pid
  shift
  valgrind --tool=callgrind --callgrind-out-file="$out" "$CONCERT" \
    -listen "127.0.0.1:$CONCERT_PORT" -upstream "http://127.0.0.1:$ORIGIN_PORT" \
    -cap 1000000 -max-queue 0 -access-log=false -data-dir "" -workers 1 >"$work/concert.log" 2>&1 &
  pid=$!
  # valgrind takes a few seconds to start the program.
  wait_port "$CONCERT_PORT" 600
  "$EXCHANGES" "http://127.0.0.1:$CONCERT_PORT/bench" "$requests" 4 "$@" >/dev/null
  kill -INT "$pid"
  wait "$pid" || { echo "Concert did not stop cleanly; its log:" >&2; cat "$work/concert.log" >&2; return 1; }
  awk '/^(summary|totals):/ {print $2; exit}' "$out"
}

echo "instructions per proxied page ($CONCERT; $SMALL and $LARGE requests, one worker)"
for mode in cookieless "with pass"; do
  flags=()
  [ "$mode" = "with pass" ] && flags=(--keep-cookies)
  small=$(instructions_for "$SMALL" "${flags[@]}")
  large=$(instructions_for "$LARGE" "${flags[@]}")
  printf '%-12s %8d\n' "$mode" $(( (large - small) / (LARGE - SMALL) ))
done
