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

SVC_HOST="$NATS_HOST"
SVC_PORTS=("$NATS_PORT")
SVC_PORT_TIMEOUTS=(60)
SVC_WHERE=" on nats://$NATS_HOST:$NATS_PORT"
SVC_STARTED_NOTE=" (JetStream store $STORE_DIR)"
SVC_START_FAILED="nats-server did not come up on $NATS_HOST:$NATS_PORT"

nats_bin() {
    command -v nats-server 2>/dev/null || { [[ -x /usr/bin/nats-server ]] && echo /usr/bin/nats-server; }
}

install() {
    [[ -n "$(nats_bin)" ]] || apt_ensure nats-server
    [[ -n "$(nats_bin)" ]] || die "nats-server not found after install"
}

svc_launch() {
    mkdir -p "$STORE_DIR"
    start_detached "$LOGFILE" "$(nats_bin)" \
        --name toymb-nats -a "$NATS_HOST" -p "$NATS_PORT" \
        -js -sd "$STATE_DIR"
}

svc_main "$@"
