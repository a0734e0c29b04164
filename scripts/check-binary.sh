#!/usr/bin/env bash
# Checks a Linux binary built for this machine: it is fully static (ldd says "not a dynamic executable"; with
# STATIC_PIE=1, "statically linked"), prints its version, and serves the demo: /_room/healthz
# answers, and SIGTERM stops it cleanly (exit 0).
set -euo pipefail

bin=${1:?usage: check-binary.sh BINARY}
STATIC_PIE=${STATIC_PIE:-0}
fail() { printf 'check-binary: %s: %s\n' "$bin" "$*" >&2; exit 1; }
note() { printf 'check-binary: %s: %s\n' "$bin" "$*"; }

[ -x "$bin" ] || fail "not an executable file"

if command -v ldd >/dev/null 2>&1; then
  linkage=$(ldd "$bin" 2>&1 || true)
  if [ "$STATIC_PIE" = 1 ]; then
    expected="statically linked"
  else
    expected="not a dynamic executable"
  fi
  case "$linkage" in
    *"$expected"*) note "ldd: $expected" ;;
    *) fail "ldd says it is dynamic: $linkage" ;;
  esac
else
  note "ldd not found; linkage not checked"
fi

version=$("$bin" -version)
case "$version" in
  "concert "*) note "$version" ;;
  *) fail "-version printed '$version'" ;;
esac

log=$(mktemp)
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$log"
}
trap cleanup EXIT
"$bin" -demo -listen 127.0.0.1:0 -data-dir "" >"$log" 2>&1 &
pid=$!

port=""
for _ in $(seq 1 100); do
  port=$(sed -n 's|.*Open http://127\.0\.0\.1:\([0-9][0-9]*\)/.*|\1|p' "$log" | head -n 1)
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || fail "demo exited early: $(cat "$log")"
  sleep 0.1
done
[ -n "$port" ] || fail "demo did not report its address: $(cat "$log")"

health=""
for _ in $(seq 1 50); do
  if exec 3<>"/dev/tcp/127.0.0.1/$port" 2>/dev/null; then
    printf 'GET /_room/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3
    health=$(timeout 5 cat <&3 || true)
    exec 3<&- 3>&-
    case "$health" in "HTTP/1.1 200"*) break ;; esac
  fi
  sleep 0.1
done
case "$health" in
  "HTTP/1.1 200"*) note "demo on 127.0.0.1:$port answers /_room/healthz" ;;
  *) fail "demo health check failed: $health" ;;
esac

kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=""
[ "$status" -eq 0 ] || fail "demo exited $status after SIGTERM: $(tail -n 5 "$log")"
note "demo stopped cleanly on SIGTERM"
