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
    if ! flock -w 600 9; then
        die "could not take lock $STATE_DIR/.lock"
    fi
}

# ------------------------------------------------------------ Debian packages ---
# The one way any script of ours installs Debian packages: apt_ensure (every services/*.sh,
# services/apt.sh for the Makefile). dpkg is one per machine, so the lock is too, not one per clone:
# two clones' scripts, or two services of one run, install one after the other. Another program's
# apt (not ours) may hold dpkg's own locks: apt-get waits for them (DPkg::Lock::Timeout), and an
# `apt-get update` that finds the lists locked is tried again, within the same bound.
APT_LOCK="${TOYMB_APT_LOCK:-/var/lock/toymb-apt.lock}"
APT_WAIT_S="${TOYMB_APT_WAIT_S:-900}"
APT_LOG=""   # $STATE_BASE/.apt-install.log, set by apt_ensure

# apt_missing PKG...: print the packages that are not installed.
apt_missing() {
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
    done
}

# apt_lists_fresh: true when the package lists were fetched in the last day.
apt_lists_fresh() {
    [[ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -mmin -1440 -print -quit 2>/dev/null)" ]]
}

# apt_get ARGS...: apt-get that waits for dpkg's and the lists' locks (another program's apt) up to
# APT_WAIT_S; its output is appended to APT_LOG. The lock fd 8 is not passed on: a daemon a package's
# script starts must not hold our lock.
apt_get() {
    local deadline=$((SECONDS + APT_WAIT_S))
    while :; do
        DEBIAN_FRONTEND=noninteractive apt-get -y -q -o "DPkg::Lock::Timeout=$APT_WAIT_S" "$@" \
            >>"$APT_LOG" 2>&1 8>&- && return 0
        # apt-get update does not wait for the lists' lock: try again while another apt holds it.
        tail -n 5 "$APT_LOG" | grep -qiE 'could not get lock|unable to (acquire|lock)' || return 1
        ((SECONDS < deadline)) || return 1
        sleep 2
    done
}

# apt_ensure PKG...: install the Debian packages that are not installed yet (no recommends).
apt_ensure() {
    local missing
    mapfile -t missing < <(apt_missing "$@")
    ((${#missing[@]})) || return 0
    [[ $(id -u) -eq 0 ]] || die "packages missing (${missing[*]}) and not root; install them first"
    mkdir -p "$STATE_BASE" "$(dirname "$APT_LOCK")"
    APT_LOG="$STATE_BASE/.apt-install.log"
    (
        exec 8>"$APT_LOCK"
        log "installing Debian packages: ${missing[*]} (waiting for the machine's apt lock $APT_LOCK)"
        flock -w "$APT_WAIT_S" 8 || die "another install held $APT_LOCK for ${APT_WAIT_S}s"
        # Installed by another script while we waited.
        mapfile -t missing < <(apt_missing "${missing[@]}")
        ((${#missing[@]})) || exit 0
        printf '\n===== %s %s: apt-get install %s =====\n' "$(date '+%F %T')" "$SVC_NAME" "${missing[*]}" >>"$APT_LOG"
        if ! apt_lists_fresh; then
            apt_get update || { tail -n 30 "$APT_LOG" >&2; die "apt-get update failed (log: $APT_LOG)"; }
        fi
        # Lists a day old can name versions the mirror no longer has: update once and try again.
        apt_get install --no-install-recommends "${missing[@]}" \
            || { apt_get update && apt_get install --no-install-recommends "${missing[@]}"; } \
            || { tail -n 30 "$APT_LOG" >&2; die "apt-get install ${missing[*]} failed (log: $APT_LOG)"; }
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

# pid_in_file FILE: print the pid on FILE's first line if that process is alive.
pid_in_file() {
    local pid
    [[ -s "$1" ]] || return 1
    pid="$(head -n1 "$1" | tr -dc '0-9')"
    pid_alive "$pid" || return 1
    printf '%s\n' "$pid"
}

# read_pid: print the pid stored in $PIDFILE if that process is alive.
read_pid() {
    local pid
    pid="$(pid_in_file "$PIDFILE")" || return 1
    # Guard against a stale pid file whose pid was reused by another program.
    if [[ -n "${PID_MATCH:-}" ]]; then
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

# signal_group PID SIGNAL: send SIGNAL to PID's process group (falls back to the pid).
signal_group() {
    kill "-$2" -- "-$1" 2>/dev/null || kill "-$2" "$1" 2>/dev/null || true
}

# await_exit PID TIMEOUT_S: wait up to TIMEOUT_S until PID is gone (and reaped).
await_exit() {
    local pid="$1" deadline=$((SECONDS + $2))
    while ((SECONDS < deadline)); do
        pid_alive "$pid" || { wait_reaped "$pid"; return 0; }
        sleep 0.1
    done
    return 1
}

# stop_pid PID TIMEOUT_S [SIGNAL]: send SIGNAL (default TERM) to the process group
# (falls back to the pid), wait up to TIMEOUT_S, then SIGKILL.
stop_pid() {
    local pid="$1" timeout_s="$2" sig="${3:-TERM}"
    pid_alive "$pid" || return 0
    signal_group "$pid" "$sig"
    await_exit "$pid" "$timeout_s" && return 0
    warn "pid $pid still alive after ${timeout_s}s, sending SIGKILL"
    signal_group "$pid" KILL
    await_exit "$pid" 5 && return 0
    warn "pid $pid did not die"
    return 1
}

# kill_pid PID: SIGKILL the process group (fault injection), wait until gone.
kill_pid() {
    local pid="$1"
    pid_alive "$pid" || return 0
    signal_group "$pid" KILL
    await_exit "$pid" 10 && return 0
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

# ports_free HOST PORT...: die if another process already listens on one of the PORTs.
ports_free() {
    local host="$1" p
    shift
    for p in "$@"; do
        if port_open "$host" "$p"; then
            port_in_use_msg "$p"
            die "port $p is already in use by another process"
        fi
    done
}

# ----------------------------------------------------------- service control ---
# The commands every service has (start, stop, stop --kill, kill, restart, status,
# logs, install). A service script sources lib.sh, calls svc_init, sets the
# variables below, defines `install` and `svc_launch` (and overrides other hooks
# where it differs), handles its own extra commands and passes the rest to
# `svc_main "$@"`.

SVC_HOST=127.0.0.1
SVC_PORTS=()           # must all accept connections for the service to be ready; start waits for each in turn
SVC_PORT_TIMEOUTS=()   # start's wait for each of SVC_PORTS, in seconds
SVC_BIND_PORTS=()      # must be free before svc_launch (default: SVC_PORTS)
SVC_WHERE=""           # after "(pid N)" in the "already running" and "started" lines
SVC_STARTED_NOTE=""    # appended to the "started" line
SVC_STATUS_WHERE=""    # after "(pid N)" in `status` when running (default: SVC_WHERE)
SVC_NOT_READY="port not open yet"  # "pid N alive but <this>; waiting"; without " yet" in `status`
SVC_PROC="pid"         # how the main process is called in messages ("postmaster" for postgres)
SVC_START_FAILED=""    # error when the ports do not open in time
SVC_FAIL_LOGS=()       # logs shown when start fails (default: LOGFILE)
SVC_LOGS_FILE=""       # the file `logs` shows (default: LOGFILE)
SVC_STOP_TIMEOUT=30    # seconds from SIGTERM to SIGKILL in stop
SVC_COMMANDS=""        # the service's extra commands, for the usage text
START_PID=""           # set by svc_launch (start_detached sets it)

# Hooks, with their defaults. A service redefines them after sourcing lib.sh.
# svc_pid: print the main pid if that process is alive.
svc_pid() { read_pid; }
# svc_ready: true when the process is alive and every one of SVC_PORTS is open.
svc_ready() {
    local p
    svc_pid >/dev/null 2>&1 || return 1
    for p in "${SVC_PORTS[@]}"; do
        port_open "$SVC_HOST" "$p" || return 1
    done
}
# svc_prepare: runs on start after install, before looking for a live process.
svc_prepare() { :; }
# svc_launch (no default; so is `install`): start the process (nothing of ours is
# alive and the ports are free); set START_PID (start_detached does).
# svc_after_ports PID: on start, once SVC_PORTS are open, before the "started" line.
svc_after_ports() { :; }
# svc_already_running: on start, when the service is already ready.
svc_already_running() { :; }
# svc_start_failed PID MESSAGE: show the logs, stop PID (if given) and die with MESSAGE.
svc_start_failed() {
    tail_log "${SVC_FAIL_LOGS[@]:-$LOGFILE}"
    [[ -z "$1" ]] || stop_pid "$1" 10 || true
    die "$2"
}
# svc_halt PID: graceful stop (SIGTERM to the process group, SIGKILL after
# SVC_STOP_TIMEOUT), then wait until the first port is closed.
svc_halt() {
    stop_pid "$1" "$SVC_STOP_TIMEOUT"
    wait_for_port_closed "$SVC_HOST" "${SVC_PORTS[0]}" 10 || true
}
# svc_sigkill PID: SIGKILL the process group and wait until it is gone.
svc_sigkill() { kill_pid "$1"; }

# svc_start: start the service unless it is ready already, wait until its ports are open.
svc_start() {
    with_lock
    if svc_ready; then
        svc_already_running
        log "already running (pid $(svc_pid))$SVC_WHERE"
        return 0
    fi
    install
    svc_prepare
    local pid i
    if pid="$(svc_pid)"; then
        warn "$SVC_PROC $pid alive but $SVC_NOT_READY; waiting"
    else
        ((${#SVC_BIND_PORTS[@]})) || SVC_BIND_PORTS=("${SVC_PORTS[@]}")
        ports_free "$SVC_HOST" "${SVC_BIND_PORTS[@]}"
        svc_launch
        pid="$START_PID"
    fi
    # start_detached wrote it already; a process started otherwise (pg_ctl) gets it here.
    echo "$pid" >"$PIDFILE"
    for i in "${!SVC_PORTS[@]}"; do
        wait_for_port "$SVC_HOST" "${SVC_PORTS[i]}" "${SVC_PORT_TIMEOUTS[i]}" "$pid" \
            || svc_start_failed "$pid" "$SVC_START_FAILED"
    done
    svc_after_ports "$pid"
    log "started (pid $pid)$SVC_WHERE$SVC_STARTED_NOTE"
}

# svc_stop [--kill]: stop the service gracefully (svc_halt), or SIGKILL it (svc_sigkill).
svc_stop() {
    with_lock
    local pid msg="stopped"
    if ! pid="$(svc_pid)"; then
        rm -f "$PIDFILE"
        log "not running"
        return 0
    fi
    if [[ "${1:-}" == "--kill" ]]; then
        svc_sigkill "$pid"
        msg="killed (SIGKILL) $SVC_PROC $pid"
    else
        svc_halt "$pid"
    fi
    rm -f "$PIDFILE"
    log "$msg"
}

# svc_status: exit 0 when running, 1 when the process is alive but not ready, 3 when stopped.
svc_status() {
    if svc_ready; then
        echo "$SVC_NAME: running (pid $(svc_pid))${SVC_STATUS_WHERE:-$SVC_WHERE}"
        return 0
    fi
    if svc_pid >/dev/null 2>&1; then
        echo "$SVC_NAME: starting/unhealthy (pid $(svc_pid)), ${SVC_NOT_READY% yet}"
        return 1
    fi
    echo "$SVC_NAME: stopped"
    return 3
}

# svc_main COMMAND [ARGS...]: run one of the common commands.
svc_main() {
    case "${1:-}" in
        start) svc_start ;;
        stop) svc_stop "${2:-}" ;;
        kill) svc_stop --kill ;;
        restart) "$0" stop && exec "$0" start ;;
        status) svc_status ;;
        logs) tail -n "${2:-100}" "${SVC_LOGS_FILE:-$LOGFILE}" ;;
        install) install ;;
        *) usage_generic "${SVC_COMMANDS:+$SVC_COMMANDS|}install"; exit 2 ;;
    esac
}
