#!/usr/bin/env bash
# Builds the release binaries into bin/ (cargo profile `dist`: release with whole-program LTO,
# profile-guided where scripts/pgo.sh can make a profile; PGO=0 builds without one):
#   bin/concert-linux-amd64  fully static (musl when its Rust target and musl-gcc exist, otherwise
#                            glibc linked statically with crt-static)
#   bin/concert-linux-arm64  the same for arm64, when a cross linker and the Rust target exist
#   bin/concert              the host build
# A cross target that cannot be built here is skipped with the reason, never a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO=${CARGO:-cargo}
# 1 builds static-pie (keeps ASLR for the program image; ldd then says "statically linked"
# instead of "not a dynamic executable").
STATIC_PIE=${STATIC_PIE:-0}

host=$(rustc -vV | sed -n 's/^host: //p')
sysroot=$(rustc --print sysroot)
mkdir -p bin

note() { printf 'build: %s\n' "$*"; }

# The profile is recorded on this machine, so it guides only builds for its architecture.
pgo_flags=""
if [ "${PGO:-1}" != 0 ]; then
  if profile=$(CARGO="$CARGO" bash scripts/pgo.sh); then
    pgo_flags="-Cprofile-use=$PWD/$profile"
    note "profile-guided with $profile"
  else
    note "building without profile guidance (see the line above)"
  fi
fi
pgo_for() { if [ "${1%%-*}" = "${host%%-*}" ]; then printf '%s' "$pgo_flags"; fi; }

has_std() { [ -d "$sysroot/lib/rustlib/$1/lib" ]; }

static_rustflags() {
  local flags="-C target-feature=+crt-static"
  if [ "$STATIC_PIE" != 1 ]; then
    flags="$flags -C relocation-model=static"
  fi
  printf '%s' "$flags"
}

# Builds `concert` for a target triple with the static flags; prints the artifact path.
# --target keeps RUSTFLAGS away from build scripts and proc macros, which must stay dynamic.
build_static() {
  local triple=$1
  shift
  env "$@" RUSTFLAGS="${RUSTFLAGS:-} $(static_rustflags) $(pgo_for "$triple")" \
    "$CARGO" build --profile dist --locked --bin concert --target "$triple" >&2
  printf 'target/%s/dist/concert' "$triple"
}

amd64_built=""
case "$host" in
  x86_64-*-linux-*|aarch64-*-linux-*)
    if has_std x86_64-unknown-linux-musl && command -v musl-gcc >/dev/null 2>&1; then
      note "linux/amd64: musl, fully static"
      out=$(build_static x86_64-unknown-linux-musl CC_x86_64_unknown_linux_musl=musl-gcc)
      amd64_built=x86_64-unknown-linux-musl
    elif has_std x86_64-unknown-linux-gnu && [ "${host%%-*}" = x86_64 ]; then
      if ! has_std x86_64-unknown-linux-musl; then
        note "linux/amd64: the Rust std for x86_64-unknown-linux-musl is not installed (rustup target add x86_64-unknown-linux-musl); building glibc with crt-static instead"
      else
        note "linux/amd64: musl-gcc not found (apt-get install musl-tools); building glibc with crt-static instead"
      fi
      out=$(build_static x86_64-unknown-linux-gnu)
      amd64_built=x86_64-unknown-linux-gnu
    else
      note "linux/amd64: skipped, no static-capable Rust target for amd64 on this $host machine"
    fi
    if [ -n "$amd64_built" ]; then
      cp "$out" bin/concert-linux-amd64
      note "bin/concert-linux-amd64 ($amd64_built)"
    fi
    ;;
  *)
    note "linux/amd64: skipped, static Linux builds are made on a Linux machine (host is $host)"
    ;;
esac

arm_triple=""
for candidate in aarch64-unknown-linux-musl aarch64-unknown-linux-gnu; do
  if has_std "$candidate"; then
    arm_triple=$candidate
    break
  fi
done
arm_linker=""
for candidate in aarch64-linux-musl-gcc aarch64-linux-gnu-gcc; do
  if command -v "$candidate" >/dev/null 2>&1; then
    arm_linker=$candidate
    break
  fi
done
if [ "${host%%-*}" = aarch64 ] && [ -n "$arm_triple" ]; then
  arm_linker=${arm_linker:-cc}
fi
if [ -z "$arm_triple" ]; then
  note "linux/arm64: skipped, no Rust std for aarch64-unknown-linux-{musl,gnu} (rustup target add aarch64-unknown-linux-gnu)"
elif [ -z "$arm_linker" ]; then
  note "linux/arm64: skipped, no cross linker (apt-get install gcc-aarch64-linux-gnu)"
else
  upper=$(printf '%s' "$arm_triple" | tr 'a-z-' 'A-Z_')
  lower=$(printf '%s' "$arm_triple" | tr '-' '_')
  note "linux/arm64: $arm_triple with $arm_linker"
  out=$(build_static "$arm_triple" "CARGO_TARGET_${upper}_LINKER=$arm_linker" "CC_${lower}=$arm_linker")
  cp "$out" bin/concert-linux-arm64
  note "bin/concert-linux-arm64 ($arm_triple)"
fi

# The host build. On an amd64 Linux host the static binary is that build already.
if [ -n "$amd64_built" ] && [ "${host%%-*}" = x86_64 ]; then
  cp bin/concert-linux-amd64 bin/concert
  note "bin/concert (host $host: the static amd64 build)"
else
  RUSTFLAGS="${RUSTFLAGS:-} $pgo_flags" "$CARGO" build --profile dist --locked --bin concert --target "$host"
  cp "target/$host/dist/concert" bin/concert
  note "bin/concert (host $host)"
fi

# Check what can run here: static linkage, -version, and the demo.
case "${host%%-*}" in
  x86_64) [ -f bin/concert-linux-amd64 ] && bash scripts/check-binary.sh bin/concert-linux-amd64 ;;
  aarch64) [ -f bin/concert-linux-arm64 ] && bash scripts/check-binary.sh bin/concert-linux-arm64 ;;
esac
exit 0
