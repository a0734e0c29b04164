#!/usr/bin/env bash
# Fetches the portal's browser libraries from npm at pinned versions, checks each package
# against its published integrity hash, and copies the files the portal serves (with each
# package's licence) into static/portal/lib/. The result is committed: the binary embeds it,
# and the portal never loads anything from another site.
#
#   bash scripts/vendor-portal.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# package, version, npm integrity (sha512)
packages=(
  "bootstrap 5.3.3 sha512-8HLCdWgyoMguSO9o+aH+iuZ+aht+mzW0u3HIMzVu7Srrpv7EBBxTnrFlSCskwdY1+EOFQSm7uMJhNQHkdPcmjg=="
  "bootstrap-icons 1.13.1 sha512-ijombt4v6bv5CLeXvRWKy7CuM3TRTuPEuGaGKvTV5cz65rQSY8RQ2JcHt6b90cBBAC7s8fsf2EkQDldzCoXUjw=="
  "uplot 1.6.32 sha512-KIMVnG68zvu5XXUbC4LQEPnhwOxBuLyW1AHtpm6IKTXImkbLgkMy+jabjLgSLMasNuGGzQm/ep3tOkyTxpiQIw=="
)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
lib=static/portal/lib
mkdir -p "$lib/css/fonts" "$lib/js" "$lib/licenses"

for entry in "${packages[@]}"; do
  read -r name version integrity <<<"$entry"
  (cd "$work" && npm pack --silent "$name@$version" >/dev/null)
  tarball="$work/$name-$version.tgz"
  actual="sha512-$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)"
  if [ "$actual" != "$integrity" ]; then
    echo "$name@$version: integrity $actual, expected $integrity" >&2
    exit 1
  fi
  mkdir -p "$work/$name"
  tar xzf "$tarball" -C "$work/$name"
done

b="$work/bootstrap/package"
cp "$b/dist/css/bootstrap.min.css" "$lib/css/bootstrap.5.3.3.min.css"
cp "$b/dist/js/bootstrap.bundle.min.js" "$lib/js/bootstrap.bundle.5.3.3.min.js"
cp "$b/LICENSE" "$lib/licenses/bootstrap.LICENSE"

i="$work/bootstrap-icons/package"
cp "$i/font/bootstrap-icons.min.css" "$lib/css/bootstrap-icons.1.13.1.min.css"
cp "$i/font/fonts/bootstrap-icons.woff2" "$i/font/fonts/bootstrap-icons.woff" "$lib/css/fonts/"
cp "$i/LICENSE" "$lib/licenses/bootstrap-icons.LICENSE"

u="$work/uplot/package"
cp "$u/dist/uPlot.iife.min.js" "$lib/js/uplot.1.6.32.min.js"
cp "$u/dist/uPlot.min.css" "$lib/css/uplot.1.6.32.min.css"
cp "$u/LICENSE" "$lib/licenses/uplot.LICENSE"

echo "vendored into $lib:"
find "$lib" -type f | sort
