#!/usr/bin/env bash
# Install Debian packages the way every services/ script does (lib.sh's apt_ensure: one machine-wide
# lock, waits for another program's apt): for the Makefile and anyone else.
#   services/apt.sh PKG...
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
svc_init apt
(($#)) || { echo "usage: $0 PKG..." >&2; exit 2; }
apt_ensure "$@"
