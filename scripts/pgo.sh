#!/usr/bin/env bash
# The profile behind the profile-guided `dist` build. An instrumented Concert is built (in
# target/pgo/build, so the normal build is left alone), driven through the paths a deployment
# spends its time on by tools/pgo-train.rs (pages with and without a pass, assets, large
# pages, uploads, event streams, HTTP/2, ops endpoints, the waiting room), and its counters are
# merged into target/pgo/concert.profdata. The path of that file is printed on stdout.
#
# The profile is reused while it is newer than every source file. Without an llvm-profdata
# matching rustc's LLVM this exits 1 with the reason on stderr, and callers build without a
# profile; PGO_INSTALL=1 first tries `rustup component add llvm-tools`.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO=${CARGO:-cargo}
host=$(rustc -vV | sed -n 's/^host: //p')
llvm_major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
dir=target/pgo
profile=$dir/concert.profdata

say() { printf 'pgo: %s\n' "$*" >&2; }

# rustup's llvm-tools component first (built from the same LLVM as rustc), then a system
# llvm-profdata of the same major version: an older one cannot read the raw counters.
find_profdata() {
  local candidate
  candidate="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
  if [ -x "$candidate" ]; then
    printf '%s' "$candidate"
    return 0
  fi
  for candidate in "llvm-profdata-$llvm_major" llvm-profdata; do
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" --version 2>/dev/null | grep -q "LLVM version $llvm_major\."; then
      command -v "$candidate"
      return 0
    fi
  done
  return 1
}

up_to_date() {
  [ -f "$profile" ] || return 1
  local newer
  newer=$(find src tools/pgo-train.rs tools/support templates static Cargo.toml Cargo.lock -newer "$profile" -print -quit 2>/dev/null)
  [ -z "$newer" ]
}

if ! profdata=$(find_profdata); then
  if [ "${PGO_INSTALL:-0}" = 1 ] && command -v rustup >/dev/null 2>&1; then
    say "installing rustup's llvm-tools component for llvm-profdata"
    rustup component add llvm-tools >&2 || true
  fi
  if ! profdata=$(find_profdata); then
    say "no llvm-profdata for LLVM $llvm_major (rustup component add llvm-tools)"
    exit 1
  fi
fi

if up_to_date; then
  printf '%s\n' "$profile"
  exit 0
fi

raw=$PWD/$dir/raw
rm -rf "$raw"
mkdir -p "$raw"
say "building an instrumented concert"
# --target keeps the flags off build scripts and proc macros, which would write counters too.
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$raw" \
  "$CARGO" build --profile dist --locked --quiet --bin concert --target "$host" \
  --target-dir "$dir/build" >&2
"$CARGO" build --release --locked --quiet --example pgo-train >&2
say "training"
target/release/examples/pgo-train "$dir/build/$host/dist/concert" >&2
shopt -s nullglob
counters=("$raw"/*.profraw)
if [ ${#counters[@]} -eq 0 ]; then
  say "the instrumented run wrote no counters to $raw"
  exit 1
fi
"$profdata" merge -o "$profile.tmp" "${counters[@]}" >&2
mv "$profile.tmp" "$profile"
printf '%s\n' "$profile"
