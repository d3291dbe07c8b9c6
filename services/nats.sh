#!/usr/bin/env bash
# nats-server (Debian package) with JetStream for toymb tests.
#   services/nats.sh start|stop|stop --kill|kill|restart|status|logs
# Port: nats://127.0.0.1:4222 (TOYMB_NATS_PORT). JetStream store: <state>/jetstream.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
svc_init nats
PID_MATCH="nats-server"

NATS_HOST=127.0.0.1
NATS_PORT="${TOYMB_NATS_PORT:-4222}"
STORE_DIR="$STATE_DIR/jetstream"   # nats-server appends "jetstream" to -sd

nats_bin() {
    command -v nats-server 2>/dev/null || { [[ -x /usr/bin/nats-server ]] && echo /usr/bin/nats-server; }
}

install() {
    [[ -n "$(nats_bin)" ]] || apt_ensure nats-server
    [[ -n "$(nats_bin)" ]] || die "nats-server not found after install"
}

ready() {
    read_pid >/dev/null 2>&1 && port_open "$NATS_HOST" "$NATS_PORT"
}

do_start() {
    with_lock
    if ready; then
        log "already running (pid $(read_pid)) on nats://$NATS_HOST:$NATS_PORT"
        return 0
    fi
    install
    local pid
    if pid="$(read_pid)"; then
        warn "pid $pid alive but port not open yet; waiting"
    else
        if port_open "$NATS_HOST" "$NATS_PORT"; then
            port_in_use_msg "$NATS_PORT"
            die "port $NATS_PORT is already in use by another process"
        fi
        mkdir -p "$STORE_DIR"
        start_detached "$LOGFILE" "$(nats_bin)" \
            --name toymb-nats -a "$NATS_HOST" -p "$NATS_PORT" \
            -js -sd "$STATE_DIR"
        pid="$START_PID"
    fi
    if ! wait_for_port "$NATS_HOST" "$NATS_PORT" 60 "$pid"; then
        tail_log "$LOGFILE"
        stop_pid "$pid" 10 || true
        die "nats-server did not come up on $NATS_HOST:$NATS_PORT"
    fi
    log "started (pid $pid) on nats://$NATS_HOST:$NATS_PORT (JetStream store $STORE_DIR)"
}

do_stop() {
    with_lock
    local pid
    if ! pid="$(read_pid)"; then
        rm -f "$PIDFILE"
        log "not running"
        return 0
    fi
    stop_pid "$pid" 30
    rm -f "$PIDFILE"
    log "stopped"
}

do_kill() {
    with_lock
    local pid
    if ! pid="$(read_pid)"; then
        rm -f "$PIDFILE"
        log "not running"
        return 0
    fi
    kill_pid "$pid"
    rm -f "$PIDFILE"
    log "killed (SIGKILL) pid $pid"
}

do_status() {
    if ready; then
        echo "nats: running (pid $(read_pid)) on nats://$NATS_HOST:$NATS_PORT"
        return 0
    fi
    echo "nats: stopped"
    return 3
}

case "${1:-}" in
    start) do_start ;;
    stop) if [[ "${2:-}" == "--kill" ]]; then do_kill; else do_stop; fi ;;
    kill) do_kill ;;
    restart) "$0" stop && exec "$0" start ;;
    status) do_status ;;
    logs) tail -n "${2:-100}" "$LOGFILE" ;;
    install) install ;;
    *) usage_generic "install"; exit 2 ;;
esac
