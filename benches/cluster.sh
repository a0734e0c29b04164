#!/usr/bin/env bash
# Proxied-page req/s per instance with -cluster off and on: two instances (one worker each) in
# front of a 1 KiB nginx page, one wrk each (-c32, 5 s), alone and both at once, two rounds.
# Needs nginx, redis-server, wrk and curl; uses ports 18080, 18101, 18102 and 18379. Every run
# is bounded: each wrk run lasts 5 s.
#
#   bash benches/cluster.sh target/release/concert
set -u
BIN=$1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
page=$(head -c 1024 /dev/zero | tr '\0' 'x')
cat >"$W/nginx.conf" <<NG
worker_processes 1; daemon off; error_log $W/ngx.err; pid $W/ngx.pid;
events { worker_connections 4096; }
http { access_log off; server { listen 127.0.0.1:18080;
  location / { return 200 "$page"; } } }
NG
nginx -c "$W/nginx.conf" -p "$W" &
NGX=$!
redis-server --port 18379 --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
  --loglevel warning >/dev/null &
RDS=$!
sleep 1

# Starts an instance on port $1 with the extra flags after it; prints its pid.
start() {
  "$BIN" -listen "127.0.0.1:$1" -upstream http://127.0.0.1:18080 -cap 1000 -max-queue 0 \
    -access-log=false -data-dir= -workers 1 "${@:2}" >"$W/c$1.log" 2>&1 &
  echo "$!"
}

wait_up() {
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$1/_room/healthz" >/dev/null && return
    sleep 0.1
  done
  echo "no $1"
}

# One 5 s wrk per port at once; $1 labels the lines.
measure() {
  local label=$1 pids=() p
  shift
  for p in "$@"; do
    wrk -t1 -c32 -d5s "http://127.0.0.1:$p/page" >"$W/wrk$p.txt" 2>&1 &
    pids+=("$!")
  done
  wait "${pids[@]}"
  for p in "$@"; do
    echo "$label port $p: $(grep Requests/sec "$W/wrk$p.txt") $(grep -E 'Latency' "$W/wrk$p.txt" | head -1)"
  done
}

warm() {
  wrk -t1 -c8 -d1s http://127.0.0.1:18101/page >/dev/null
  wrk -t1 -c8 -d1s http://127.0.0.1:18102/page >/dev/null
}

for round in 1 2; do
  A=$(start 18101)
  B=$(start 18102)
  wait_up 18101
  wait_up 18102
  warm
  measure "round $round off, one alone" 18101
  measure "round $round off, both at once" 18101 18102
  kill "$A" "$B"
  wait "$A" "$B" 2>/dev/null
  cluster=(-cluster redis://127.0.0.1:18379/0 -cluster-name "bench$round")
  A=$(start 18101 "${cluster[@]}")
  B=$(start 18102 "${cluster[@]}")
  wait_up 18101
  wait_up 18102
  warm
  measure "round $round on, one alone" 18101
  measure "round $round on, both at once" 18101 18102
  curl -s -H 'Accept: application/json' http://127.0.0.1:18101/_room/healthz
  echo
  redis-cli -p 18379 info commandstats | grep -E "evalsha|eval:"
  kill "$A" "$B"
  wait "$A" "$B" 2>/dev/null
done
kill "$NGX" "$RDS"
wait 2>/dev/null
