#!/usr/bin/env bash
# Install what the browser tests (tests/test_maps_browser.py, tests/server/test_page_browser.py)
# need, by itself, on a fresh machine: Debian's chromium (/usr/bin/chromium), driven by the
# Playwright Python package of the venv (a dev dependency). Nothing else: the map library is
# shipped with ev-nav (ev_nav/static/leaflet) and the tests block every request to the internet.
# Idempotent, and instant once chromium is there. Exits non-zero with a message if it cannot.
#
# Usage: scripts/setup_browser_test.sh
set -euo pipefail

chromium_bin="/usr/bin/chromium"

fail() { echo "setup_browser_test: $*" >&2; exit 1; }

if [ ! -x "$chromium_bin" ]; then
    sudo_cmd=()
    if [ "$(id -u)" != "0" ]; then
        command -v sudo >/dev/null || fail "need root (or sudo) to apt-get install chromium"
        sudo_cmd=(sudo -n)
    fi
    echo "setup_browser_test: installing Debian chromium"
    # A stale or missing package list makes the first attempt fail; refresh only then.
    if ! "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -q --no-install-recommends chromium; then
        "${sudo_cmd[@]}" apt-get update -q || fail "apt-get update failed"
        "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -q --no-install-recommends chromium \
            || fail "cannot install chromium"
    fi
fi
[ -x "$chromium_bin" ] || fail "$chromium_bin is still missing after apt-get install chromium"

echo "setup_browser_test: ok ($("$chromium_bin" --version 2>/dev/null || echo chromium))"
