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
#   OTHERS=0 bash benches/instructions.sh                 # Concert only, without nginx and HAProxy
#   HISTORY_LOG=1 OTHERS=0 bash benches/instructions.sh   # with the request history written to a file
#   FASTLANE=1 OTHERS=0 bash benches/instructions.sh      # a data dir without and with a fast lane
#                                                         # configured (test mode, the example
#                                                         # offers) that no request uses: what an
#                                                         # idle lane costs the page path
#
# Modes: `cookieless` (every request gets a new admission pass, as with wrk) and `with pass`
# (each connection returns the cookies it was given, as a browser does). Counts include only
# Concert's own user-space instructions; under valgrind SHA-256 runs without the CPU's SHA
# extensions, so the pass signature weighs more here than on real hardware.
# The same count follows for nginx proxy_pass (one process) and HAProxy (one thread) in front of
# the same origin, configured as in benches/compare.sh, with the same client.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/common.sh
source benches/common.sh

SMALL=${SMALL:-2000}
LARGE=${LARGE:-10000}
ORIGIN_PORT=${ORIGIN_PORT:-18180}
CONCERT_PORT=${CONCERT_PORT:-18183}
NGINX_PORT=${NGINX_PORT:-18181}
HAPROXY_PORT=${HAPROXY_PORT:-18182}
OTHERS=${OTHERS:-1}
HISTORY_LOG=${HISTORY_LOG:-0}
FASTLANE=${FASTLANE:-0}

install_missing valgrind:valgrind nginx:nginx-light
[ "$OTHERS" = 0 ] || install_missing haproxy:haproxy
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)

# Profile dist, as shipped: with release's four codegen units the count moved by up to 1.5%
# between builds of the same request path, as code elsewhere changed how they were split.
if [ -z "${CONCERT:-}" ]; then
  CONCERT=$(build_shipped_concert)
fi
cargo build --release --locked --quiet --example exchanges
EXCHANGES=$(target_dir)/release/examples/exchanges

use_workdir

nginx_conf "$work/origin.conf" 1 "server { listen 127.0.0.1:$ORIGIN_PORT; location / { return 200 'ok'; } }"
"$NGINX" -c "$work/origin.conf" -p "$work" &
pids+=("$!")
wait_port "$ORIGIN_PORT"

# Prints the instructions the server started by "$@" executed while answering $1 requests on
# port $2. SIGTERM, not SIGINT: a background job of a script starts with SIGINT ignored, and
# HAProxy leaves it so.
instructions_of() {
  local requests=$1 port=$2 out pid count
  shift 2
  out=$(mktemp "$work/callgrind.XXXXXX")
  # Every run starts without a history log: one left by the run before would be read back at
  # start, and the longer run would be charged for reading more.
  rm -f "$work"/history.jsonl*
  valgrind --tool=callgrind --callgrind-out-file="$out" "$@" >"$work/server.log" 2>&1 &
  pid=$!
  # valgrind takes a few seconds to start the program.
  wait_port "$port" 600
  "$EXCHANGES" "http://127.0.0.1:$port/bench" "$requests" 4 "${exchange_flags[@]}" >/dev/null
  kill -TERM "$pid"
  wait "$pid" || true
  count=$(awk '/^(summary|totals):/ {print $2; exit}' "$out" 2>/dev/null)
  [ -n "$count" ] || { echo "$1 left no count; its log:" >&2; cat "$work/server.log" >&2; return 1; }
  echo "$count"
}

# Instructions per request: the difference between a short and a long run, so start-up and
# shutdown cancel out. $1 = port, then the server's command.
per_request() {
  local small large
  small=$(instructions_of "$SMALL" "$@")
  large=$(instructions_of "$LARGE" "$@")
  echo $(( (large - small) / (LARGE - SMALL) ))
}

echo "instructions per proxied page ($SMALL and $LARGE requests, one worker; $CONCERT)"
mapfile -t concert_args < <(concert_bench_args "$CONCERT_PORT" "$ORIGIN_PORT" 1)
if [ "$HISTORY_LOG" = 1 ]; then
  concert_args+=(-history-log "$work/history.jsonl")
fi
if [ "$FASTLANE" = 1 ]; then
  # Both runs keep their state in a data dir, so the only difference is the lane's two files.
  export CONCERT_ADMIT_SECRET=instructions-bench-secret-0123456789abcdef
  mkdir -p "$work/plain" "$work/lane"
  "$CONCERT" example fastlane 2>/dev/null |
    sed "s#\"origin\": \"[^\"]*\"#\"origin\": \"http://127.0.0.1:$CONCERT_PORT\"#" >"$work/lane/fastlane.json"
  "$CONCERT" example networks 2>/dev/null >"$work/lane/networks.json"
  for mode in cookieless "with pass"; do
    exchange_flags=()
    [ "$mode" = "with pass" ] && exchange_flags=(--keep-cookies)
    for dir in plain lane; do
      printf '%-28s %8d\n' "concert, $mode, $dir" \
        "$(per_request "$CONCERT_PORT" "$CONCERT" "${concert_args[@]}" -data-dir "$work/$dir")"
    done
  done
  exit 0
fi
for mode in cookieless "with pass"; do
  exchange_flags=()
  [ "$mode" = "with pass" ] && exchange_flags=(--keep-cookies)
  printf '%-22s %8d\n' "concert, $mode" "$(per_request "$CONCERT_PORT" "$CONCERT" "${concert_args[@]}")"
done
[ "$OTHERS" = 0 ] && exit 0

exchange_flags=()
# One process: valgrind would not follow a forked worker.
nginx_proxy_conf "$work/nginx.conf" 1 "$ORIGIN_PORT" "$NGINX_PORT"
sed -i '1i master_process off;' "$work/nginx.conf"
printf '%-22s %8d\n' "nginx proxy_pass" "$(per_request "$NGINX_PORT" "$NGINX" -c "$work/nginx.conf" -p "$work")"

haproxy_conf "$work/haproxy.cfg" 1 "$ORIGIN_PORT" "$HAPROXY_PORT"
printf '%-22s %8d\n' "haproxy" "$(per_request "$HAPROXY_PORT" "$HAPROXY" -f "$work/haproxy.cfg" -db)"
