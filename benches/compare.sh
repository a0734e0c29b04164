#!/usr/bin/env bash
# Load comparison on loopback: the same fast origin reached directly (D), through a byte relay that
# does no HTTP work (R, tools/relay.rs: the ceiling any proxy could reach), through nginx
# proxy_pass with an upstream keep-alive pool (N), through HAProxy (H) and through Concert with a
# cap that never binds (C). Runs are interleaved (D R N H C, D R N H C, …) so drift hits all
# alike; the median of the rounds is reported. Everything listens on 127.0.0.1 and every run is
# bounded in time.
#
# Two layouts on the two-core machine:
#   LAYOUT=shared (default)  the proxy and the origin pinned together to core 0, wrk (-t1) alone on
#                            core 1: Concert as deployed, on the origin's host, where every
#                            microsecond it spends per request is taken from the origin. The
#                            origin answers `return 200` with a 1 KiB page. Beside requests/s
#                            and latency, each row gives the CPU time per request of the proxy and
#                            of the origin (user + system, from /proc, workers included), and the
#                            proxy's own cost: proxy + origin CPU per request minus what the origin
#                            spends per request when wrk reaches it directly (row D, same core), and
#                            core time per request (1 s / req/s) minus the origin's alone.
#                            Two workers share core 0 as well.
#   LAYOUT=split             wrk and the origin share core 1, the proxy runs on core 0 (one worker)
#                            or where the scheduler puts it (two); the origin answers `return 200
#                            'ok'` (2 bytes). The generator's core sets the ceiling there, so the
#                            proxies come out close together; CPU per request tells them apart.
# On a shared VM both drift between invocations (±15%), but runs next to each other agree
# closely: compare rows of one run.
#
#   bash benches/compare.sh            # defaults below
#   ROUNDS=5 DURATION=10 CONNS=64 WORKERS="1 2" bash benches/compare.sh
#   BODY=20480 bash benches/compare.sh  # the origin answers with a static file of that many
#                                       # bytes instead of its `return 200` body
#   LAYOUT=split bash benches/compare.sh
#   MODE=asset bash benches/compare.sh  # a private asset fetched with a valid concert_admit pass
#                                       # (per-pass and global asset pools) instead of a gated page
#   MODE=browser bash benches/compare.sh # a gated page requested with a valid pass, as a returning
#                                       # browser does (the default page mode sends no cookie, so
#                                       # Concert signs a new pass for every request)
#   OPEN_LOOP=0 bash benches/compare.sh # skip the fixed-rate latency runs (page mode)
#   OPEN_ROUNDS=5 OPEN_DURATION=8 bash benches/compare.sh # more and longer fixed-rate runs
#   MODE=tls bash benches/compare.sh    # HTTPS: nginx, HAProxy and Concert each terminating TLS
#                                       # (same ECDSA P-256 certificate, TLS 1.3, X25519) in front
#                                       # of the same plain origin; handshakes/s with a new
#                                       # connection per request (wrk -H 'Connection: close'),
#                                       # and requests/s over kept-alive connections
#   CONCERT=path/to/binary bash benches/compare.sh # another build (default: as `make build` ships)
#
# After the closed-loop table (wrk), page mode also measures latency open-loop: requests sent at a
# fixed 50/80/95% of the best proxy's throughput by tools/loadgen.rs, which counts latency from
# when each request was due, so stalls are not hidden by the load generator slowing down. Near
# saturation one run's tail says more about that moment's share of the machine than about the
# proxy, so each rate runs in interleaved rounds (N H C, N H C, …) and the medians are reported.
# Their CPU column is each proxy's CPU time per request at that same offered load: what it leaves
# of the machine to an origin running beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=benches/common.sh
source benches/common.sh

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8}
CONNS=${CONNS:-64}
WORKERS=${WORKERS:-"1 2"}
ORIGIN_PORT=${ORIGIN_PORT:-18080}
NGINX_PORT=${NGINX_PORT:-18081}
HAPROXY_PORT=${HAPROXY_PORT:-18082}
CONCERT_PORT=${CONCERT_PORT:-18083}
RELAY_PORT=${RELAY_PORT:-18084}
MODE=${MODE:-page}
OPEN_LOOP=${OPEN_LOOP:-1}
OPEN_ROUNDS=${OPEN_ROUNDS:-3}
OPEN_DURATION=${OPEN_DURATION:-5}
BODY=${BODY:-}
LAYOUT=${LAYOUT:-shared}
case $LAYOUT in
  shared|split) ;;
  *) echo "LAYOUT must be shared or split, not '$LAYOUT'" >&2; exit 2 ;;
esac
if [ -n "$BODY" ] && ! [[ "$BODY" =~ ^[0-9]+$ ]]; then
  echo "BODY must be a number of bytes, not '$BODY'" >&2
  exit 2
fi

BENCH_PATH=/bench
CONCERT_EXTRA=()
case $MODE in
  page) ;;
  asset)
    # Pools sized so one pass over CONNS connections is never throttled: the cost measured is
    # the pass check and both pool admissions, not refusals.
    BENCH_PATH=/static/app.css
    CONCERT_EXTRA=(-assets "/static/*" -asset-user-cap-h1 100000 -asset-user-cap-h2 100000
                   -asset-cap 1000000 -admit-ttl 1h) ;;
  browser)
    # Long-lived, so the pass stays fresh for the whole run and is never re-signed.
    CONCERT_EXTRA=(-admit-ttl 1h) ;;
  tls) ;;
  *) echo "MODE must be page, asset, browser or tls" >&2; exit 2 ;;
esac
SCHEME=http
[ "$MODE" = tls ] && SCHEME=https
WRK_HEADERS=()

install_missing wrk:wrk nginx:nginx-light haproxy:haproxy openssl:openssl
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)

# Concert as `make build` ships it (profile dist, profile-guided); the helpers need no more
# than release.
# CONCERT=path/to/binary measures another build instead.
if [ -z "${CONCERT:-}" ]; then
  CONCERT=$(build_shipped_concert)
fi
cargo build --release --locked --quiet --example loadgen --example relay
LOADGEN=$(target_dir)/release/examples/loadgen
RELAY=$(target_dir)/release/examples/relay

use_workdir

# Which core runs what (the machine has two). split: the load generator and the origin on core 1,
# the proxy on core 0, or anywhere with two workers. shared: the load generator alone on core 1,
# the origin and the proxy (however many workers) on core 0.
cpus=$(nproc)
pin_gen() { if [ "$cpus" -ge 2 ]; then taskset -c 1 "$@"; else "$@"; fi; }
# Only ever run in the background: `exec` makes $! the server's own pid, so cleanup can stop it.
pin_proxy() { # $1 = workers
  local workers=$1; shift
  if [ "$cpus" -ge 2 ] && { [ "$LAYOUT" = shared ] || [ "$workers" = 1 ]; }; then
    exec taskset -c 0 "$@"
  else
    exec "$@"
  fi
}
origin_core=1
[ "$LAYOUT" = shared ] && origin_core=0

start_origin() {
  local answer="return 200 'ok';"
  # Shared layout: a page of 1 KiB, so the proxies move a body as well as a head.
  [ "$LAYOUT" = shared ] && answer="return 200 '$(head -c 1024 /dev/zero | tr '\0' 'x')';"
  if [ -n "$BODY" ]; then
    # The same file under every path a mode requests, served from memory after the first read.
    mkdir -p "$work/www/static"
    head -c "$BODY" /dev/zero | tr '\0' 'x' >"$work/www${BENCH_PATH}"
    cp "$work/www${BENCH_PATH}" "$work/www/index.html"
    answer="root $work/www;"
  fi
  nginx_conf "$work/origin.conf" 1 "server { listen 127.0.0.1:$ORIGIN_PORT; location / { $answer } }"
  (if [ "$cpus" -ge 2 ]; then exec taskset -c "$origin_core" "$NGINX" -c "$work/origin.conf" -p "$work"
   else exec "$NGINX" -c "$work/origin.conf" -p "$work"; fi) &
  pid_origin=$!
  pids+=("$pid_origin")
}

# Servers started inside $(…) must not keep its output pipe open, or the substitution never ends.
start_nginx() { # $1 = workers
  if [ "$MODE" = tls ]; then
    nginx_tls_proxy_conf "$work/nginx-$1.conf" "$1" "$ORIGIN_PORT" "$NGINX_PORT" "$CERT" "$KEY"
  else
    nginx_proxy_conf "$work/nginx-$1.conf" "$1" "$ORIGIN_PORT" "$NGINX_PORT"
  fi
  pin_proxy "$1" "$NGINX" -c "$work/nginx-$1.conf" -p "$work" >/dev/null &
  echo $!
}

start_haproxy() { # $1 = workers
  if [ "$MODE" = tls ]; then
    haproxy_tls_conf "$work/haproxy-$1.cfg" "$1" "$ORIGIN_PORT" "$HAPROXY_PORT" "$CERT" "$KEY"
  else
    haproxy_conf "$work/haproxy-$1.cfg" "$1" "$ORIGIN_PORT" "$HAPROXY_PORT"
  fi
  pin_proxy "$1" "$HAPROXY" -f "$work/haproxy-$1.cfg" -db >/dev/null &
  echo $!
}

start_concert() { # $1 = workers
  local args
  mapfile -t args < <(concert_bench_args "$CONCERT_PORT" "$ORIGIN_PORT" "$1")
  pin_proxy "$1" "$CONCERT" "${args[@]}" "${CONCERT_EXTRA[@]}" >/dev/null 2>&1 &
  echo $!
}

start_relay() { # $1 = workers
  pin_proxy "$1" "$RELAY" "127.0.0.1:$RELAY_PORT" "127.0.0.1:$ORIGIN_PORT" "$1" >/dev/null 2>&1 &
  echo $!
}

# The servers were started inside $(…), so they are not this shell's children and `wait` cannot
# wait for them; the next round binds the same ports, so poll until each has really exited.
wait_gone() {
  local pid
  for pid in "$@"; do
    for _ in $(seq 1 200); do
      kill -0 "$pid" 2>/dev/null || continue 2
      sleep 0.05
    done
    echo "process $pid did not exit; killing it" >&2
    kill -9 "$pid" 2>/dev/null || true
  done
}

CLK_TCK=$(getconf CLK_TCK)

# CPU time (user and system clock ticks) used so far by process $1 and its children (nginx
# workers), as "user system".
cpu_ticks() {
  local pid total_user=0 total_system=0 user system
  for pid in "$1" $(pgrep -P "$1" || true); do
    read -r user system < <(awk '{print $14, $15}' "/proc/$pid/stat" 2>/dev/null || echo "0 0")
    total_user=$((total_user + user)); total_system=$((total_system + system))
  done
  echo "$total_user $total_system"
}

# $1 clock ticks of CPU spread over $2 requests, in microseconds with $3 decimals.
us_per_request() {
  awk -v t="$1" -v n="$2" -v hz="$CLK_TCK" -v d="$3" \
    'BEGIN { if (n > 0) printf "%.*f", d, t * 1000000 / hz / n; else print "-" }'
}

# Prints "requests_per_second p50_ms p99_ms user_us system_us origin_us errors" for one wrk run
# against port $1 served by process $2: the server's user and system CPU microseconds per request,
# then the origin's (user + system; the same process when $2 is the origin).
measure() {
  local out user0 system0 user1 system1 ouser0 osystem0 ouser1 osystem1
  read -r user0 system0 < <(cpu_ticks "$2")
  read -r ouser0 osystem0 < <(cpu_ticks "$pid_origin")
  out=$(pin_gen wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "${WRK_HEADERS[@]}" \
    "$SCHEME://127.0.0.1:$1$BENCH_PATH" 2>&1)
  read -r user1 system1 < <(cpu_ticks "$2")
  read -r ouser1 osystem1 < <(cpu_ticks "$pid_origin")
  local rps p50 p99 errors requests
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  requests=$(awk '/requests in/ {print $1}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  errors=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out" | tr '\n' ' ')
  echo "$rps $(to_ms "$p50") $(to_ms "$p99") $(us_per_request $((user1 - user0)) "${requests:-0}" 2) \
$(us_per_request $((system1 - system0)) "${requests:-0}" 2) \
$(us_per_request $((ouser1 - ouser0 + osystem1 - osystem0)) "${requests:-0}" 2) ${errors:-none}"
}

# The concert_admit value Concert issues on an admitted page (asset and browser modes).
fetch_pass() {
  exec 3<>"/dev/tcp/127.0.0.1/$CONCERT_PORT"
  printf 'GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3
  sed -n 's/^[Ss]et-[Cc]ookie: concert_admit=\([^;]*\).*/\1/p' <&3 | head -n 1
  exec 3<&-
}

# The targets: D origin directly, R byte relay, N nginx, H HAProxy, C Concert.
declare -A NAME_OF=([D]="direct (origin)" [R]="byte relay (ceiling)" [N]="nginx proxy_pass"
                    [H]="haproxy" [C]="concert")
declare -A PORT_OF=([D]=$ORIGIN_PORT [R]=$RELAY_PORT [N]=$NGINX_PORT [H]=$HAPROXY_PORT
                    [C]=$CONCERT_PORT)

median() { sort -n | awk '{a[NR]=$1} END {if (NR==0) print "-"; else print a[int((NR+1)/2)]}'; }
# The median of a space-separated list of numbers, as the tables collect them.
median_of() { tr ' ' '\n' <<<"$1" | grep . | median; }

if [ "$MODE" = tls ]; then
  # One certificate for all three: ECDSA P-256, for 127.0.0.1.
  CERT=$work/bench.pem
  KEY=$work/bench.key
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout "$KEY" -out "$CERT" 2>/dev/null
  CONCERT_EXTRA=(-tls-cert "$CERT" -tls-key "$KEY")
fi

start_origin
wait_port "$ORIGIN_PORT"
origin_answer="'return 200' with 2 bytes"
[ "$LAYOUT" = shared ] && origin_answer="'return 200' with 1024 bytes"
[ -n "$BODY" ] && origin_answer="a static $BODY-byte file"
echo "fast origin: nginx $origin_answer on 127.0.0.1:$ORIGIN_PORT (core $origin_core); wrk -t1 -c$CONNS, ${DURATION}s per run, $ROUNDS rounds; mode $MODE ($BENCH_PATH), layout $LAYOUT"
echo

# What a TLS client negotiates with the proxy on port $1, in one line.
negotiated() {
  openssl s_client -connect "127.0.0.1:$1" -brief </dev/null 2>&1 |
    awk -F': ' '/Protocol version|Ciphersuite|Server Temp Key|Peer signature type/ {printf "%s%s", sep, $2; sep=", "}'
}

# MODE=tls: for each proxy, a run over kept-alive connections and a run with a new connection
# (and so a new handshake) per request, in interleaved rounds; medians.
tls_rounds() { # $1 = workers
  local workers=$1 target kind
  declare -A rps=() p50=() p99=() user=() system=() errs=()
  pid_n=$(start_nginx "$workers"); pids+=("$pid_n")
  pid_h=$(start_haproxy "$workers"); pids+=("$pid_h")
  pid_c=$(start_concert "$workers"); pids+=("$pid_c")
  wait_port "$NGINX_PORT"; wait_port "$HAPROXY_PORT"; wait_port "$CONCERT_PORT"
  declare -A pid_of=([N]=$pid_n [H]=$pid_h [C]=$pid_c)
  for target in N H C; do
    echo "${NAME_OF[$target]}: $(negotiated "${PORT_OF[$target]}")"
    pin_gen wrk -t1 -c"$CONNS" -d1s "https://127.0.0.1:${PORT_OF[$target]}$BENCH_PATH" >/dev/null 2>&1
  done
  echo
  tls_order=(N H C N H)
  for round in $(seq 1 "$ROUNDS"); do
    for target in "${tls_order[@]:$(((round - 1) % 3)):3}"; do
      for kind in keep new; do
        if [ "$kind" = new ]; then WRK_HEADERS=(-H "Connection: close"); else WRK_HEADERS=(); fi
        read -r r a b u y o e <<<"$(measure "${PORT_OF[$target]}" "${pid_of[$target]}")"
        rps[$target$kind]+="$r "; p50[$target$kind]+="$a "; p99[$target$kind]+="$b "
        user[$target$kind]+="$u "; system[$target$kind]+="$y "
        [ "$e" = none ] || errs[$target$kind]+="round $round: $e; "
      done
    done
  done
  WRK_HEADERS=()
  echo "== $workers worker thread(s) per proxy, HTTPS =="
  printf "%-22s %-26s %12s %10s %10s %14s %14s   %s\n" target connections "req/s" "p50 ms" "p99 ms" \
    "user us/req" "system us/req" "req/s by round"
  for kind in new keep; do
    for target in N H C; do
      local label="kept alive"
      [ "$kind" = new ] && label="new per request (handshakes)"
      printf "%-22s %-26s %12s %10s %10s %14s %14s   %s\n" "${NAME_OF[$target]}" "$label" \
        "$(median_of "${rps[$target$kind]}")" \
        "$(median_of "${p50[$target$kind]}")" \
        "$(median_of "${p99[$target$kind]}")" \
        "$(median_of "${user[$target$kind]}")" \
        "$(median_of "${system[$target$kind]}")" \
        "$(awk '{for (i = 1; i <= NF; i++) printf "%s%.0f", (i > 1 ? " " : ""), $i}' <<<"${rps[$target$kind]}")"
      [ -z "${errs[$target$kind]:-}" ] || echo "   errors: ${errs[$target$kind]}"
    done
  done
  echo
  kill "$pid_n" "$pid_h" "$pid_c" 2>/dev/null || true
  wait_gone "$pid_n" "$pid_h" "$pid_c"
}

if [ "$MODE" = tls ]; then
  for workers in $WORKERS; do
    tls_rounds "$workers"
  done
  exit 0
fi

for workers in $WORKERS; do
  declare -A rps=() p50=() p99=() user=() system=() origin=() errs=()
  pid_n=$(start_nginx "$workers"); pids+=("$pid_n")
  pid_h=$(start_haproxy "$workers"); pids+=("$pid_h")
  pid_c=$(start_concert "$workers"); pids+=("$pid_c")
  pid_r=$(start_relay "$workers"); pids+=("$pid_r")
  wait_port "$NGINX_PORT"; wait_port "$HAPROXY_PORT"; wait_port "$CONCERT_PORT"
  wait_port "$RELAY_PORT"
  declare -A pid_of=([D]=$pid_origin [R]=$pid_r [N]=$pid_n [H]=$pid_h [C]=$pid_c)
  if [ "$MODE" != page ]; then
    pass=$(fetch_pass)
    [ -n "$pass" ] || { echo "Concert issued no concert_admit pass" >&2; exit 1; }
    WRK_HEADERS=(-H "Cookie: concert_admit=$pass")
  fi
  # A short warm-up through each, so every proxy has its origin connections open before timing.
  for port in "$ORIGIN_PORT" "$RELAY_PORT" "$NGINX_PORT" "$HAPROXY_PORT" "$CONCERT_PORT"; do
    pin_gen wrk -t1 -c"$CONNS" -d1s "${WRK_HEADERS[@]}" "http://127.0.0.1:$port$BENCH_PATH" >/dev/null 2>&1
  done
  # The target measured first rotates from round to round, so no proxy always follows the same
  # neighbour or always goes first (benches/rounds.sh does the same).
  closed_order=(D R N H C D R N H)
  for round in $(seq 1 "$ROUNDS"); do
    for target in "${closed_order[@]:$(((round - 1) % 5)):5}"; do
      read -r r a b u y o e <<<"$(measure "${PORT_OF[$target]}" "${pid_of[$target]}")"
      rps[$target]+="$r "; p50[$target]+="$a "; p99[$target]+="$b "
      user[$target]+="$u "; system[$target]+="$y "; origin[$target]+="$o "
      [ "$e" = none ] || errs[$target]+="round $round: $e; "
    done
  done
  layout_note="proxy and origin share core 0, wrk alone on core 1"
  [ "$LAYOUT" = split ] && layout_note="wrk and origin share core 1, the proxy has core 0"
  echo "== $workers worker thread(s) per proxy ($LAYOUT layout: $layout_note) =="
  echo "   CPU in us per request; own cpu = proxy + origin CPU - origin's CPU reached directly,"
  echo "   own core = 1 s / req/s - the same for the origin reached directly (each per round, median)"
  printf "%-22s %10s %8s %8s %10s %10s %10s %9s %9s   %s\n" target "req/s" "p50 ms" "p99 ms" \
    "proxy usr" "proxy sys" "origin" "own cpu" "own core" "req/s by round (drift shows here)"
  for target in D R N H C; do
    own_cpu=- own_core=- proxy_user=- proxy_system=-
    if [ "$target" != D ]; then
      proxy_user=$(median_of "${user[$target]}")
      proxy_system=$(median_of "${system[$target]}")
      # Round i of every list is the same round, so each difference pairs runs a minute apart.
      own_cpu=$(paste <(tr ' ' '\n' <<<"${user[$target]}") <(tr ' ' '\n' <<<"${system[$target]}") \
        <(tr ' ' '\n' <<<"${origin[$target]}") <(tr ' ' '\n' <<<"${origin[D]}") |
        awk 'NF == 4 {printf "%.2f\n", $1 + $2 + $3 - $4}' | median)
      own_core=$(paste <(tr ' ' '\n' <<<"${rps[$target]}") <(tr ' ' '\n' <<<"${rps[D]}") |
        awk 'NF == 2 && $1 > 0 && $2 > 0 {printf "%.2f\n", 1e6 / $1 - 1e6 / $2}' | median)
    fi
    printf "%-22s %10s %8s %8s %10s %10s %10s %9s %9s   %s\n" "${NAME_OF[$target]}" \
      "$(median_of "${rps[$target]}")" \
      "$(median_of "${p50[$target]}")" \
      "$(median_of "${p99[$target]}")" \
      "$proxy_user" "$proxy_system" "$(median_of "${origin[$target]}")" "$own_cpu" "$own_core" \
      "$(awk '{for (i = 1; i <= NF; i++) printf "%s%.0f", (i > 1 ? " " : ""), $i}' <<<"${rps[$target]}")"
    [ -z "${errs[$target]:-}" ] || echo "   errors: ${errs[$target]}"
  done
  echo
  if [ "$MODE" = page ] && [ "$OPEN_LOOP" != 0 ]; then
    best=0
    for target in N H C; do
      m=$(median_of "${rps[$target]}")
      best=$(awk -v a="$best" -v b="$m" 'BEGIN{print (b>a)?b:a}')
    done
    echo "-- open loop, $workers worker(s): fixed rates relative to the best proxy ($best req/s), ${OPEN_DURATION}s each, median of $OPEN_ROUNDS interleaved rounds --"
    printf "%-22s %8s %12s %10s %10s %10s %10s %8s   %s\n" target load "achieved/s" "p50 ms" "p99 ms" "p99.9 ms" \
      "cpu us/req" errors "p99 by round"
    for pct in 50 80 95; do
      rate=$(awk -v b="$best" -v p="$pct" 'BEGIN{printf "%d", b*p/100}')
      declare -A ach=() o50=() o99=() o999=() ocpu=() oerr=()
      open_order=(N H C N H)
      for round in $(seq 1 "$OPEN_ROUNDS"); do
        for target in "${open_order[@]:$(((round - 1) % 3)):3}"; do
          read -r user0 system0 < <(cpu_ticks "${pid_of[$target]}")
          line=$(pin_gen "$LOADGEN" "http://127.0.0.1:${PORT_OF[$target]}$BENCH_PATH" "$rate" "$OPEN_DURATION" "$CONNS")
          read -r user1 system1 < <(cpu_ticks "${pid_of[$target]}")
          field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" <<<"$line"; }
          # At the same offered load the proxies' CPU per request compares cleanly: it is the share
          # of the machine each leaves to a co-located origin.
          answered=$(awk -v r="$(field achieved)" -v d="$OPEN_DURATION" 'BEGIN { printf "%d", r * d }')
          ocpu[$target]+="$(us_per_request $((user1 - user0 + system1 - system0)) "$answered" 1) "
          ach[$target]+="$(field achieved) "; o50[$target]+="$(field p50) "
          o99[$target]+="$(field p99) "; o999[$target]+="$(field p999) "
          errors=$(field errors)
          oerr[$target]=$(( ${oerr[$target]:-0} + ${errors:-0} ))
        done
      done
      for target in N H C; do
        printf "%-22s %7s%% %12s %10s %10s %10s %10s %8s   %s\n" "${NAME_OF[$target]}" "$pct" "$(median_of "${ach[$target]}")" \
          "$(median_of "${o50[$target]}")" "$(median_of "${o99[$target]}")" "$(median_of "${o999[$target]}")" \
          "$(median_of "${ocpu[$target]}")" "${oerr[$target]}" "${o99[$target]% }"
      done
      unset ach o50 o99 o999 ocpu oerr
    done
    echo
  fi
  kill "$pid_n" "$pid_h" "$pid_c" "$pid_r" 2>/dev/null || true
  wait_gone "$pid_n" "$pid_h" "$pid_c" "$pid_r"
  unset rps p50 p99 user system origin errs
done
