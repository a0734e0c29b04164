#!/usr/bin/env bash
# Paired rounds: nginx proxy_pass (N), HAProxy (H) and Concert (C) in front of the same fast
# origin, one after the other within each round, each proxy started afresh for its run, for many
# short rounds; which proxy goes first rotates from round to round. On a shared VM one proxy's
# rate moves by 15-30% from one minute to the next, so a single long run orders proxies that are
# close by chance; runs next to each other share the machine's mood. Beside the medians, the
# script counts in how many rounds Concert had a rate at least that of each other proxy, and a
# p99 no higher: a difference the machine can show holds in most rounds, noise splits them about
# evenly.
#
#   bash benches/rounds.sh                  # 12 rounds of 5 s, one worker and two
#   ROUNDS=21 DURATION=5 WORKERS=2 bash benches/rounds.sh
#
# Layout as in benches/compare.sh: wrk (-t1 -c64) and the origin share core 1; with one worker
# the proxy is pinned to core 0, with two its threads go where the scheduler puts them.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/common.sh
source benches/common.sh

ROUNDS=${ROUNDS:-12}
DURATION=${DURATION:-5}
CONNS=${CONNS:-64}
WORKERS=${WORKERS:-"1 2"}
ORIGIN_PORT=${ORIGIN_PORT:-18090}
PROXY_PORT=${PROXY_PORT:-18091}

install_missing wrk:wrk nginx:nginx-light haproxy:haproxy
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
CONCERT=$(build_shipped_concert)

use_workdir

# Command prefixes pinning to core 0 (the proxy) and core 1 (wrk and the origin); empty on a
# machine with one core. taskset execs the command, so $! of a started server is its own pid.
core0=() core1=()
if [ "$(nproc)" -ge 2 ]; then core0=(taskset -c 0) core1=(taskset -c 1); fi

nginx_conf "$work/origin.conf" 1 "server { listen 127.0.0.1:$ORIGIN_PORT; location / { return 200 'ok'; } }"
"${core1[@]}" "$NGINX" -c "$work/origin.conf" -p "$work" &
pids+=("$!")
wait_port "$ORIGIN_PORT"

# Starts target $1 with $2 workers in the background; its pid is in $! afterwards.
start_target() {
  local pin=()
  [ "$2" = 1 ] && pin=("${core0[@]}")
  case $1 in
    N) nginx_proxy_conf "$work/nginx.conf" "$2" "$ORIGIN_PORT" "$PROXY_PORT"
       "${pin[@]}" "$NGINX" -c "$work/nginx.conf" -p "$work" >/dev/null 2>&1 & ;;
    H) haproxy_conf "$work/haproxy.cfg" "$2" "$ORIGIN_PORT" "$PROXY_PORT"
       "${pin[@]}" "$HAPROXY" -f "$work/haproxy.cfg" -db >/dev/null 2>&1 & ;;
    C) mapfile -t concert_args < <(concert_bench_args "$PROXY_PORT" "$ORIGIN_PORT" "$2")
       "${pin[@]}" "$CONCERT" "${concert_args[@]}" >/dev/null 2>&1 & ;;
  esac
}

# One timed run against the proxy on $PROXY_PORT: "req/s p99_ms".
measure() {
  local out
  "${core1[@]}" wrk -t1 -c"$CONNS" -d1s "http://127.0.0.1:$PROXY_PORT/bench" >/dev/null 2>&1
  out=$("${core1[@]}" wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "http://127.0.0.1:$PROXY_PORT/bench" 2>&1)
  echo "$(awk '/Requests\/sec/ {print $2}' <<<"$out") $(to_ms "$(awk '$1=="99%" {print $2}' <<<"$out")")"
}

echo "origin: nginx 'return 200' on 127.0.0.1:$ORIGIN_PORT; wrk -t1 -c$CONNS; $ROUNDS rounds of ${DURATION}s; each proxy started afresh per run"
for workers in $WORKERS; do
  results="$work/results-$workers"
  : >"$results"
  for round in $(seq 1 "$ROUNDS"); do
    # Each round starts with the next proxy (N H C, H C N, C N H, ...): whatever favours a
    # place in the order (the first run after the origin idled, sockets left in TIME_WAIT by
    # the run before) falls on every proxy alike.
    order=(N H C N H)
    first=$(((round - 1) % 3))
    for target in "${order[@]:first:3}"; do
      start_target "$target" "$workers"
      pid=$!
      pids+=("$pid")
      wait_port "$PROXY_PORT"
      read -r rate p99 <<<"$(measure)"
      echo "$round $target $rate $p99" >>"$results"
      kill "$pid"
      wait "$pid" 2>/dev/null || true
    done
  done
  echo
  echo "== $workers worker(s) per proxy =="
  awk '
    { rate[$1, $2] = $3; p99[$1, $2] = $4; rounds[$1] = 1 }
    function median(list, n,   i, j, t) {
      for (i = 2; i <= n; i++) for (j = i; j > 1 && list[j-1] > list[j]; j--) {
        t = list[j]; list[j] = list[j-1]; list[j-1] = t }
      return n % 2 ? list[(n+1)/2] : (list[n/2] + list[n/2+1]) / 2
    }
    END {
      split("N H C", order, " "); name["N"] = "nginx proxy_pass"; name["H"] = "haproxy"; name["C"] = "concert"
      n = 0; for (r in rounds) n++
      printf "%-18s %10s %10s   %s\n", "target", "req/s", "p99 ms", "req/s by round"
      for (k = 1; k <= 3; k++) {
        t = order[k]; line = ""
        for (r = 1; r <= n; r++) { a[r] = rate[r, t]; b[r] = p99[r, t]; line = line sprintf(" %d", rate[r, t]) }
        printf "%-18s %10d %10.2f  %s\n", name[t], median(a, n), median(b, n), line
      }
      for (k = 1; k <= 2; k++) {
        t = order[k]; faster = 0; shorter = 0
        for (r = 1; r <= n; r++) {
          if (rate[r, "C"] >= rate[r, t]) faster++
          if (p99[r, "C"] <= p99[r, t]) shorter++
        }
        printf "concert vs %-16s rate at least as high in %d of %d rounds, p99 no higher in %d of %d\n", name[t] ":", faster, n, shorter, n
      }
    }' "$results"
done
