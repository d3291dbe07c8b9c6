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

SVC_HOST="$PG_HOST"
SVC_PORTS=("$PG_PORT")
SVC_PORT_TIMEOUTS=(60)
SVC_WHERE=" on $PG_HOST:$PG_PORT"
SVC_STATUS_WHERE=" on $PG_HOST:$PG_PORT, url postgresql+psycopg://$PG_USER@$PG_HOST:$PG_PORT/toymb"
SVC_PROC=postmaster
SVC_NOT_READY="not ready"
SVC_START_FAILED="postgres did not accept connections on $PG_HOST:$PG_PORT"
SVC_COMMANDS="url|psql"

# Run a command as the postgres OS user when we are root (initdb refuses root).
as_pg() {
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

svc_pid() {
    # First line of postmaster.pid is the postmaster's pid.
    pid_in_file "$PGDATA/postmaster.pid"
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

pg_isready_cmd() {
    "$PG_BIN/pg_isready" -q -h "$PG_HOST" -p "$PG_PORT" -U "$PG_USER" -t 3
}

svc_ready() {
    svc_pid >/dev/null 2>&1 && port_open "$PG_HOST" "$PG_PORT" && pg_isready_cmd >/dev/null 2>&1
}

svc_already_running() { ensure_databases; }

svc_prepare() {
    init_cluster
    # A postmaster killed a moment ago may still be an unreaped zombie.
    if [[ -s "$PGDATA/postmaster.pid" ]]; then
        wait_reaped "$(head -n1 "$PGDATA/postmaster.pid" | tr -dc '0-9')" 10
    fi
}

svc_launch() {
    touch "$LOGFILE"
    [[ $(id -u) -eq 0 ]] && chown postgres:postgres "$LOGFILE"
    # pg_ctl forks the postmaster into its own session; -l keeps its output.
    if ! as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$LOGFILE" -o "-p $PG_PORT" -s -w -t 60 start \
            >"$STATE_DIR/pg_ctl.out" 2>&1 9>&-; then
        cat "$STATE_DIR/pg_ctl.out" >&2
        svc_start_failed "" "pg_ctl start failed"
    fi
    START_PID="$(svc_pid)" || svc_start_failed "" "postmaster not running after start"
}

# A postmaster that does not get ready is left running (no stop_pid).
svc_start_failed() {
    tail_log "$LOGFILE"
    die "$2"
}

svc_after_ports() {
    local deadline=$((SECONDS + 60))
    until pg_isready_cmd; do
        ((SECONDS < deadline)) || svc_start_failed "$1" "postgres not ready"
        sleep 0.3
    done
    ensure_databases
}

# fast shutdown: disconnect clients, checkpoint, exit.
svc_halt() {
    as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -s -m fast -w -t 60 stop 9>&- || stop_pid "$1" 30
}

# SIGKILL the postmaster only (not its process group, unlike the other services).
svc_sigkill() {
    kill -KILL "$1" 2>/dev/null || true
    await_exit "$1" 10 || true
    # Backends notice postmaster death and exit by themselves; give them a moment.
    local deadline=$((SECONDS + 10))
    while ((SECONDS < deadline)) && pgrep -u postgres -f -- "-D $PGDATA" >/dev/null 2>&1; do sleep 0.2; done
}

case "${1:-}" in
    url) echo "postgresql+psycopg://$PG_USER@$PG_HOST:$PG_PORT/${2:-toymb}" ;;
    psql) shift; psql_cmd -d toymb "$@" ;;
    *) svc_main "$@" ;;
esac
