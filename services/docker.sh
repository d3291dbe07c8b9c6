#!/usr/bin/env bash
# A Docker engine for the compose cluster, and the Debian base image every ToyMB image can build
# from without a container registry. Idempotent: each step is skipped when already done.
#   services/docker.sh start     # install docker.io + docker-compose + debootstrap, start dockerd, build the base
#   services/docker.sh stop      # stop the dockerd this script started (images and volumes are kept)
#   services/docker.sh status    # 0 when the engine answers, 3 when it does not
#   services/docker.sh base      # only (re)build the base image when it is missing
#   services/docker.sh logs [N]
# The engine: Debian's dockerd, without systemd, started in the background with its own data root
# (TOYMB_DOCKER_ROOT, default /var/lib/toymb-docker: outside the clone, so the base image and the
# build cache survive a fresh clone) on the usual socket /var/run/docker.sock, which `docker`,
# `docker-compose` and the Python `docker` package find without settings. It runs with
# --iptables=false --ip-forward=false: the host's firewall and loopback services stay untouched;
# containers reach each other on their compose network and answer on ports published to 127.0.0.1,
# but have no way out, so builds use the host's network (`docker build --network host`).
# An engine already answering on the socket is used as it is.
# Env: TOYMB_DOCKER_ROOT, TOYMB_DOCKER_BASE (image name, default toymb/debian:bookworm),
#      TOYMB_DOCKER_SUITE (default bookworm), TOYMB_DOCKER_MIRROR (default: the host's apt mirror).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
svc_init docker

DOCKER_ROOT="${TOYMB_DOCKER_ROOT:-/var/lib/toymb-docker}"
BASE_IMAGE="${TOYMB_DOCKER_BASE:-toymb/debian:bookworm}"
SUITE="${TOYMB_DOCKER_SUITE:-bookworm}"
DOCKERD_LOG="$DOCKER_ROOT/dockerd.log"
DOCKERD_PID="$DOCKER_ROOT/dockerd.pid"
PIDFILE="$DOCKERD_PID"   # start_detached writes it: one engine per machine, not one per clone
SOCKET=/var/run/docker.sock
# Debian's client, not whatever `docker` comes first on PATH: it matches the daemon's API.
DOCKER=/usr/bin/docker
CA_ENV='SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt PIP_CERT=/etc/ssl/certs/ca-certificates.crt'

engine_up() { [[ -S $SOCKET ]] && timeout 10 "$DOCKER" info >/dev/null 2>&1; }

install_engine() {
    [[ -x /usr/sbin/dockerd && -x $DOCKER && -x /usr/bin/docker-compose && -x /usr/sbin/debootstrap ]] && return 0
    apt_ensure docker.io docker-compose debootstrap
}

start_engine() {
    engine_up && return 0
    [[ $(id -u) -eq 0 ]] || die "no Docker engine on $SOCKET and we are not root, so none can start here"
    local pid
    if pid="$(cat "$DOCKERD_PID" 2>/dev/null)" && pid_alive "$pid"; then
        log "dockerd $pid is starting"
    else
        log "starting dockerd (data root $DOCKER_ROOT/engine, log $DOCKERD_LOG)"
        start_detached "$DOCKERD_LOG" /usr/sbin/dockerd --data-root "$DOCKER_ROOT/engine" \
            --exec-root "$DOCKER_ROOT/exec" --pidfile "$DOCKERD_PID.daemon" -H "unix://$SOCKET" \
            --storage-driver overlay2 --iptables=false --ip-forward=false
        pid="$START_PID"
    fi
    local deadline=$((SECONDS + 90))
    until engine_up; do
        pid_alive "$pid" || { tail_log "$DOCKERD_LOG"; die "dockerd exited (no privileges for containers here?)"; }
        ((SECONDS < deadline)) || { tail_log "$DOCKERD_LOG"; die "dockerd did not answer on $SOCKET in 90 s"; }
        sleep 0.5
    done
    log "engine up: $("$DOCKER" version -f 'server {{.Server.Version}}, API {{.Server.APIVersion}}')"
}

host_mirror() {
    [[ -n ${TOYMB_DOCKER_MIRROR:-} ]] && { echo "$TOYMB_DOCKER_MIRROR"; return; }
    local uri
    uri="$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list \
        /etc/apt/sources.list | grep -v security | head -n 1 | sed -E 's/^URIs:[[:space:]]*//; s/^deb (\[[^]]*\] )?//; s/[[:space:]].*//')"
    echo "${uri:-http://deb.debian.org/debian}"
}

# The base: debootstrap minbase, the host's apt sources and settings (a snapshot mirror must not be
# checked for Valid-Until) and its extra CA certificates (outbound TLS may be intercepted: apt,
# pip and Maven in the builds need them), imported as an image. About a minute, once per engine.
build_base() {
    "$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return 0
    local rootfs="$DOCKER_ROOT/rootfs.tmp" mirror
    mirror="$(host_mirror)"
    log "building the base image $BASE_IMAGE (debootstrap $SUITE from $mirror)"
    rm -rf "$rootfs"
    debootstrap --variant=minbase "$SUITE" "$rootfs" "$mirror" >"$STATE_DIR/debootstrap.log" 2>&1 \
        || { tail_log "$STATE_DIR/debootstrap.log"; die "debootstrap failed"; }
    cp -a /etc/apt/sources.list.d/. "$rootfs/etc/apt/sources.list.d/" 2>/dev/null || true
    [[ -f /etc/apt/sources.list ]] && cp /etc/apt/sources.list "$rootfs/etc/apt/sources.list"
    rm -f "$rootfs"/etc/apt/sources.list.d/*disabled*
    grep -rlsE 'Valid-Until|Proxy' /etc/apt/apt.conf.d/ | xargs -r cp -t "$rootfs/etc/apt/apt.conf.d/"
    # Small images: no docs, no man pages, no recommends, no apt lists left behind.
    cat >"$rootfs/etc/apt/apt.conf.d/90toymb" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
    cat >"$rootfs/etc/dpkg/dpkg.cfg.d/90toymb-nodoc" <<'EOF'
path-exclude /usr/share/doc/*
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
    mkdir -p "$rootfs/usr/local/share/ca-certificates"
    cp -a /usr/local/share/ca-certificates/. "$rootfs/usr/local/share/ca-certificates/" 2>/dev/null || true
    cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
    chroot "$rootfs" /bin/sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ca-certificates \
        && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin' >>"$STATE_DIR/debootstrap.log" 2>&1 \
        || { tail_log "$STATE_DIR/debootstrap.log"; die "installing ca-certificates in the base failed"; }
    : >"$rootfs/etc/resolv.conf"
    rm -rf "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/var/log/*.log \
        "$rootfs"/var/cache/debconf/*-old
    find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
    mkdir -p "$rootfs/usr/share/man/man1"   # Java's packages link their man pages there, or fail
    # shellcheck disable=SC2086
    tar -C "$rootfs" -c . | "$DOCKER" import --change "ENV $CA_ENV" \
        --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null \
        || die "docker import of the base failed"
    rm -rf "$rootfs"
    log "base image $BASE_IMAGE: $("$DOCKER" image inspect -f '{{.Size}}' "$BASE_IMAGE") bytes"
}

stop_engine() {
    local pid
    pid="$(cat "$DOCKERD_PID" 2>/dev/null)" || { log "no dockerd started by this script"; return 0; }
    pid_alive "$pid" || { log "dockerd not running"; rm -f "$DOCKERD_PID"; return 0; }
    log "stopping dockerd $pid (containers stop; images and volumes stay in $DOCKER_ROOT/engine)"
    kill -TERM "$pid"
    await_exit "$pid" 60 || kill -KILL "$pid"
    rm -f "$DOCKERD_PID"
}

mkdir -p "$DOCKER_ROOT/engine" "$DOCKER_ROOT/exec"
case "${1:-}" in
    start) with_lock; install_engine; start_engine; build_base ;;
    base) with_lock; engine_up || die "no engine: services/docker.sh start"; build_base ;;
    stop) with_lock; stop_engine ;;
    status) if engine_up; then log "engine up on $SOCKET"; else log "no engine on $SOCKET"; exit 3; fi ;;
    logs) tail -n "${2:-50}" "$DOCKERD_LOG" ;;
    *) echo "usage: $0 start|stop|status|base|logs [N]" >&2; exit 2 ;;
esac
