#!/usr/bin/env bash
# Private ActiveMQ 5.17 (Debian package) instance for toymb tests.
#   services/activemq.sh start|stop|stop --kill|kill|restart|status|logs
#   services/activemq.sh foreground   # run the broker as this process (a container's command)
#   Env: TOYMB_AMQ_BIND_HOST (the connectors' address, default 127.0.0.1), TOYMB_AMQ_*_PORT, TOYMB_AMQ_HEAP.
# Ports: OpenWire tcp://127.0.0.1:61616, STOMP stomp://127.0.0.1:61613.
# Optional STOMP over TLS (a stomp+ssl connector), for a second port:
#   TOYMB_AMQ_STOMP_SSL_PORT=PORT TOYMB_AMQ_KEYSTORE=server.p12 TOYMB_AMQ_KEYSTORE_PASSWORD=secret
# A second instance is the same script with other ports and TOYMB_SERVICES_DIR (its own state).
# XStream and Jettison (Debian) are put on the broker's class path, so a STOMP subscription with
# `transformation: jms-json` can tell a MapMessage/ObjectMessage from a TextMessage.
# No web console/Jetty, no JMX. KahaDB data persists in <state>/data.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
svc_init activemq
PID_MATCH="activemq.jar"

AMQ_HOST=127.0.0.1
# The connectors' address: a container binds every interface (deploy/activemq/Dockerfile).
AMQ_BIND_HOST="${TOYMB_AMQ_BIND_HOST:-$AMQ_HOST}"
AMQ_OPENWIRE_PORT="${TOYMB_AMQ_OPENWIRE_PORT:-61616}"
AMQ_STOMP_PORT="${TOYMB_AMQ_STOMP_PORT:-61613}"
AMQ_HOME=/usr/share/activemq
AMQ_TEMPLATE=/etc/activemq/instances-available/main
AMQ_STOMP_SSL_PORT="${TOYMB_AMQ_STOMP_SSL_PORT:-}"
AMQ_KEYSTORE="${TOYMB_AMQ_KEYSTORE:-}"
AMQ_KEYSTORE_PASSWORD="${TOYMB_AMQ_KEYSTORE_PASSWORD:-}"
AMQ_HEAP="${TOYMB_AMQ_HEAP:--Xmx512M}"
# Jars ActiveMQ's STOMP frame translator for `transformation: jms-json` needs (Debian packages).
AMQ_EXTRA_JARS=(/usr/share/java/xstream.jar /usr/share/java/jettison.jar /usr/share/java/xpp3.jar)
CONF_DIR="$STATE_DIR/conf"
DATA_DIR="$STATE_DIR/data"

SVC_HOST="$AMQ_HOST"
SVC_PORTS=("$AMQ_OPENWIRE_PORT" "$AMQ_STOMP_PORT")
SVC_PORT_TIMEOUTS=(120 60)
if [[ -n "$AMQ_STOMP_SSL_PORT" ]]; then
    [[ -n "$AMQ_KEYSTORE" && -n "$AMQ_KEYSTORE_PASSWORD" ]] \
        || die "TOYMB_AMQ_STOMP_SSL_PORT needs TOYMB_AMQ_KEYSTORE (PKCS12) and TOYMB_AMQ_KEYSTORE_PASSWORD"
    SVC_PORTS+=("$AMQ_STOMP_SSL_PORT")
    SVC_PORT_TIMEOUTS+=(60)
fi
SVC_WHERE=": openwire $AMQ_HOST:$AMQ_OPENWIRE_PORT, stomp $AMQ_HOST:$AMQ_STOMP_PORT"
SVC_STATUS_WHERE=": openwire tcp://$AMQ_HOST:$AMQ_OPENWIRE_PORT, stomp $AMQ_HOST:$AMQ_STOMP_PORT"
SVC_NOT_READY="ports not open yet"
SVC_START_FAILED="activemq did not come up (see $LOGFILE, $DATA_DIR/activemq.log)"
SVC_STOP_TIMEOUT=60   # SIGTERM runs the JVM shutdown hook: connectors close, KahaDB is checkpointed.
SVC_LOGS_FILE="$DATA_DIR/activemq.log"

install() {
    if [[ ! -f "$AMQ_HOME/bin/activemq.jar" || ! -f "$AMQ_TEMPLATE/activemq.xml" ]]; then
        apt_ensure activemq
    fi
    [[ -f "$AMQ_HOME/bin/activemq.jar" ]] || die "$AMQ_HOME/bin/activemq.jar missing after install"
    command -v java >/dev/null || apt_ensure default-jre-headless
    [[ -f /usr/share/java/xstream.jar && -f /usr/share/java/jettison.jar ]] \
        || apt_ensure libxstream-java libjettison-java
}

# Regenerate conf/ from the Debian template on every start (data/ is kept).
write_config() {
    mkdir -p "$CONF_DIR" "$DATA_DIR" "$DATA_DIR/tmp" "$STATE_DIR/lib"
    # activemq.jar adds ${activemq.base}/lib/*.jar to the broker's class path.
    local jar
    for jar in "${AMQ_EXTRA_JARS[@]}"; do
        [[ -f "$jar" ]] && ln -sf "$jar" "$STATE_DIR/lib/"
    done
    # Debian's ActiveMQ logs through slf4j -> log4j 1.2 (the template's log4j2.properties
    # is not used), so write a log4j 1.2 config: INFO to data/activemq.log, WARN to stdout.
    cat >"$CONF_DIR/log4j.properties" <<EOF
log4j.rootLogger=INFO, console, logfile
log4j.logger.org.apache.activemq.spring=WARN
log4j.logger.org.springframework=WARN
log4j.logger.org.apache.xbean=WARN
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.Threshold=WARN
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d | %-5p | %m | %c | %t%n
log4j.appender.logfile=org.apache.log4j.RollingFileAppender
log4j.appender.logfile.File=$DATA_DIR/activemq.log
log4j.appender.logfile.MaxFileSize=5MB
log4j.appender.logfile.MaxBackupIndex=3
log4j.appender.logfile.append=true
log4j.appender.logfile.layout=org.apache.log4j.PatternLayout
log4j.appender.logfile.layout.ConversionPattern=%d | %-5p | %m | %c | %t%n
EOF
    python3 - "$AMQ_TEMPLATE/activemq.xml" "$CONF_DIR/activemq.xml.tmp" \
        "$AMQ_BIND_HOST" "$AMQ_OPENWIRE_PORT" "$AMQ_STOMP_PORT" "$AMQ_STOMP_SSL_PORT" "$AMQ_KEYSTORE" \
        "$AMQ_KEYSTORE_PASSWORD" <<'PY'
import re, sys
from xml.sax.saxutils import quoteattr
src, dst, host, ow, stomp, ssl_port, keystore, keystore_password = sys.argv[1:]
xml = open(src).read()
# Explicit limits (the stock 1 GB memory / 100 GB store only produce warnings on
# a 512 MB heap / small disk). ActiveMQ's schema wants <broker> children in
# alphabetical order, so <systemUsage> goes right before <transportConnectors>.
usage = (
    "<systemUsage>\n"
    "            <systemUsage>\n"
    '                <memoryUsage><memoryUsage percentOfJvmHeap="70"/></memoryUsage>\n'
    '                <storeUsage><storeUsage limit="8 gb"/></storeUsage>\n'
    '                <tempUsage><tempUsage limit="2 gb"/></tempUsage>\n'
    "            </systemUsage>\n"
    "        </systemUsage>\n        "
)
ssl_context = ssl_connector = ""
if ssl_port:
    # <sslContext> sorts before <systemUsage> (the schema's alphabetical order of <broker> children).
    ssl_context = (
        "<sslContext>\n"
        f'            <sslContext keyStore={quoteattr("file:" + keystore)} keyStorePassword={quoteattr(keystore_password)}'
        ' keyStoreType="pkcs12"/>\n'
        "        </sslContext>\n        "
    )
    ssl_connector = f'            <transportConnector name="stomp+ssl" uri="stomp+ssl://{host}:{ssl_port}"/>\n'
connectors = ssl_context + usage + (
    "<transportConnectors>\n"
    f'            <transportConnector name="openwire" uri="tcp://{host}:{ow}"/>\n'
    f'            <transportConnector name="stomp" uri="stomp://{host}:{stomp}"/>\n'
    + ssl_connector +
    "        </transportConnectors>"
)
xml, n = re.subn(r"<transportConnectors>.*?</transportConnectors>", connectors, xml, flags=re.S)
if n != 1:
    sys.exit("activemq.xml template: <transportConnectors> not found exactly once")
# No scheduler (schedulerSupport defaults to false; make it explicit), no JMX.
xml, n = re.subn(r"<broker\s", '<broker schedulerSupport="false" ', xml, count=1)
if n != 1:
    sys.exit("activemq.xml template: <broker> not found")
# Drop any web console import (jetty.xml) a template may carry.
xml = re.sub(r'<import\s+resource="[^"]*jetty\.xml"\s*/>', "", xml)
open(dst, "w").write(xml)
PY
    mv "$CONF_DIR/activemq.xml.tmp" "$CONF_DIR/activemq.xml"
}

# broker_command: the broker's command line, in BROKER_CMD.
broker_command() {
    # shellcheck disable=SC2206
    BROKER_CMD=(java $AMQ_HEAP
        -Dorg.apache.activemq.UseDedicatedTaskRunner=true
        -Djava.awt.headless=true
        -Dlog4j.configuration="file:$CONF_DIR/log4j.properties"
        -Dactivemq.base="$STATE_DIR"
        -Dactivemq.home="$AMQ_HOME"
        -Dactivemq.conf="$CONF_DIR"
        -Dactivemq.data="$DATA_DIR"
        -Djava.io.tmpdir="$DATA_DIR/tmp"
        -jar "$AMQ_HOME/bin/activemq.jar" start "xbean:file:$CONF_DIR/activemq.xml")
}

svc_launch() {
    write_config
    broker_command
    start_detached "$LOGFILE" "${BROKER_CMD[@]}"
}

case "${1:-}" in
    # The broker as this process (a container's command): no detaching, no pid file.
    foreground) install; write_config; broker_command; exec "${BROKER_CMD[@]}" ;;
    *) svc_main "$@" ;;
esac
