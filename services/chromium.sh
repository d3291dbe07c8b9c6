#!/usr/bin/env bash
# Debian's chromium and chromium-driver, for the console's browser tests (tests/console).
#   services/chromium.sh start|install|status|stop
# Not a server: `start` (= `install`) installs the packages if missing, idempotently; `stop` does
# nothing; `status` exits 0 when both binaries are there, 3 when not. No browser build is downloaded.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
svc_init chromium

chromium_ready() { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; }

case "${1:-}" in
    start|install)
        # A font, or the screenshots show boxes (chromium only recommends one).
        apt_ensure chromium chromium-driver fonts-liberation
        chromium_ready || die "chromium or chromedriver not found after install"
        log "ready: $(chromium --version 2>/dev/null | head -n1), $(chromedriver --version 2>/dev/null | head -n1)" ;;
    status)
        if chromium_ready; then echo "chromium: installed ($(command -v chromium), $(command -v chromedriver))"
        else echo "chromium: not installed"; exit 3; fi ;;
    stop|kill|restart) : ;;
    *) echo "usage: $(basename "$0") start|install|status|stop" >&2; exit 2 ;;
esac
