#!/bin/bash
# Creates the cluster on the first start (password authentication from the network), then runs
# postgres in the foreground as PID 1: `docker stop` is a fast shutdown, `docker kill` a crash.
set -euo pipefail
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD (the compose file takes it from TOYMB_PG_PASSWORD)}"
user="${POSTGRES_USER:-postgres}" db="${POSTGRES_DB:-$user}"
if [[ ! -s $PGDATA/PG_VERSION ]]; then
    pwfile="$(mktemp)"
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" -A scram-sha-256 -E UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    postgres -D "$PGDATA" -c listen_addresses= -c unix_socket_directories=/var/run/postgresql &
    pid=$!
    until pg_isready -q -h /var/run/postgresql; do sleep 0.2; done
    if [[ $db != postgres ]]; then
        PGPASSWORD="$POSTGRES_PASSWORD" psql -q -h /var/run/postgresql -U "$user" -d postgres \
            -c "CREATE DATABASE \"$db\""
    fi
    kill -INT "$pid"; wait "$pid" || true
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/var/run/postgresql \
    -c max_connections="${POSTGRES_MAX_CONNECTIONS:-200}"
