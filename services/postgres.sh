#!/usr/bin/env bash
# Private PostgreSQL 15 cluster for toymb tests.
#   services/postgres.sh start|stop|stop --kill|kill|restart|status|logs|url|psql [ARGS...]
# Port: 127.0.0.1:15432 (TOYMB_PG_PORT), trust auth, superuser "postgres",
# databases "toymb" and "toymb_test". Socket dir = data dir's parent (state dir).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
svc_init postgres

# Below Linux's ephemeral range (32768-60999): a port inside it can be taken, between our check and
# the postmaster's bind, by any loopback client connection made meanwhile (CI saw 55432 lost so,
# while Kafka and ActiveMQ were starting beside it).
PG_PORT="${TOYMB_PG_PORT:-15432}"
PG_HOST=127.0.0.1
PG_BIN="${TOYMB_PG_BIN:-/usr/lib/postgresql/15/bin}"
PGDATA="$STATE_DIR/data"
PG_DATABASES=(toymb toymb_test)
PG_USER=postgres

# Run a command as the postgres OS user when we are root (initdb refuses root).
as_pg() {
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

pg_pid() {
    # First line of postmaster.pid is the postmaster's pid.
    read_pid "$PGDATA/postmaster.pid"
}

install() {
    if [[ ! -x "$PG_BIN/pg_ctl" ]]; then
        apt_ensure postgresql-15 postgresql-client-15
    fi
    [[ -x "$PG_BIN/pg_ctl" ]] || die "$PG_BIN/pg_ctl not found after install"
    id postgres >/dev/null 2>&1 || die "OS user 'postgres' missing (should come with the postgresql package)"
}

init_cluster() {
    if [[ $(id -u) -eq 0 ]]; then
        chown postgres:postgres "$STATE_DIR"
        # postgres must be able to traverse to the state dir.
        local d="$STATE_DIR"
        while [[ "$d" != "/" ]]; do
            d="$(dirname "$d")"
            if ! runuser -u postgres -- test -x "$d"; then
                warn "postgres user cannot traverse $d; adding o+x"
                chmod o+x "$d"
            fi
        done
    fi
    if [[ -s "$PGDATA/PG_VERSION" ]]; then
        return 0
    fi
    log "initdb $PGDATA"
    rm -rf "$PGDATA"
    as_pg "$PG_BIN/initdb" -D "$PGDATA" -A trust -U "$PG_USER" -E UTF8 --locale=C.UTF-8 \
        >"$STATE_DIR/initdb.log" 2>&1 || { tail_log "$STATE_DIR/initdb.log"; die "initdb failed"; }
    cat >>"$PGDATA/postgresql.conf" <<EOF

# ---- toymb private cluster (services/postgres.sh) ----
listen_addresses = '127.0.0.1'
unix_socket_directories = '$STATE_DIR'
max_connections = 200
logging_collector = off
log_min_messages = warning
EOF
}

psql_cmd() {
    "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_HOST" -p "$PG_PORT" -U "$PG_USER" "$@"
}

ensure_databases() {
    local db
    for db in "${PG_DATABASES[@]}"; do
        if [[ -z "$(psql_cmd -d postgres -At -c "SELECT 1 FROM pg_database WHERE datname = '$db'")" ]]; then
            psql_cmd -d postgres -c "CREATE DATABASE \"$db\"" >/dev/null
            log "created database $db"
        fi
    done
}

ready() {
    pg_pid >/dev/null 2>&1 && port_open "$PG_HOST" "$PG_PORT" \
        && "$PG_BIN/pg_isready" -q -h "$PG_HOST" -p "$PG_PORT" -U "$PG_USER" -t 3 >/dev/null 2>&1
}

do_start() {
    with_lock
    if ready; then
        ensure_databases
        log "already running (pid $(pg_pid)) on $PG_HOST:$PG_PORT"
        return 0
    fi
    install
    init_cluster
    # A postmaster killed a moment ago may still be an unreaped zombie.
    if [[ -s "$PGDATA/postmaster.pid" ]]; then
        wait_reaped "$(head -n1 "$PGDATA/postmaster.pid" | tr -dc '0-9')" 10
    fi
    if pg_pid >/dev/null 2>&1; then
        warn "postmaster $(pg_pid) alive but not ready; waiting"
    else
        if port_open "$PG_HOST" "$PG_PORT"; then
            port_in_use_msg "$PG_PORT"
            die "port $PG_PORT is already in use by another process"
        fi
        touch "$LOGFILE"
        [[ $(id -u) -eq 0 ]] && chown postgres:postgres "$LOGFILE"
        # pg_ctl forks the postmaster into its own session; -l keeps its output.
        if ! as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$LOGFILE" -o "-p $PG_PORT" -s -w -t 60 start \
                >"$STATE_DIR/pg_ctl.out" 2>&1 9>&-; then
            cat "$STATE_DIR/pg_ctl.out" >&2
            tail_log "$LOGFILE"
            die "pg_ctl start failed"
        fi
    fi
    local pid
    pid="$(pg_pid)" || { tail_log "$LOGFILE"; die "postmaster not running after start"; }
    echo "$pid" >"$PIDFILE"
    if ! wait_for_port "$PG_HOST" "$PG_PORT" 60 "$pid"; then
        tail_log "$LOGFILE"
        die "postgres did not accept connections on $PG_HOST:$PG_PORT"
    fi
    local deadline=$((SECONDS + 60))
    until "$PG_BIN/pg_isready" -q -h "$PG_HOST" -p "$PG_PORT" -U "$PG_USER" -t 3; do
        ((SECONDS < deadline)) || { tail_log "$LOGFILE"; die "postgres not ready"; }
        sleep 0.3
    done
    ensure_databases
    log "started (pid $pid) on $PG_HOST:$PG_PORT"
}

do_stop() {
    with_lock
    local pid
    if ! pid="$(pg_pid)"; then
        rm -f "$PIDFILE"
        log "not running"
        return 0
    fi
    # fast shutdown: disconnect clients, checkpoint, exit.
    as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -s -m fast -w -t 60 stop 9>&- || stop_pid "$pid" 30
    rm -f "$PIDFILE"
    log "stopped"
}

do_kill() {
    with_lock
    local pid
    if ! pid="$(pg_pid)"; then
        log "not running"
        return 0
    fi
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do pid_alive "$pid" || break; sleep 0.1; done
    wait_reaped "$pid" 10
    # Backends notice postmaster death and exit by themselves; give them a moment.
    local deadline=$((SECONDS + 10))
    while ((SECONDS < deadline)) && pgrep -u postgres -f -- "-D $PGDATA" >/dev/null 2>&1; do sleep 0.2; done
    rm -f "$PIDFILE"
    log "killed (SIGKILL) postmaster $pid"
}

do_status() {
    if ready; then
        echo "postgres: running (pid $(pg_pid)) on $PG_HOST:$PG_PORT, url postgresql+psycopg://$PG_USER@$PG_HOST:$PG_PORT/toymb"
        return 0
    fi
    echo "postgres: stopped"
    return 3
}

case "${1:-}" in
    start) do_start ;;
    stop) if [[ "${2:-}" == "--kill" ]]; then do_kill; else do_stop; fi ;;
    kill) do_kill ;;
    restart) "$0" stop && exec "$0" start ;;
    status) do_status ;;
    logs) tail -n "${2:-100}" "$LOGFILE" ;;
    url) echo "postgresql+psycopg://$PG_USER@$PG_HOST:$PG_PORT/${2:-toymb}" ;;
    psql) shift; psql_cmd -d toymb "$@" ;;
    install) install ;;
    *) usage_generic "url|psql|install"; exit 2 ;;
esac
