#!/usr/bin/env bash
# Everything `make test` needs before pytest, as fast as the machine allows, and nothing left behind
# when a part fails:
#   - the test services (services/all.sh start) and the Docker engine (services/docker.sh start) in
#     the background, from the start: on a new machine they install packages (one at a time, through
#     lib.sh's machine-wide apt lock) while the virtualenv installs;
#   - the virtualenv (make install), then the checkers (make lint) beside the Spark JVM's class
#     archive (journal_spark/jvm_archive.py, kept in .services);
#   - once the engine is up, the compose cluster's images start building in the background
#     (tests/packaging/compose_cluster.py build): on a new engine that is the longest part of the
#     run, and it goes on while the other tests run; the compose test waits for it.
# When a part fails, everything this script started is stopped, children included (each background
# part runs in a session of its own, killed whole), the services it started are stopped, and so is
# a Docker engine it started; the message names the part and its log. Exit 0 when pytest may run.
#   services/setup.sh [VENV_BIN]        (from the repository's root; VENV_BIN default .venv/bin)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN="${1:-.venv/bin}"
STATE=.services
mkdir -p "$STATE/docker"
SESSIONS=()   # the session ids of the background parts (each is its session's leader)

# background LOG CMD...: run CMD in a session of its own, output to LOG; its pid (a child of this
# shell, and its session's id: setsid does not fork in a shell without job control) goes to BG and
# SESSIONS.
BG=""
background() {
    local logf="$1"; shift
    setsid "$@" >"$logf" 2>&1 </dev/null &
    BG=$!
    SESSIONS+=("$BG")
}

# kill_session SID: SIGTERM, then SIGKILL, every process of session SID (the part and its children:
# a journal job and its JVM, Spark's Python daemons, which leave the part's process group).
kill_session() {
    local sid="$1" i
    pkill -TERM -s "$sid" 2>/dev/null || return 0
    for i in $(seq 50); do pgrep -s "$sid" >/dev/null || return 0; sleep 0.1; done
    pkill -KILL -s "$sid" 2>/dev/null || true
}

engine_was_up=0
bash services/docker.sh status >/dev/null 2>&1 && engine_was_up=1

fail() {
    echo "make test: setup failed: $*" >&2
    local sid
    for sid in "${SESSIONS[@]}"; do kill_session "$sid"; done
    # The service starts have their own time limits: wait for them, then stop what they started
    # (a start killed halfway could leave dpkg half-configured).
    wait 2>/dev/null
    bash services/all.sh stop >"$STATE/stop.log" 2>&1 || cat "$STATE/stop.log" >&2
    ((engine_was_up)) || bash services/docker.sh stop >>"$STATE/stop.log" 2>&1 || true
    echo "make test: everything setup started is stopped (log: $STATE/stop.log)" >&2
    exit 1
}
trap 'fail "interrupted"' INT TERM

background "$STATE/start.log" bash services/all.sh start; services=$BG
background "$STATE/docker/start.log" bash services/docker.sh start; docker=$BG

make --no-print-directory install || fail "make install (the virtualenv $BIN) failed: see above"
background "$STATE/jvm-archive.log" "$BIN/python" -m journal_spark.jvm_archive build "$STATE"; archive=$BG
make --no-print-directory lint; linted=$?

wait "$docker"; engine=$?
cat "$STATE/docker/start.log"
if ((engine == 0)); then
    background "$STATE/docker/images.log" "$BIN/python" -m tests.packaging.compose_cluster build
    echo "$BG" >"$STATE/docker/images.pid"
else
    echo "make test: no Docker engine (log: $STATE/docker/start.log)" >&2
fi

wait "$services"; started=$?
cat "$STATE/start.log"
((started == 0)) || fail "$(grep -h 'start failed' "$STATE/start.log" | sed 's/^\[all\] //' | paste -sd ';' -)" \
    "(all of the services' start: $STATE/start.log)"
((linted == 0)) || fail "make lint found problems: see above"
wait "$archive" || echo "make test: no JVM class archive (log: $STATE/jvm-archive.log); Spark starts slower" >&2
cat "$STATE/jvm-archive.log"
exit 0
