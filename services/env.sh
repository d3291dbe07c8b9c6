#!/usr/bin/env bash
# Print `export` lines for the test services (nothing is exported by itself):
#   eval "$(services/env.sh)"
# TOYMB_KAFKA_CLASSPATH needs the Kafka jars (services/kafka.sh install fetches them;
# env.sh will fetch them on first use, which needs Maven Central).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

pg_port="${TOYMB_PG_PORT:-15432}"
mariadb_port="${TOYMB_MARIADB_PORT:-13306}"
kafka_port="${TOYMB_KAFKA_PORT:-9092}"
stomp_port="${TOYMB_AMQ_STOMP_PORT:-61613}"
openwire_port="${TOYMB_AMQ_OPENWIRE_PORT:-61616}"
nats_port="${TOYMB_NATS_PORT:-4222}"

emit() { printf 'export %s=%q\n' "$1" "$2"; }

emit TOYMB_TEST_PG_URL "postgresql+psycopg://postgres@127.0.0.1:$pg_port/toymb"
emit TOYMB_TEST_MARIADB_URL "mysql+pymysql://toymb@127.0.0.1:$mariadb_port/toymb"
emit TOYMB_TEST_KAFKA "127.0.0.1:$kafka_port"
emit TOYMB_TEST_STOMP "127.0.0.1:$stomp_port"
emit TOYMB_TEST_OPENWIRE "tcp://127.0.0.1:$openwire_port"
emit TOYMB_TEST_NATS "nats://127.0.0.1:$nats_port"
if cp="$("$here/kafka.sh" classpath 2>/dev/null)" && [[ -n "$cp" ]]; then
    emit TOYMB_KAFKA_CLASSPATH "$cp"
else
    echo "# TOYMB_KAFKA_CLASSPATH unavailable: services/kafka.sh classpath failed" >&2
fi
