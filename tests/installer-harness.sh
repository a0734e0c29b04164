#!/usr/bin/env bash
# Runs the installer's real steps against a scratch root, with the RHEL tools it calls (dnf, rpm,
# systemctl, semodule, semanage, …) replaced by small fakes that keep their state in files. It
# checks what a machine would see: the first run installs everything, a second run changes
# nothing, operator edits survive, secrets stay private and unprinted, a low port brings the
# capability drop-in and boolean, and uninstall removes what was installed but keeps the settings.
# Usage: installer-harness.sh BINARY   (run as any user; nothing outside a temp dir is touched)
# The variables set below are read by the sourced installer's functions.
# shellcheck disable=SC2034
set -euo pipefail

binary=${1:?usage: installer-harness.sh BINARY}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../installer.sh
source "$here/../installer.sh"

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
fake=$root/fake-state
mkdir -p "$fake"
: >"$fake/modules"
: >"$fake/ports"
: >"$fake/enabled"
: >"$fake/active"
: >"$fake/calls"

# The installer's paths, moved under the scratch root. The service user is the caller, so the
# ownership checks compare against something that exists.
SERVICE_USER=$(id -un)
owner_group=$(id -gn)
if [ "$owner_group" != "$SERVICE_USER" ]; then
  echo "harness: needs a user whose primary group has the same name (root does)" >&2
  exit 1
fi
BIN_PATH=$root/usr/local/bin/concert
LIBEXEC_UPDATE=$root/usr/local/libexec/concert-ipasn-update
SHARE_DIR=$root/usr/local/share/concert
ETC_DIR=$root/etc/concert
ENV_FILE=$ETC_DIR/concert.env
SECRETS_FILE=$ETC_DIR/secrets.env
STATE_DIR=$root/var/lib/concert
DEFAULT_DATA_DIR=$STATE_DIR/data
IPASN_DIR=$root/var/lib/concert-ipasn
IPASN_FILE=$IPASN_DIR/ip2asn-combined.tsv.gz
UNIT_DIR=$root/etc/systemd/system
LOW_PORTS_DROPIN=$UNIT_DIR/$UNIT.d/10-low-ports.conf
BINARY_SRC=$binary
DRY_RUN=0

# Fakes. Each records what would have changed the machine.
dnf() { echo "dnf $*" >>"$fake/calls"; }
rpm() { return 0; }
getenforce() { echo Enforcing; }
restorecon() { :; }
curl() { return 0; }
make() { touch "$3/concert.pp"; }
checkmodule() { touch "$4"; }
semodule_package() { touch "$2"; }
getsebool() {
  if [ -f "$fake/low-ports" ]; then echo "$1 --> on"; else echo "$1 --> off"; fi
}
setsebool() {
  echo "setsebool $*" >>"$fake/calls"
  if [ "$3" = on ]; then touch "$fake/low-ports"; else rm -f "$fake/low-ports"; fi
}
semodule() {
  case "$1" in
    -l) cat "$fake/modules" ;;
    -i) basename "$2" .pp >>"$fake/modules" ;;
    -r) sed -i "/^$2\$/d" "$fake/modules" ;;
  esac
}
semanage() {
  # port -l [-C] | port -a -t TYPE -p tcp N | port -d -t TYPE -p tcp N
  case "$2 ${3:-}" in
    "-l -C") awk '{ print $1, "tcp", $2 }' "$fake/ports" ;;
    "-l "*)
      echo "SELinux Port Type              Proto    Port Number"
      echo "http_cache_port_t              tcp      8080, 8118"
      echo "http_port_t                    tcp      80, 443"
      awk '{ print $1, "tcp", $2 }' "$fake/ports"
      ;;
    "-a "*) echo "$4 $7" >>"$fake/ports" ;;
    "-d "*) sed -i "/^$4 $7\$/d" "$fake/ports" ;;
  esac
}
systemctl() {
  case "$1" in
    daemon-reload) echo "daemon-reload" >>"$fake/calls" ;;
    is-enabled) grep -qx "$3" "$fake/enabled" ;;
    is-active) grep -qx "$3" "$fake/active" ;;
    enable)
      if [ "$2" = --now ]; then
        echo "$3" >>"$fake/enabled"
        echo "$3" >>"$fake/active"
      else
        echo "$2" >>"$fake/enabled"
      fi
      ;;
    start | restart)
      echo "$1 $2" >>"$fake/calls"
      # The first download of the database.
      if [ "$2" = "$UPDATE_SERVICE" ]; then touch "$IPASN_FILE"; else echo "$2" >>"$fake/active"; fi
      ;;
    show) echo "$$" ;;
    disable)
      sed -i "/^$3\$/d" "$fake/enabled"
      sed -i "/^$3\$/d" "$fake/active"
      ;;
  esac
}

fail() { echo "harness: $*" >&2; exit 1; }
expect_in() { grep -q -- "$2" <<<"$1" || fail "expected '$2' in: $1"; }
mode_of() { stat -c '%a' "$1"; }

# Each run starts from a clean slate of counters, as a fresh process would.
install_run() {
  CHANGES=0
  NEEDS_RESTART=0
  UNITS_CHANGED=0
  : >"$fake/calls"
  install_all 2>&1
}

# First install.
out=$(install_run)
expect_in "$out" "created $ENV_FILE"
expect_in "$out" "created $SECRETS_FILE"
expect_in "$(cat "$fake/calls")" "start concert.service"
[ -x "$BIN_PATH" ] || fail "binary not installed"
[ "$(mode_of "$ENV_FILE")" = 640 ] || fail "concert.env mode $(mode_of "$ENV_FILE")"
[ "$(mode_of "$SECRETS_FILE")" = 600 ] || fail "secrets.env mode $(mode_of "$SECRETS_FILE")"
[ "$(mode_of "$STATE_DIR")" = 700 ] || fail "state dir mode $(mode_of "$STATE_DIR")"
[ "$(mode_of "$ETC_DIR")" = 750 ] || fail "etc dir mode $(mode_of "$ETC_DIR")"
grep -qx concert "$fake/modules" || fail "SELinux module not loaded"
grep -qx concert_ports "$fake/modules" || fail "ports module not loaded for 8080"
grep -q 'http_cache_port_t:tcp_socket name_bind' "$SHARE_DIR/selinux/concert_ports.te" \
  || fail "8080 is http_cache_port_t: the ports module must allow binding it"
grep -qx 'concert_port_t 8081' "$fake/ports" || fail "portal port not labelled"
grep -qx 'concert_origin_port_t 3000' "$fake/ports" || fail "origin port not labelled"
grep -qx concert.service "$fake/enabled" || fail "unit not enabled"
grep -qx concert-ipasn-update.timer "$fake/enabled" || fail "timer not enabled"
[ -f "$UNIT_DIR/concert.service" ] || fail "unit not installed"
[ ! -f "$LOW_PORTS_DROPIN" ] || fail "no low port, yet a capability drop-in"
while IFS='=' read -r name value; do
  case "$name" in
    CONCERT_*)
      [ -n "$value" ] || fail "$name is empty"
      if grep -qF -- "$value" <<<"$out"; then fail "$name was printed"; fi
      ;;
  esac
done <"$SECRETS_FILE"
echo "ok: first run installs everything"

# Second run: nothing to do.
out=$(install_run)
expect_in "$out" "nothing changed"
[ ! -s "$fake/calls" ] || fail "second run called: $(cat "$fake/calls")"
echo "ok: second run changes nothing"

# The operator's edits and secrets are kept.
secrets_before=$(cat "$SECRETS_FILE")
echo "CONCERT_CAPACITY=77" >>"$ENV_FILE"
out=$(OPT_CAP=5 install_run)
expect_in "$out" "nothing changed"
grep -qx CONCERT_CAPACITY=77 "$ENV_FILE" || fail "operator edit lost"
[ "$(cat "$SECRETS_FILE")" = "$secrets_before" ] || fail "secrets rewritten"
echo "ok: operator edits and secrets survive a rerun"

# A low port brings the drop-in, the boolean and a restart; going back removes them.
echo "CONCERT_LISTEN=:80" >>"$ENV_FILE"
out=$(install_run)
[ -f "$LOW_PORTS_DROPIN" ] || fail "no capability drop-in for port 80"
[ -f "$fake/low-ports" ] || fail "concert_bind_low_ports not turned on"
grep -q 'http_port_t:tcp_socket name_bind' "$SHARE_DIR/selinux/concert_ports.te" \
  || fail "port 80 is http_port_t: the ports module must allow binding it"
expect_in "$(cat "$fake/calls")" "restart concert.service"
sed -i '/^CONCERT_LISTEN=:80$/d' "$ENV_FILE"
out=$(install_run)
[ ! -f "$LOW_PORTS_DROPIN" ] || fail "drop-in kept after the low port went away"
[ ! -f "$fake/low-ports" ] || fail "boolean kept on"
out=$(install_run)
expect_in "$out" "nothing changed"
echo "ok: low ports get exactly the capability and boolean they need"

# Uninstall keeps settings, removes the rest.
CHANGES=0
UNITS_CHANGED=0
out=$(uninstall_all 2>&1)
[ ! -e "$BIN_PATH" ] || fail "binary left behind"
[ ! -e "$UNIT_DIR/concert.service" ] || fail "unit left behind"
[ ! -s "$fake/modules" ] || fail "modules left: $(cat "$fake/modules")"
[ ! -s "$fake/ports" ] || fail "port labels left: $(cat "$fake/ports")"
if [ ! -f "$ENV_FILE" ] || [ ! -f "$SECRETS_FILE" ]; then
  fail "uninstall without --purge removed settings"
fi
echo "ok: uninstall removes the service and keeps the settings"
