# shellcheck shell=bash
# Helpers shared by the load scripts in benches/; sourced, not run.

# Writes an nginx configuration: $1 = file, $2 = worker processes, $3 = body of the http block.
# Temporary files and the pid file go to $work, which the sourcing script creates.
nginx_conf() {
  : "${work:?the sourcing script sets work to its temporary directory}"
  cat >"$1" <<EOF
worker_processes $2;
daemon off;
pid $work/nginx-$RANDOM.pid;
error_log /dev/null crit;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work; proxy_temp_path $work; fastcgi_temp_path $work;
  uwsgi_temp_path $work; scgi_temp_path $work;
  keepalive_requests 1000000;
  $3
}
EOF
}

# The proxy configurations the comparisons measure, in front of the origin on 127.0.0.1:$3:
# nginx proxy_pass with an upstream keep-alive pool, and HAProxy reusing origin connections.
# $1 = file, $2 = worker processes or threads, $3 = origin port, $4 = listening port.
nginx_proxy_conf() {
  nginx_conf "$1" "$2" "upstream origin { server 127.0.0.1:$3; keepalive 256; }
  server { listen 127.0.0.1:$4;
    location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection \"\";
                 proxy_set_header Host \$host; proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for; } }"
}

# $5, when given, is appended to the bind line (TLS options).
haproxy_conf() {
  cat >"$1" <<EOF
global
  nbthread $2
  maxconn 9000
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
  option forwardfor
  http-reuse always
frontend fe
  bind 127.0.0.1:$4${5:+ $5}
  default_backend be
backend be
  server origin 127.0.0.1:$3
EOF
}

# A temporary directory in $work, removed on exit after every process whose pid the script adds
# to `pids` has been stopped.
use_workdir() {
  work=$(mktemp -d)
  pids=()
  trap stop_and_clean_up EXIT
}

stop_and_clean_up() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}

# Prints Concert's arguments as the load scripts run it, with a cap that never binds: listening
# on 127.0.0.1:$1, in front of the origin on 127.0.0.1:$2, with $3 workers; one per line, for
# `mapfile`.
# CONCERT_EXTRA_ARGS adds flags (split on spaces), e.g. "-history-log off". (To count what
# writing the request history costs, `benches/instructions.sh` takes HISTORY_LOG=1, which gives
# every run a fresh file: a file kept from run to run would be read back at each start.)
concert_bench_args() {
  printf '%s\n' -listen "127.0.0.1:$1" -upstream "http://127.0.0.1:$2" -cap 1000000 -max-queue 0 \
    -access-log=false -data-dir "" -workers "$3"
  local extra
  for extra in ${CONCERT_EXTRA_ARGS:-}; do printf '%s\n' "$extra"; done
}

# HTTPS in front of the same origin, for MODE=tls: nginx and HAProxy terminating TLS with the
# certificate and key in $5 and $6 (PEM; HAProxy reads both from $6.haproxy). Same protocol
# versions and key exchange as Concert: TLS 1.2 and 1.3, X25519 first.
# $1 = file, $2 = workers, $3 = origin port, $4 = listening port.
nginx_tls_proxy_conf() {
  nginx_conf "$1" "$2" "upstream origin { server 127.0.0.1:$3; keepalive 256; }
  server { listen 127.0.0.1:$4 ssl; ssl_certificate $5; ssl_certificate_key $6;
    ssl_protocols TLSv1.2 TLSv1.3; ssl_ecdh_curve X25519:prime256v1;
    location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection \"\";
                 proxy_set_header Host \$host; proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
                 proxy_set_header X-Forwarded-Proto https; } }"
}

haproxy_tls_conf() {
  cat "$5" "$6" >"$6.haproxy"
  haproxy_conf "$1" "$2" "$3" "$4" "ssl crt $6.haproxy ssl-min-ver TLSv1.2 curves X25519:P-256"
  printf '  http-request set-header X-Forwarded-Proto https\n' >>"$1"
}

# Waits for a listener on 127.0.0.1:$1, for up to $2 tries 50 ms apart (default 100: 5 s).
wait_port() {
  for _ in $(seq 1 "${2:-100}"); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "port $1 did not open" >&2
  return 1
}

# A latency as wrk prints it (1.23ms, 456.00us, 1.02s), in milliseconds.
to_ms() {
  local v=$1
  case $v in
    *us) awk -v x="${v%us}" 'BEGIN{printf "%.3f", x/1000}' ;;
    *ms) awk -v x="${v%ms}" 'BEGIN{printf "%.3f", x}' ;;
    *s) awk -v x="${v%s}" 'BEGIN{printf "%.3f", x*1000}' ;;
    *) echo "$v" ;;
  esac
}

# Installs from Debian the packages whose command is missing: each argument is command:package.
install_missing() {
  local need=() pair
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
  done
  if [ ${#need[@]} -gt 0 ]; then
    echo "installing ${need[*]} from Debian" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
}

# Where cargo puts what it builds: CARGO_TARGET_DIR when set (a checkout sharing one), else
# target/.
target_dir() {
  printf '%s\n' "${CARGO_TARGET_DIR:-target}"
}

# Builds Concert as `make build` ships it (profile dist, profile-guided when scripts/pgo.sh can
# make a profile, which PGO_INSTALL=1 lets it fetch llvm-tools for) and prints the binary's path.
# PGO=0 measures the build without profile guidance.
build_shipped_concert() {
  local host profile
  host=$(rustc -vV | sed -n 's/^host: //p')
  if [ "${PGO:-1}" != 0 ] && profile=$(PGO_INSTALL=${PGO_INSTALL:-1} bash scripts/pgo.sh); then
    RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$PWD/$profile" \
      cargo build --profile dist --locked --quiet --bin concert --target "$host" >&2
    warn_if_request_path_twice "$(target_dir)/$host/dist/concert"
    printf '%s/%s/dist/concert\n' "$(target_dir)" "$host"
  else
    echo "Concert built without profile guidance" >&2
    cargo build --profile dist --locked --quiet --bin concert >&2
    warn_if_request_path_twice "$(target_dir)/dist/concert"
    printf '%s/dist/concert\n' "$(target_dir)"
  fi
}

# Every worker must run the same compiled request path (see `run_to_end` in
# src/lifecycle/mod.rs): a second copy is optimised apart from the first, and the profile trains
# only one of them. The markers are functions of that path; the optimiser may inline one away,
# but one copy is all there may be.
warn_if_request_path_twice() {
  local marker copies
  for marker in concert8pipeline6handle28_ concert8pipeline6origin7forward28_ \
    concert8pipeline5gated8admitted28_; do
    copies=$(nm "$1" 2>/dev/null | grep -c "$marker" || true)
    if [ "${copies:-0}" -gt 1 ]; then
      echo "warning: $1 holds $copies compiled copies of $marker; its workers will differ in speed" >&2
    fi
  done
}
