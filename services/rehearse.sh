#!/usr/bin/env bash
# Rehearse a machine that has never seen the project: a throwaway Debian root, made from the
# project's own base image (services/docker.sh builds toymb/debian:bookworm) plus what a new machine
# of this kind has before the project (Python 3.11, JDK 17, Maven, git, make), and none of the
# packages our services/ scripts install. A fresh clone of this repository runs COMMAND inside it,
# so every install step of ours runs for real, from the registries.
#   services/rehearse.sh [--ref REF] [--keep] [COMMAND...]     (default COMMAND: CI=true bash .ci/run)
#   services/rehearse.sh --ref HEAD~3 bash -c 'services/docker.sh start & services/nats.sh start & wait'
# The root runs in its own mount and PID namespaces (unshare): when COMMAND ends, every process it
# left is listed ("left running: ...", exit 3 if any) and then ended with the namespace. It shares
# the host's network (the registries, loopback): the services' ports must be free, so stop the
# host's own first (services/all.sh stop). Root only. The prepared root is cached as a tarball in
# TOYMB_REHEARSAL_DIR (default /var/lib/toymb-rehearsal); each rehearsal unpacks a new copy and
# removes it at the end (--keep leaves it, for a look).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
svc_init rehearsal

ref=HEAD keep=0
while [[ ${1:-} == --* ]]; do
    case "$1" in
        --ref) ref="$2"; shift 2 ;;
        --keep) keep=1; shift ;;
        *) echo "usage: $0 [--ref REF] [--keep] [COMMAND...]" >&2; exit 2 ;;
    esac
done
(($#)) || set -- bash -c 'CI=true bash .ci/run'
[[ $(id -u) -eq 0 ]] || die "a rehearsal needs root (chroot, namespaces)"

HOME_DIR="${TOYMB_REHEARSAL_DIR:-/var/lib/toymb-rehearsal}"
BASE_IMAGE="${TOYMB_DOCKER_BASE:-toymb/debian:bookworm}"
# What a new machine of this kind has before the project, from Debian's packages (the kind's own
# Python is 3.11 from pyenv and its JDK 17; Debian 12's are the same versions).
TOOLCHAIN=(python3 python3-venv python3-dev openjdk-17-jdk-headless maven git make gcc procps curl
           ca-certificates iproute2 psmisc)
TARBALL="$HOME_DIR/root-$(printf '%s\n' "${TOOLCHAIN[@]}" | sha1sum | cut -c1-10).tar"
mkdir -p "$HOME_DIR"

prepare_root() {
    [[ -s $TARBALL ]] && return 0
    bash "$SERVICES_ROOT/docker.sh" start >&2 || die "the base image needs the Docker engine (services/docker.sh start)"
    local root="$HOME_DIR/prepare" cid
    rm -rf "$root"; mkdir -p "$root"
    log "making the rehearsal root from $BASE_IMAGE with ${TOOLCHAIN[*]}"
    cid="$(/usr/bin/docker create "$BASE_IMAGE")"
    /usr/bin/docker export "$cid" | tar -C "$root" -x
    /usr/bin/docker rm "$cid" >/dev/null
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    # Java's packages need /proc while they configure.
    unshare --mount --pid --fork --mount-proc="$root/proc" chroot "$root" /bin/sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        ${TOOLCHAIN[*]} && apt-get clean" >"$STATE_DIR/prepare.log" 2>&1 \
        || { tail_log "$STATE_DIR/prepare.log"; die "installing the toolchain in the rehearsal root failed"; }
    # The image keeps no package lists (as a new machine's may be stale): our scripts fetch them.
    rm -rf "$root"/var/lib/apt/lists/*
    tar -C "$root" -cf "$TARBALL.part" . && mv "$TARBALL.part" "$TARBALL"
    rm -rf "$root"
}

prepare_root
run="$(mktemp -d "$HOME_DIR/run-XXXXXX")"
cleanup() { ((keep)) && log "kept $run" || rm -rf "$run"; }
trap cleanup EXIT
tar -C "$run" -xf "$TARBALL"
cp /etc/resolv.conf "$run/etc/resolv.conf"
git clone -q "$REPO_ROOT" "$run/work/toymb"
git -C "$run/work/toymb" checkout -q "$(git -C "$REPO_ROOT" rev-parse "$ref")"
# shared/ beside the clone, as CI has it.
[[ -d $REPO_ROOT/../shared ]] && cp -a "$REPO_ROOT/../shared" "$run/work/shared"
printf '%q ' "$@" >"$run/work/command"
log "rehearsing in $run (ref $ref): $*"
started=$SECONDS
# In the namespaces: mount what a machine has, run the command, then list what it left running.
unshare --mount --pid --fork --mount-proc /bin/bash -c '
    run="$1"
    # The root is a mount point of its own, as a machine'"'"'s is (dockerd remounts /).
    mount --bind "$run" "$run"; mount --make-rprivate "$run"; mount -t proc proc "$run/proc"
    mount --rbind /dev "$run/dev"; mount --rbind /sys "$run/sys"; mount -t tmpfs tmpfs "$run/tmp"
    mount -t tmpfs tmpfs "$run/run"; mkdir -p "$run/run/lock"; mount -t devpts devpts "$run/dev/pts" 2>/dev/null || true
    chroot "$run" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        LANG=C.UTF-8 /bin/bash -c "cd /work/toymb && $(cat "$run/work/command")"
    rc=$?
    # /proc inside the root is this PID namespace'"'"'s: pid 1 is this shell, the rest is the run'"'"'s.
    chroot "$run" ps -eo pid=,args= >"$run/tmp/ps.txt"   # chroot execs ps: no other process of ours
    left="$(awk "\$1 != 1 && \$2 != \"ps\"" "$run/tmp/ps.txt")"
    if [[ -n $left ]]; then printf "left running:\n%s\n" "$left"; ((rc)) || rc=3; fi
    exit $rc' rehearse "$run"
rc=$?
log "rehearsal ended with $rc after $((SECONDS - started)) s"
exit $rc
