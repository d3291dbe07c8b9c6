# shellcheck shell=bash
# Shared helpers for services/*.sh. Source it; do not execute it.
#
# Conventions:
#   - Every service keeps its state under $TOYMB_SERVICES_DIR/<name>/
#     (default: <repo>/.services/<name>/).
#   - Messages go to stderr, so that subcommands like `kafka.sh classpath`
#     can print machine-readable output on stdout.
#   - start/stop are serialised per service with flock on <state>/.lock.

set -euo pipefail

SERVICES_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(dirname "$SERVICES_ROOT")"
STATE_BASE="${TOYMB_SERVICES_DIR:-$REPO_ROOT/.services}"

SVC_NAME=""
PID_MATCH=""   # services set this to a string their command line must contain
STATE_DIR=""
PIDFILE=""
LOGFILE=""

# svc_init NAME: set SVC_NAME, STATE_DIR, PIDFILE, LOGFILE and create the state dir.
svc_init() {
    SVC_NAME="$1"
    mkdir -p "$STATE_BASE"
    STATE_BASE="$(cd "$STATE_BASE" && pwd)"
    STATE_DIR="$STATE_BASE/$SVC_NAME"
    PIDFILE="$STATE_DIR/$SVC_NAME.pid"
    LOGFILE="$STATE_DIR/$SVC_NAME.log"
    mkdir -p "$STATE_DIR"
}

log()  { printf '[%s] %s\n' "${SVC_NAME:-services}" "$*" >&2; }
warn() { printf '[%s] WARNING: %s\n' "${SVC_NAME:-services}" "$*" >&2; }
die()  { printf '[%s] ERROR: %s\n' "${SVC_NAME:-services}" "$*" >&2; exit 1; }

# with_lock: take an exclusive lock for this service (released when the script exits).
with_lock() {
    exec 9>"$STATE_DIR/.lock"
    if ! flock -w "${1:-600}" 9; then
        die "could not take lock $STATE_DIR/.lock"
    fi
}

# Global apt lock so that several services installing at once do not collide.
APT_UPDATED_MARKER="$STATE_BASE/.apt-updated"

# apt_ensure PKG... : install Debian packages that are not installed yet.
apt_ensure() {
    local missing=() p
    for p in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
            missing+=("$p")
        fi
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    [[ $(id -u) -eq 0 ]] || die "packages missing (${missing[*]}) and not root; install them first"
    log "installing Debian packages: ${missing[*]}"
    (
        exec 8>"$STATE_BASE/.apt.lock"
        flock -w 900 8 || die "could not take apt lock"
        export DEBIAN_FRONTEND=noninteractive
        if [[ ! -e "$APT_UPDATED_MARKER" ]] || [[ -n "$(find "$APT_UPDATED_MARKER" -mmin +1440 2>/dev/null)" ]]; then
            apt-get update -qq >&2 || die "apt-get update failed"
            touch "$APT_UPDATED_MARKER"
        fi
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$STATE_BASE/.apt-install.log" 2>&1 \
            || { tail -n 30 "$STATE_BASE/.apt-install.log" >&2; die "apt-get install ${missing[*]} failed"; }
    )
}

# pid_alive PID: true if the process exists and is not a zombie.
pid_alive() {
    local pid="$1" st
    [[ -n "$pid" && "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    st="$(ps -o stat= -p "$pid" 2>/dev/null || true)"
    [[ -n "$st" && "$st" != Z* ]]
}

# wait_reaped PID [TIMEOUT_S]: after a process died, wait until it is also reaped
# (a zombie still answers kill -0, which confuses e.g. postgres' lock file check).
wait_reaped() {
    local pid="$1" deadline=$((SECONDS + ${2:-10}))
    while ((SECONDS < deadline)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    return 0
}

# read_pid [FILE]: print the pid stored in FILE (default $PIDFILE) if that process is alive.
read_pid() {
    local f="${1:-$PIDFILE}" pid
    [[ -s "$f" ]] || return 1
    pid="$(head -n1 "$f" | tr -dc '0-9')"
    pid_alive "$pid" || return 1
    # Guard against a stale pid file whose pid was reused by another program.
    if [[ -n "${PID_MATCH:-}" && "$f" == "$PIDFILE" ]]; then
        tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$PID_MATCH" || return 1
    fi
    printf '%s\n' "$pid"
}

# port_open HOST PORT: true if a TCP connection to HOST:PORT succeeds.
port_open() {
    timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null
}

# port_in_use_msg PORT: describe who listens on PORT (best effort).
port_in_use_msg() {
    if command -v ss >/dev/null 2>&1; then
        ss -ltnpH "( sport = :$1 )" 2>/dev/null | head -n 3 >&2 || true
    fi
}

# tail_log [FILE...]: print the last lines of the given logs to stderr.
tail_log() {
    local f
    for f in "$@"; do
        [[ -f "$f" ]] || continue
        printf -- '----- last lines of %s -----\n' "$f" >&2
        tail -n "${TAIL_LINES:-40}" "$f" >&2 || true
    done
}

# wait_for_port HOST PORT TIMEOUT_S [PID]: wait until HOST:PORT accepts connections.
# Fails early if PID (when given) dies.
wait_for_port() {
    local host="$1" port="$2" timeout_s="$3" pid="${4:-}"
    local deadline=$((SECONDS + timeout_s))
    while ((SECONDS < deadline)); do
        if port_open "$host" "$port"; then
            return 0
        fi
        if [[ -n "$pid" ]] && ! pid_alive "$pid"; then
            warn "process $pid exited while waiting for $host:$port"
            return 1
        fi
        sleep 0.3
    done
    warn "timed out after ${timeout_s}s waiting for $host:$port"
    return 1
}

# wait_for_port_closed HOST PORT TIMEOUT_S
wait_for_port_closed() {
    local deadline=$((SECONDS + $3))
    while ((SECONDS < deadline)); do
        port_open "$1" "$2" || return 0
        sleep 0.3
    done
    return 1
}

# start_detached LOGFILE CMD...: run CMD in a new session (survives the caller's
# shell and terminal), stdout/stderr appended to LOGFILE; writes $PIDFILE.
# The child is the session and process-group leader, so `kill -- -PID` reaches
# every process it spawns.
start_detached() {
    local logf="$1"; shift
    {
        printf '\n===== %s starting: %s =====\n' "$(date '+%F %T')" "$*"
    } >>"$logf"
    # 9>&- : do not leak the service lock fd (see with_lock) into the daemon.
    setsid nohup "$@" >>"$logf" 2>&1 </dev/null 9>&- &
    local pid=$!
    echo "$pid" >"$PIDFILE"
    START_PID="$pid"
}

# stop_pid PID TIMEOUT_S [SIGNAL]: send SIGNAL (default TERM) to the process group
# (falls back to the pid), wait up to TIMEOUT_S, then SIGKILL.
stop_pid() {
    local pid="$1" timeout_s="$2" sig="${3:-TERM}"
    pid_alive "$pid" || return 0
    kill "-$sig" -- "-$pid" 2>/dev/null || kill "-$sig" "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + timeout_s))
    while ((SECONDS < deadline)); do
        pid_alive "$pid" || { wait_reaped "$pid"; return 0; }
        sleep 0.2
    done
    warn "pid $pid still alive after ${timeout_s}s, sending SIGKILL"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
        pid_alive "$pid" || { wait_reaped "$pid"; return 0; }
        sleep 0.1
    done
    warn "pid $pid did not die"
    return 1
}

# kill_pid PID: SIGKILL the process group (fault injection), wait until gone.
kill_pid() {
    local pid="$1"
    pid_alive "$pid" || return 0
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
        pid_alive "$pid" || { wait_reaped "$pid"; return 0; }
        sleep 0.1
    done
    warn "pid $pid did not die after SIGKILL"
    return 1
}

# usage_generic: common usage text.
usage_generic() {
    cat >&2 <<EOF
usage: $(basename "$0") start|stop|stop --kill|kill|restart|status|logs${1:+|$1}
  state dir: $STATE_DIR
EOF
}
