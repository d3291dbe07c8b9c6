#!/usr/bin/env bash
# Start/stop every test service: postgres, mariadb, activemq, kafka, nats; chromium is installed only
# (the console's browser tests drive it; it has nothing to start or stop).
#   services/all.sh start|stop|restart|status
# Optional service list after the command: services/all.sh start kafka nats
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
state="${TOYMB_SERVICES_DIR:-$(dirname "$here")/.services}"
cmd="${1:-}"; shift || true
services=("$@")
[[ ${#services[@]} -gt 0 ]] || services=(postgres mariadb activemq kafka nats chromium)

rc=0
case "$cmd" in
    start)
        # In parallel: Kafka's Maven fetch overlaps the Debian installs (lib.sh serialises apt itself).
        pids=()
        for s in "${services[@]}"; do
            "$here/$s.sh" start & pids+=($!)
        done
        for i in "${!services[@]}"; do
            wait "${pids[i]}" || { echo "[all] ${services[i]} start failed (log: $state/${services[i]}/${services[i]}.log)" >&2; rc=1; }
        done ;;
    status)
        for s in "${services[@]}"; do
            "$here/$s.sh" status || rc=1
        done ;;
    stop)
        for ((i=${#services[@]}-1; i>=0; i--)); do
            "$here/${services[i]}.sh" stop || { echo "[all] ${services[i]} stop failed" >&2; rc=1; }
        done ;;
    restart)
        "$0" stop "${services[@]}"; "$0" start "${services[@]}" || rc=1 ;;
    *)
        echo "usage: $0 start|stop|restart|status [postgres|mariadb|activemq|kafka|nats|chromium ...]" >&2; exit 2 ;;
esac
exit $rc
