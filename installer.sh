#!/usr/bin/env bash
# Installs Concert as a confined systemd service on RHEL-family systems (RHEL, Rocky, Alma,
# CentOS Stream, Oracle Linux 8+, Fedora).
#
#   installer.sh [--dry-run] [--binary PATH] [--upstream URL] [--listen ADDR] [--cap N]
#                [--no-ipasn] [--no-start]
#   installer.sh --uninstall [--purge] [--dry-run]
#
# What it does, each step only when something differs, so a second run changes nothing:
#   packages (SELinux tools, curl) → user and group `concert` → binary → directories and modes →
#   settings and secrets files (first install only; secrets are generated into a 0600 file and
#   never printed) → SELinux module, file contexts and port labels → systemd unit, IPtoASN
#   update timer → start, or restart when the binary, unit or policy changed → health check.
# --dry-run prints the steps without changing anything and works on any Linux machine.
# Settings are the binary's own defaults unless given here; later edits belong in
# /etc/concert/concert.env (rerun the installer after changing a port, so SELinux follows).
set -euo pipefail

# Defaults of the binary (tests/deploy.rs keeps them in step with `concert`).
DEFAULT_LISTEN=":8080"
DEFAULT_UPSTREAM="http://127.0.0.1:3000"
DEFAULT_CAP="434"
DEFAULT_PORTAL_LISTEN="127.0.0.1:8081"
DEFAULT_DATA_DIR="/var/lib/concert/data"

# Where things go.
SERVICE_USER=concert
BIN_PATH=/usr/local/bin/concert
LIBEXEC_UPDATE=/usr/local/libexec/concert-ipasn-update
SHARE_DIR=/usr/local/share/concert
ETC_DIR=/etc/concert
ENV_FILE=$ETC_DIR/concert.env
SECRETS_FILE=$ETC_DIR/secrets.env
STATE_DIR=/var/lib/concert
IPASN_DIR=/var/lib/concert-ipasn
IPASN_FILE=$IPASN_DIR/ip2asn-combined.tsv.gz
UNIT_DIR=/etc/systemd/system
UNIT=concert.service
UPDATE_SERVICE=concert-ipasn-update.service
UPDATE_TIMER=concert-ipasn-update.timer
LOW_PORTS_DROPIN=$UNIT_DIR/$UNIT.d/10-low-ports.conf
SELINUX_MODULE=concert
PORTS_MODULE=concert_ports

# What it installs sits beside it: concert.service, selinux/, ipasn/ and, after `make build`,
# bin/ (a copied bundle may instead carry the binary itself beside the installer).
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
IPASN_SRC=$SCRIPT_DIR/ipasn

DRY_RUN=0
FOREIGN_SYSTEM=0
UNINSTALL=0
PURGE=0
WANT_IPASN=1
WANT_START=1
BINARY_SRC=""
OPT_UPSTREAM=""
OPT_LISTEN=""
OPT_CAP=""

# Set when a change needs the running service restarted.
NEEDS_RESTART=0
# Number of changes made (or, in a dry run, that would be made).
CHANGES=0
UNITS_CHANGED=0

say() { printf '%s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
}

# Runs a command that changes the system, or prints it in a dry run.
run() {
  CHANGES=$((CHANGES + 1))
  if [ "$DRY_RUN" = 1 ]; then
    say "would run: $*"
  else
    say "+ $*"
    "$@"
  fi
}

have() { command -v "$1" >/dev/null 2>&1; }

# Whether an SELinux policy module is installed. awk reads the whole list, so the pipe never
# breaks early (which pipefail would report as "not installed").
module_loaded() {
  { semodule -l 2>/dev/null || true; } | awk -v name="$1" '$1 == name { found = 1 } END { exit !found }'
}

# ---------------------------------------------------------------------------------------------
# Pure helpers (also used by tests, which source this file).

# Prints the port of a listen address (`:8080`, `127.0.0.1:8081`, `[::1]:9000`).
listen_port() {
  local addr=$1
  case "$addr" in
    *:*) printf '%s' "${addr##*:}" ;;
    *) return 1 ;;
  esac
}

# Prints the host part of a listen address, or nothing for "every address".
listen_host() {
  local addr=$1 host
  host=${addr%:*}
  host=${host#[}
  host=${host%]}
  printf '%s' "$host"
}

# Prints the port an http(s) URL connects to.
url_port() {
  local url=$1 scheme rest authority hostport port=""
  scheme=${url%%://*}
  rest=${url#*://}
  authority=${rest%%/*}
  authority=${authority%%\?*}
  authority=${authority%%#*}
  hostport=${authority##*@}
  case "$hostport" in
    \[*\]:*|[!\[]*:*) port=${hostport##*:} ;;
  esac
  if [ -n "$port" ]; then
    case "$port" in
      *[!0-9]*) return 1 ;;
    esac
    printf '%s' "$port"
    return 0
  fi
  case "$scheme" in
    https) printf '443' ;;
    http) printf '80' ;;
    *) return 1 ;;
  esac
}

# Prints NAME's value from an env file (NAME=value lines; the last one wins) and succeeds when
# the name is set, even to an empty value. The file is parsed, never sourced.
env_value() {
  local file=$1 name=$2 line value="" found=1
  [ -r "$file" ] || return 1
  while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in
      "$name="*)
        value=${line#*=}
        value=${value%\"}
        value=${value#\"}
        found=0
        ;;
    esac
  done <"$file"
  printf '%s' "$value"
  return "$found"
}

# Prints "TYPE exact" or "TYPE range" for the SELinux type of a TCP port, or nothing when the
# port has no entry. The most specific entry wins, as in the kernel.
port_type() {
  local port=$1
  { semanage port -l 2>/dev/null || true; } | awk -v want="$port" '
    $2 == "tcp" {
      type = $1
      $1 = ""; $2 = ""
      n = split($0, entries, ",")
      for (i = 1; i <= n; i++) {
        entry = entries[i]
        gsub(/[ \t]/, "", entry)
        if (split(entry, bounds, "-") == 2) { lo = bounds[1] + 0; hi = bounds[2] + 0 }
        else { lo = entry + 0; hi = lo }
        if (want + 0 >= lo && want + 0 <= hi && (best == "" || hi - lo < width)) {
          best = type; width = hi - lo
        }
      }
    }
    END { if (best != "") print best, (width == 0 ? "exact" : "range") }'
}

# Prints the distinct space-separated words of $1, sorted, one a line.
unique_words() {
  printf '%s\n' "$1" | tr ' ' '\n' | sed '/^$/d' | sort -u
}

# Writes the small policy module that lets Concert use ports already owned by another type
# (a port listed by name in the base policy cannot be relabelled without taking it from its
# owner). $2 = types to bind, $3 = types to connect to, each space-separated.
write_ports_module() {
  local file=$1 bind_types=$2 connect_types=$3 type
  {
    printf 'module %s 1.0;\n\nrequire {\n\ttype concert_t;\n' "$PORTS_MODULE"
    for type in $(unique_words "$bind_types $connect_types"); do
      printf '\ttype %s;\n' "$type"
    done
    printf '\tclass tcp_socket { name_bind name_connect };\n}\n\n'
    for type in $bind_types; do
      printf 'allow concert_t %s:tcp_socket name_bind;\n' "$type"
    done
    for type in $connect_types; do
      printf 'allow concert_t %s:tcp_socket name_connect;\n' "$type"
    done
  } >"$file"
}

# Prints $1 random bytes (default 32) as hex, from the kernel's random source.
random_hex() {
  od -An -vtx1 -N"${1:-32}" /dev/urandom | tr -d ' \n'
}

# ---------------------------------------------------------------------------------------------
# Steps.

parse_args() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --dry-run) DRY_RUN=1 ;;
      --uninstall) UNINSTALL=1 ;;
      --purge) PURGE=1 ;;
      --no-ipasn) WANT_IPASN=0 ;;
      --no-start) WANT_START=0 ;;
      --binary) BINARY_SRC=${2:?--binary needs a path}; shift ;;
      --binary=*) BINARY_SRC=${1#*=} ;;
      --upstream) OPT_UPSTREAM=${2:?--upstream needs a URL}; shift ;;
      --upstream=*) OPT_UPSTREAM=${1#*=} ;;
      --listen) OPT_LISTEN=${2:?--listen needs an address}; shift ;;
      --listen=*) OPT_LISTEN=${1#*=} ;;
      --cap) OPT_CAP=${2:?--cap needs a number}; shift ;;
      --cap=*) OPT_CAP=${1#*=} ;;
      -h|--help) usage; exit 0 ;;
      *) die "unknown option $1 (see --help)" ;;
    esac
    shift
  done
  if [ "$PURGE" = 1 ] && [ "$UNINSTALL" = 0 ]; then
    die "--purge goes with --uninstall"
  fi
  if [ -n "$OPT_CAP" ] && ! printf '%s' "$OPT_CAP" | grep -Eq '^[1-9][0-9]*$'; then
    die "--cap must be a whole number of at least 1"
  fi
}

check_system() {
  local id="" like=""
  if [ -r /etc/os-release ]; then
    # shellcheck source=/dev/null
    id=$(. /etc/os-release && printf '%s' "${ID:-}")
    # shellcheck source=/dev/null
    like=$(. /etc/os-release && printf '%s' "${ID_LIKE:-}")
  fi
  case " $id $like " in
    *" rhel "*|*" fedora "*|*" centos "*|*" rocky "*|*" almalinux "*|*" ol "*) ;;
    *)
      if [ "$DRY_RUN" = 1 ]; then
        say "note: ${id:-this system} is not RHEL-family; showing the steps for RHEL"
        FOREIGN_SYSTEM=1
      else
        die "this installer is for RHEL-family systems (found ${id:-unknown})"
      fi
      ;;
  esac
  if [ "$(id -u)" != 0 ] && [ "$DRY_RUN" = 0 ]; then
    die "run as root"
  fi
}

selinux_active() {
  # A dry run elsewhere shows the SELinux steps RHEL (enforcing by default) would take.
  if [ "$FOREIGN_SYSTEM" = 1 ]; then
    return 0
  fi
  have getenforce && [ "$(getenforce 2>/dev/null)" != Disabled ]
}

install_packages() {
  local missing=() package
  local wanted=(curl gzip policycoreutils)
  if selinux_active; then
    wanted+=(policycoreutils-python-utils selinux-policy-devel checkpolicy)
  fi
  for package in "${wanted[@]}"; do
    if ! have rpm || ! rpm -q "$package" >/dev/null 2>&1; then
      missing+=("$package")
    fi
  done
  if [ ${#missing[@]} -gt 0 ]; then
    run dnf install -y "${missing[@]}"
  fi
}

ensure_user() {
  if ! getent group "$SERVICE_USER" >/dev/null 2>&1; then
    run groupadd --system "$SERVICE_USER"
  fi
  if ! getent passwd "$SERVICE_USER" >/dev/null 2>&1; then
    run useradd --system --gid "$SERVICE_USER" --home-dir /nonexistent --no-create-home \
      --shell /sbin/nologin --comment Concert "$SERVICE_USER"
  fi
}

# Installs $1 as $2 with mode $3 and owner $4 when the content, mode or owner differs.
# Returns 0 when something changed.
install_file() {
  local src=$1 dest=$2 mode=$3 owner=$4
  if [ -f "$dest" ] && cmp -s "$src" "$dest" \
    && [ "$(stat -c '%a %U:%G' "$dest")" = "${mode#0} $owner" ]; then
    return 1
  fi
  run install -D -m "$mode" -o "${owner%%:*}" -g "${owner##*:}" "$src" "$dest"
  return 0
}

# Creates or fixes a directory's mode and owner.
ensure_dir() {
  local dir=$1 mode=$2 owner=$3
  if [ -d "$dir" ] && [ "$(stat -c '%a %U:%G' "$dir")" = "${mode#0} $owner" ]; then
    return 0
  fi
  run install -d -m "$mode" -o "${owner%%:*}" -g "${owner##*:}" "$dir"
}

find_binary() {
  local arch candidate
  case "$(uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64 ;;
    *) arch=$(uname -m) ;;
  esac
  if [ -n "$BINARY_SRC" ]; then
    printf '%s' "$BINARY_SRC"
    return
  fi
  for candidate in "$SCRIPT_DIR/bin/concert-linux-$arch" "$SCRIPT_DIR/concert-linux-$arch" \
    "$SCRIPT_DIR/bin/concert" "$SCRIPT_DIR/concert"; do
    if [ -f "$candidate" ]; then
      printf '%s' "$candidate"
      return
    fi
  done
  printf '%s' "$SCRIPT_DIR/bin/concert-linux-$arch"
}

install_binary() {
  local src
  src=$(find_binary)
  if [ ! -f "$src" ]; then
    if [ "$DRY_RUN" = 1 ]; then
      say "would install $BIN_PATH from $src (not built here: make build)"
      CHANGES=$((CHANGES + 1))
      NEEDS_RESTART=1
      return
    fi
    die "no binary at $src (run make build, or pass --binary PATH)"
  fi
  if [ "$(head -c 4 "$src" | od -An -c | tr -d ' ')" != '177ELF' ]; then
    die "$src is not an ELF executable"
  fi
  if install_file "$src" "$BIN_PATH" 0755 root:root; then
    NEEDS_RESTART=1
  fi
  if [ "$DRY_RUN" = 0 ]; then
    "$BIN_PATH" -version >/dev/null || die "$BIN_PATH -version failed"
  fi
}

create_dirs() {
  ensure_dir "$ETC_DIR" 0750 "root:$SERVICE_USER"
  ensure_dir "$STATE_DIR" 0700 "$SERVICE_USER:$SERVICE_USER"
  ensure_dir "$DEFAULT_DATA_DIR" 0700 "$SERVICE_USER:$SERVICE_USER"
  if [ "$WANT_IPASN" = 1 ]; then
    ensure_dir "$IPASN_DIR" 0750 "root:$SERVICE_USER"
  fi
}

# A setting line: the value given to the installer, or the binary's default commented out.
setting_line() {
  local name=$1 given=$2 default=$3
  if [ -n "$given" ]; then
    printf '%s=%s\n' "$name" "$given"
  else
    printf '#%s=%s\n' "$name" "$default"
  fi
}

render_env_file() {
  cat <<EOF
# Concert settings, read by $UNIT. One NAME=value per line.
# Every flag has a variable (concert -h, or docs/reference.md in the sources); commented lines
# show the built-in default. Apply changes with: systemctl restart concert
# After changing a port or the origin, rerun the installer so SELinux allows the new port.
# Secrets belong in $SECRETS_FILE, not here.

# Main listener (host:port; an empty host means every address).
$(setting_line CONCERT_LISTEN "$OPT_LISTEN" "$DEFAULT_LISTEN")
# The protected site.
$(setting_line CONCERT_UPSTREAM "$OPT_UPSTREAM" "$DEFAULT_UPSTREAM")
# Visitors served by the origin at the same time.
$(setting_line CONCERT_CAPACITY "$OPT_CAP" "$DEFAULT_CAP")
# Admin portal address (plain HTTP; reach it through an SSH tunnel). Empty turns it off.
# Its pass is CONCERT_PORTAL_PASS in the secrets file.
#CONCERT_PORTAL_LISTEN=$DEFAULT_PORTAL_LISTEN
# Data directory, inside the unit's StateDirectory.
#CONCERT_DATA_DIR=$DEFAULT_DATA_DIR
# HTTPS on the main listener (then usually CONCERT_LISTEN=:443): a certificate you have, as PEM
# files the service can read (under $ETC_DIR, e.g. $ETC_DIR/tls/site.pem with its chain and
# $ETC_DIR/tls/site.key), reloaded with systemctl reload concert; and a plain-HTTP port
# that redirects to it. Rerun the installer after setting a port.
#CONCERT_TLS_CERT=
#CONCERT_TLS_KEY=
#CONCERT_HTTP_LISTEN=
EOF
  if [ "$WANT_IPASN" = 1 ]; then
    cat <<EOF
# The IPtoASN database $UPDATE_TIMER keeps current; the admin portal shows each address's
# country and network from it, and Concert re-reads it when it changes.
NADDR_DATA=$IPASN_FILE
NADDR_DATA_POLL=5m
EOF
  fi
}

render_secrets_file() {
  cat <<EOF
# Concert secrets: readable by root only; systemd passes them to the service.
# Signs admission passes; keep it the same on every instance behind one site.
CONCERT_ADMIT_SECRET=$(random_hex 32)
# Bearer token for POST /_room/cap.
CONCERT_ADMIN_TOKEN=$(random_hex 32)
# Password of the admin portal (sign in at CONCERT_PORTAL_LISTEN); changing it signs everyone out.
CONCERT_PORTAL_PASS=$(random_hex 16)
EOF
}

# Writes the settings and secrets files once; an existing file is the operator's and is kept.
write_env_files() {
  local tmp
  if [ -e "$ENV_FILE" ]; then
    if [ -n "$OPT_LISTEN$OPT_UPSTREAM$OPT_CAP" ]; then
      warn "$ENV_FILE exists and is kept; edit it to change settings"
    fi
  elif [ "$DRY_RUN" = 1 ]; then
    say "would create $ENV_FILE (0640 root:$SERVICE_USER):"
    render_env_file | sed 's/^/    /'
    CHANGES=$((CHANGES + 1))
  else
    tmp=$(mktemp "$ETC_DIR/.concert.env.XXXXXX")
    render_env_file >"$tmp"
    chown "root:$SERVICE_USER" "$tmp"
    chmod 0640 "$tmp"
    mv "$tmp" "$ENV_FILE"
    say "+ created $ENV_FILE"
    CHANGES=$((CHANGES + 1))
  fi

  if [ -e "$SECRETS_FILE" ]; then
    if [ "$(stat -c '%a %U' "$SECRETS_FILE")" != "600 root" ]; then
      run chown root:root "$SECRETS_FILE"
      run chmod 0600 "$SECRETS_FILE"
    fi
  elif [ "$DRY_RUN" = 1 ]; then
    say "would create $SECRETS_FILE (0600 root:root) with generated CONCERT_ADMIT_SECRET, CONCERT_ADMIN_TOKEN and CONCERT_PORTAL_PASS (never shown)"
    CHANGES=$((CHANGES + 1))
  else
    # Created 0600 before any secret is written, and never echoed.
    tmp=$(umask 077 && mktemp "$ETC_DIR/.secrets.env.XXXXXX")
    render_secrets_file >"$tmp"
    chown root:root "$tmp"
    chmod 0600 "$tmp"
    mv "$tmp" "$SECRETS_FILE"
    say "+ created $SECRETS_FILE with generated secrets (read them with: sudo cat $SECRETS_FILE)"
    CHANGES=$((CHANGES + 1))
  fi
}

# The effective value of a setting: the settings file, else the installer's option (first
# install), else the binary's default.
effective() {
  local name=$1 default=$2 value
  if value=$(env_value "$ENV_FILE" "$name"); then
    printf '%s' "$value"
    return
  fi
  if [ ! -e "$ENV_FILE" ]; then
    case "$name" in
      CONCERT_LISTEN) value=$OPT_LISTEN ;;
      CONCERT_UPSTREAM) value=$OPT_UPSTREAM ;;
    esac
  fi
  printf '%s' "${value:-$default}"
}

portal_enabled() {
  local listen
  listen=$(effective CONCERT_PORTAL_LISTEN "$DEFAULT_PORTAL_LISTEN")
  [ -n "$listen" ] || return 1
  # Only whether the pass is set is checked; its value is never printed.
  if [ -e "$SECRETS_FILE" ]; then
    [ -n "$(env_value "$SECRETS_FILE" CONCERT_PORTAL_PASS || true)" ]
  else
    return 0
  fi
}

# Ports to listen on and to connect to, from the effective settings.
listen_ports() {
  listen_port "$(effective CONCERT_LISTEN "$DEFAULT_LISTEN")"
  printf '\n'
  local http
  http=$(effective CONCERT_HTTP_LISTEN "")
  if [ -n "$http" ]; then
    listen_port "$http"
    printf '\n'
  fi
  if portal_enabled; then
    listen_port "$(effective CONCERT_PORTAL_LISTEN "$DEFAULT_PORTAL_LISTEN")"
    printf '\n'
  fi
}

connect_ports() {
  url_port "$(effective CONCERT_UPSTREAM "$DEFAULT_UPSTREAM")"
  printf '\n'
  # Certificates for CONCERT_TLS_DOMAINS come from an ACME service over HTTPS.
  if [ -n "$(effective CONCERT_TLS_DOMAINS "")" ]; then
    printf '443\n'
  fi
}

install_selinux() {
  local build changed=0
  if ! selinux_active; then
    say "SELinux is disabled; skipping the policy module"
    return
  fi
  # The module's sources are kept installed so a rerun can tell whether they changed.
  local src
  for src in concert.te concert.fc concert.if; do
    if [ ! -f "$SHARE_DIR/selinux/$src" ] || ! cmp -s "$SCRIPT_DIR/selinux/$src" "$SHARE_DIR/selinux/$src"; then
      changed=1
    fi
  done
  if [ "$changed" = 0 ] && have semodule && ! module_loaded "$SELINUX_MODULE"; then
    changed=1
  fi
  if [ "$changed" = 1 ]; then
    if [ "$DRY_RUN" = 1 ]; then
      say "would build $SELINUX_MODULE.pp from $SCRIPT_DIR/selinux with /usr/share/selinux/devel/Makefile"
      say "would run: semodule -i $SELINUX_MODULE.pp"
      CHANGES=$((CHANGES + 1))
    else
      build=$(mktemp -d)
      cp "$SCRIPT_DIR/selinux/concert.te" "$SCRIPT_DIR/selinux/concert.fc" "$SCRIPT_DIR/selinux/concert.if" "$build/"
      make -s -C "$build" -f /usr/share/selinux/devel/Makefile "$SELINUX_MODULE.pp" >/dev/null
      run semodule -i "$build/$SELINUX_MODULE.pp"
      rm -rf "$build"
      for src in concert.te concert.fc concert.if; do
        install -D -m 0644 "$SCRIPT_DIR/selinux/$src" "$SHARE_DIR/selinux/$src"
      done
    fi
    NEEDS_RESTART=1
  fi

  label_ports
  set_low_port_boolean

  local paths=("$BIN_PATH" "$ETC_DIR" "$STATE_DIR")
  [ "$WANT_IPASN" = 1 ] && paths+=("$IPASN_DIR")
  if [ "$DRY_RUN" = 1 ]; then
    say "would run: restorecon -R ${paths[*]}"
  else
    local relabelled
    relabelled=$(restorecon -R -v "${paths[@]}" 2>&1 || true)
    if [ -n "$relabelled" ]; then
      say "$relabelled"
      CHANGES=$((CHANGES + 1))
    fi
  fi
}

# Labels each configured port for Concert. A port without an entry (or inside a range) gets its
# own concert label; a port the policy names for another service is allowed through the ports
# module for that type, without taking it away from its owner.
label_ports() {
  local port found type kind bind_types="" connect_types="" role wanted
  if [ "$FOREIGN_SYSTEM" = 1 ]; then
    say "note: port types are unknown here; on RHEL a port its policy already names (8080 is http_cache_port_t) is allowed for that type through module $PORTS_MODULE instead of being relabelled"
  fi
  for role in bind connect; do
    if [ "$role" = bind ]; then
      wanted=concert_port_t
      found=$(listen_ports)
    else
      wanted=concert_origin_port_t
      found=$(connect_ports)
    fi
    for port in $(printf '%s\n' "$found" | grep -E '^[0-9]+$' | sort -un); do
      read -r type kind <<<"$(port_type "$port")"
      if [ "$type" = "$wanted" ]; then
        continue
      elif [ -z "$type" ] || [ "$kind" = range ]; then
        run semanage port -a -t "$wanted" -p tcp "$port"
      elif [ "$role" = bind ]; then
        bind_types="$bind_types $type"
      else
        connect_types="$connect_types $type"
      fi
    done
  done

  local current="$SHARE_DIR/selinux/$PORTS_MODULE.te"
  if [ -z "$bind_types$connect_types" ]; then
    if [ -f "$current" ]; then
      run semodule -r "$PORTS_MODULE"
      run rm -f "$current"
    fi
    return
  fi
  local tmp
  tmp=$(mktemp)
  write_ports_module "$tmp" "$(unique_words "$bind_types")" "$(unique_words "$connect_types")"
  if [ -f "$current" ] && cmp -s "$tmp" "$current" && module_loaded "$PORTS_MODULE"; then
    rm -f "$tmp"
    return
  fi
  say "ports owned by other types:${bind_types:+ bind$bind_types}${connect_types:+ connect$connect_types}"
  if [ "$DRY_RUN" = 1 ]; then
    say "would install policy module $PORTS_MODULE:"
    sed 's/^/    /' "$tmp"
    CHANGES=$((CHANGES + 1))
  else
    local build
    build=$(mktemp -d)
    checkmodule -M -m -o "$build/$PORTS_MODULE.mod" "$tmp" >/dev/null
    semodule_package -o "$build/$PORTS_MODULE.pp" -m "$build/$PORTS_MODULE.mod"
    run semodule -i "$build/$PORTS_MODULE.pp"
    install -D -m 0644 "$tmp" "$current"
    rm -rf "$build"
    NEEDS_RESTART=1
  fi
  rm -f "$tmp"
}

has_low_port() {
  local port
  for port in $(listen_ports); do
    if [ "$port" -lt 1024 ]; then
      return 0
    fi
  done
  return 1
}

set_low_port_boolean() {
  local want=off current=""
  has_low_port && want=on
  if have getsebool; then
    current=$(getsebool concert_bind_low_ports 2>/dev/null | awk '{print $3}' || true)
  fi
  if [ "$current" != "$want" ]; then
    if [ "$want" = on ] || [ -n "$current" ]; then
      run setsebool -P concert_bind_low_ports "$want"
    fi
  fi
}

install_units() {
  local tmp
  if install_file "$SCRIPT_DIR/concert.service" "$UNIT_DIR/$UNIT" 0644 root:root; then
    UNITS_CHANGED=1
    NEEDS_RESTART=1
  fi
  if has_low_port; then
    tmp=$(mktemp)
    printf '[Service]\nCapabilityBoundingSet=CAP_NET_BIND_SERVICE\nAmbientCapabilities=CAP_NET_BIND_SERVICE\n' >"$tmp"
    if install_file "$tmp" "$LOW_PORTS_DROPIN" 0644 root:root; then
      UNITS_CHANGED=1
      NEEDS_RESTART=1
    fi
    rm -f "$tmp"
  elif [ -f "$LOW_PORTS_DROPIN" ]; then
    run rm -f "$LOW_PORTS_DROPIN"
    UNITS_CHANGED=1
    NEEDS_RESTART=1
  fi
  if [ "$WANT_IPASN" = 1 ]; then
    install_file "$IPASN_SRC/concert-ipasn-update" "$LIBEXEC_UPDATE" 0755 root:root || true
    if install_file "$IPASN_SRC/$UPDATE_SERVICE" "$UNIT_DIR/$UPDATE_SERVICE" 0644 root:root; then
      UNITS_CHANGED=1
    fi
    if install_file "$IPASN_SRC/$UPDATE_TIMER" "$UNIT_DIR/$UPDATE_TIMER" 0644 root:root; then
      UNITS_CHANGED=1
    fi
  fi
  if [ "$UNITS_CHANGED" = 1 ]; then
    run systemctl daemon-reload
  fi
  if ! systemctl is-enabled --quiet "$UNIT" 2>/dev/null; then
    run systemctl enable "$UNIT"
  fi
  if [ "$WANT_IPASN" = 1 ]; then
    if ! systemctl is-enabled --quiet "$UPDATE_TIMER" 2>/dev/null; then
      run systemctl enable --now "$UPDATE_TIMER"
    fi
    if [ ! -f "$(effective NADDR_DATA "$IPASN_FILE")" ]; then
      # The first download happens now; a failure leaves the timer to retry tomorrow.
      if [ "$DRY_RUN" = 1 ]; then
        say "would run: systemctl start $UPDATE_SERVICE (first IPtoASN download)"
      else
        systemctl start "$UPDATE_SERVICE" || warn "IPtoASN download failed; the daily timer will retry"
      fi
    fi
  fi
}

start_service() {
  if [ "$WANT_START" = 0 ]; then
    say "not starting $UNIT (--no-start)"
    return
  fi
  if ! systemctl is-active --quiet "$UNIT" 2>/dev/null; then
    run systemctl start "$UNIT"
  elif [ "$NEEDS_RESTART" = 1 ]; then
    run systemctl restart "$UNIT"
  else
    return
  fi
  [ "$DRY_RUN" = 1 ] && return
  verify_service
}

verify_service() {
  local addr host port
  systemctl is-active --quiet "$UNIT" \
    || die "$UNIT is not running; see: journalctl -u $UNIT -n 50"
  if selinux_active; then
    local pid label=""
    pid=$(systemctl show -p MainPID --value "$UNIT")
    label=$(tr -d '\0' <"/proc/$pid/attr/current" 2>/dev/null || true)
    case "$label" in
      *:concert_t:*) ;;
      *) warn "concert runs as '${label:-unknown}', not in the concert_t domain" ;;
    esac
  fi
  # With HTTPS on, the plain-HTTP port answers the health check even before a certificate is
  # ready; without it, the HTTPS port is asked without checking its certificate (the name
  # need not match a loopback address).
  local scheme=http insecure=()
  addr=$(effective CONCERT_HTTP_LISTEN "")
  if [ -z "$addr" ]; then
    addr=$(effective CONCERT_LISTEN "$DEFAULT_LISTEN")
    if [ -n "$(effective CONCERT_TLS_CERT "")$(effective CONCERT_TLS_DOMAINS "")" ]; then
      scheme=https
      insecure=(--insecure)
    fi
  fi
  port=$(listen_port "$addr")
  host=$(listen_host "$addr")
  case "$host" in
    ""|0.0.0.0|::) host=127.0.0.1 ;;
    *:*) host="[$host]" ;;
  esac
  if have curl && curl -fsS "${insecure[@]}" --max-time 5 -o /dev/null "$scheme://$host:$port/_room/healthz"; then
    say "$UNIT is running and answers on $host:$port"
  else
    warn "$UNIT runs but $scheme://$host:$port/_room/healthz did not answer yet"
  fi
}

install_all() {
  if [ "$DRY_RUN" = 1 ]; then
    say "Installing Concert (dry run: nothing is changed)"
  else
    say "Installing Concert"
  fi
  install_packages
  ensure_user
  install_binary
  create_dirs
  write_env_files
  install_selinux
  install_units
  start_service
  if [ "$CHANGES" = 0 ]; then
    say "Concert is installed and up to date; nothing changed"
  elif [ "$DRY_RUN" = 1 ]; then
    say "dry run: $CHANGES change(s) would be made"
  else
    say "done: settings in $ENV_FILE, secrets in $SECRETS_FILE (root only)"
  fi
}

uninstall_all() {
  local unit port type
  for unit in "$UPDATE_TIMER" "$UPDATE_SERVICE" "$UNIT"; do
    if systemctl is-enabled --quiet "$unit" 2>/dev/null || systemctl is-active --quiet "$unit" 2>/dev/null; then
      run systemctl disable --now "$unit"
    fi
  done
  for unit in "$UNIT_DIR/$UNIT" "$UNIT_DIR/$UPDATE_SERVICE" "$UNIT_DIR/$UPDATE_TIMER" "$LOW_PORTS_DROPIN"; do
    if [ -e "$unit" ]; then
      run rm -f "$unit"
      UNITS_CHANGED=1
    fi
  done
  if [ -d "$UNIT_DIR/$UNIT.d" ]; then
    run rmdir --ignore-fail-on-non-empty "$UNIT_DIR/$UNIT.d"
  fi
  if [ "$UNITS_CHANGED" = 1 ]; then
    run systemctl daemon-reload
  fi
  if have semanage; then
    # Port labels go before the module that defines their types.
    while read -r type port; do
      run semanage port -d -t "$type" -p tcp "$port"
    done < <(semanage port -l -C 2>/dev/null \
      | awk '$1 ~ /^concert_(origin_)?port_t$/ && $2 == "tcp" { $2 = ""; t = $1; $1 = "";
               n = split($0, p, ","); for (i = 1; i <= n; i++) { gsub(/ /, "", p[i]); print t, p[i] } }')
    if [ "$(getsebool concert_bind_low_ports 2>/dev/null || true)" = "concert_bind_low_ports --> on" ]; then
      run setsebool -P concert_bind_low_ports off
    fi
  fi
  if have semodule; then
    for type in "$PORTS_MODULE" "$SELINUX_MODULE"; do
      if module_loaded "$type"; then
        run semodule -r "$type"
      fi
    done
  elif [ "$DRY_RUN" = 1 ]; then
    say "would remove SELinux modules $PORTS_MODULE and $SELINUX_MODULE and their port labels"
  fi
  if [ "$PURGE" = 0 ] && have restorecon; then
    # The kept directories lose their module's labels; give them the system's defaults.
    for unit in "$ETC_DIR" "$STATE_DIR" "$IPASN_DIR"; do
      if [ -e "$unit" ]; then
        run restorecon -R "$unit"
      fi
    done
  fi
  for unit in "$BIN_PATH" "$LIBEXEC_UPDATE"; do
    if [ -e "$unit" ]; then
      run rm -f "$unit"
    fi
  done
  if [ -d "$SHARE_DIR" ]; then
    run rm -rf "$SHARE_DIR"
  fi
  if [ "$PURGE" = 1 ]; then
    for unit in "$ETC_DIR" "$STATE_DIR" "$IPASN_DIR"; do
      if [ -e "$unit" ]; then
        run rm -rf "$unit"
      fi
    done
    if getent passwd "$SERVICE_USER" >/dev/null 2>&1; then
      run userdel "$SERVICE_USER"
    fi
    if getent group "$SERVICE_USER" >/dev/null 2>&1; then
      run groupdel "$SERVICE_USER"
    fi
  else
    say "kept $ETC_DIR, $STATE_DIR, $IPASN_DIR and user $SERVICE_USER (--purge removes them)"
  fi
  say "Concert is uninstalled"
}

main() {
  parse_args "$@"
  check_system
  if [ "$UNINSTALL" = 1 ]; then
    uninstall_all
  else
    install_all
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
