#!/usr/bin/env bash
# Private MariaDB server (Debian's mariadb-server, 10.11) for toymb tests.
#   services/mariadb.sh start|stop|stop --kill|kill|restart|status|logs|url|sql [ARGS...]
# Port: 127.0.0.1:13306 (TOYMB_MARIADB_PORT), user "toymb" without a password from 127.0.0.1 with
# every privilege, grants included (the tests create a database per xdist worker, and a user to
# cut off in an outage), databases "toymb" and "toymb_test".
# The OS user that installed it administers it through the socket in the state dir (unix_socket auth:
# mariadb-install-db makes root and that user such accounts); as root, the server runs as "mysql".
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
svc_init mariadb

# Below Linux's ephemeral range (32768-60999), as postgres.sh explains.
MY_PORT="${TOYMB_MARIADB_PORT:-13306}"
MY_HOST=127.0.0.1
MY_DATA="$STATE_DIR/data"
MY_SOCKET="$STATE_DIR/mariadb.sock"
MY_CNF="$STATE_DIR/my.cnf"
MY_DATABASES=(toymb toymb_test)
MY_USER=toymb

SVC_HOST="$MY_HOST"
SVC_PORTS=("$MY_PORT")
SVC_PORT_TIMEOUTS=(60)
SVC_WHERE=" on $MY_HOST:$MY_PORT"
SVC_STATUS_WHERE=" on $MY_HOST:$MY_PORT, url mysql+pymysql://$MY_USER@$MY_HOST:$MY_PORT/toymb"
SVC_PROC=mariadbd
SVC_NOT_READY="not ready"
SVC_START_FAILED="mariadb did not accept connections on $MY_HOST:$MY_PORT"
SVC_COMMANDS="url|sql"
PID_MATCH="$MY_CNF"
# mariadbd refuses to run as root: as root, it (and the datadir) belong to the OS user mysql.
MY_RUN_AS=()
[[ $(id -u) -ne 0 ]] || MY_RUN_AS=(--user=mysql)

install() {
    [[ -x /usr/sbin/mariadbd && -x /usr/bin/mariadb-install-db ]] || apt_ensure mariadb-server mariadb-client
    [[ -x /usr/sbin/mariadbd ]] || die "/usr/sbin/mariadbd not found after install"
    [[ $(id -u) -ne 0 ]] || id mysql >/dev/null 2>&1 \
        || die "OS user 'mysql' missing (should come with the mariadb-server package)"
}

# Only this file is read (--defaults-file): /etc/mysql's settings (port 3306, /run/mysqld) stay out.
write_config() {
    cat >"$MY_CNF" <<EOF
# ---- toymb private server (services/mariadb.sh); rewritten at every start ----
[mysqld]
datadir = $MY_DATA
socket = $MY_SOCKET
pid-file = $STATE_DIR/mariadbd.pid
bind-address = $MY_HOST
port = $MY_PORT
skip-name-resolve
character-set-server = utf8mb4
collation-server = utf8mb4_nopad_bin
# A message body of several MiB travels in one packet.
max_allowed_packet = 64M
max_connections = 300
innodb_buffer_pool_size = 128M
innodb_log_file_size = 64M
# Test data, not a production database: no doublewrite, fsync stays on (an ack survives a crash).
innodb_doublewrite = 0
skip-log-bin
log-error = $LOGFILE
EOF
}

init_datadir() {
    if [[ $(id -u) -eq 0 ]]; then
        chown mysql:mysql "$STATE_DIR"
        # mysql must be able to traverse to the state dir.
        local d="$STATE_DIR"
        while [[ "$d" != "/" ]]; do
            d="$(dirname "$d")"
            if ! runuser -u mysql -- test -x "$d"; then
                warn "mysql user cannot traverse $d; adding o+x"
                chmod o+x "$d"
            fi
        done
    fi
    write_config
    [[ -d "$MY_DATA/mysql" ]] && return 0
    log "mariadb-install-db $MY_DATA"
    rm -rf "$MY_DATA"
    mariadb-install-db --defaults-file="$MY_CNF" "${MY_RUN_AS[@]}" --skip-test-db \
        >"$STATE_DIR/install-db.log" 2>&1 || { tail_log "$STATE_DIR/install-db.log"; die "mariadb-install-db failed"; }
}

# As the server's administrator, through the socket (the OS user maps to its own account).
sql_root() {
    mariadb --no-defaults -S "$MY_SOCKET" -u "$(id -un)" --batch --skip-column-names "$@"
}

ensure_databases() {
    local db
    sql_root -e "CREATE USER IF NOT EXISTS '$MY_USER'@'$MY_HOST';
                 GRANT ALL PRIVILEGES ON *.* TO '$MY_USER'@'$MY_HOST' WITH GRANT OPTION;" \
        || die "could not create the user $MY_USER"
    for db in "${MY_DATABASES[@]}"; do
        if [[ -z "$(sql_root -e "SHOW DATABASES LIKE '$db'")" ]]; then
            sql_root -e "CREATE DATABASE \`$db\` CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin"
            log "created database $db"
        fi
    done
}

ping_server() {
    mariadb-admin --no-defaults -S "$MY_SOCKET" -u "$(id -un)" --connect-timeout=3 ping >/dev/null 2>&1
}

svc_ready() {
    svc_pid >/dev/null 2>&1 && port_open "$MY_HOST" "$MY_PORT" && ping_server
}

svc_already_running() { ensure_databases; }

svc_prepare() { init_datadir; }

svc_launch() {
    touch "$LOGFILE"
    [[ $(id -u) -eq 0 ]] && chown mysql:mysql "$LOGFILE"
    start_detached "$STATE_DIR/mariadbd.out" /usr/sbin/mariadbd --defaults-file="$MY_CNF" "${MY_RUN_AS[@]}"
}

svc_after_ports() {
    local deadline=$((SECONDS + 60))
    until ping_server; do
        ((SECONDS < deadline)) || svc_start_failed "$1" "mariadb not ready"
        sleep 0.3
    done
    ensure_databases
}

case "${1:-}" in
    url) echo "mysql+pymysql://$MY_USER@$MY_HOST:$MY_PORT/${2:-toymb}" ;;
    sql) shift; sql_root toymb "$@" ;;
    *) svc_main "$@" ;;
esac
