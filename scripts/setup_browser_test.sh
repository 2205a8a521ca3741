#!/usr/bin/env bash
# Install what tests/test_maps_browser.py needs, by itself, on a fresh machine:
#   * Debian's chromium (/usr/bin/chromium), driven by Playwright's Python package from the venv;
#   * the npm packages whose JS/CSS the test serves in place of folium's CDN links.
# Idempotent, and quick once everything is there. Exits non-zero with a message if it cannot.
#
# Usage: scripts/setup_browser_test.sh [ASSET_DIR]     (default: tests/.browser)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
asset_dir="${1:-$here/tests/.browser}"
chromium_bin="/usr/bin/chromium"

# Versions folium 0.20 links to (the served files must be what the page asked for).
npm_packages=(leaflet@1.9.3 jquery@3.7.1 bootstrap@5.2.2)

fail() { echo "setup_browser_test: $*" >&2; exit 1; }

sudo_cmd=()
if [ "$(id -u)" != "0" ]; then
    command -v sudo >/dev/null || fail "need root (or sudo) to apt-get install $*"
    sudo_cmd=(sudo -n)
fi

apt_install() {
    # A stale or missing package list makes the first attempt fail; refresh only then.
    if ! "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -q --no-install-recommends "$@"; then
        "${sudo_cmd[@]}" apt-get update -q || fail "apt-get update failed"
        "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -q --no-install-recommends "$@" || fail "cannot install $*"
    fi
}

if [ ! -x "$chromium_bin" ]; then
    echo "setup_browser_test: installing Debian chromium"
    apt_install chromium
fi
[ -x "$chromium_bin" ] || fail "$chromium_bin is still missing after apt-get install chromium"

if ! command -v npm >/dev/null; then
    echo "setup_browser_test: installing npm"
    apt_install npm
fi

installed_version() {  # version of an npm package in asset_dir, or nothing
    local pj="$asset_dir/node_modules/$1/package.json"
    [ -f "$pj" ] && sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$pj" | head -n 1
    return 0
}

missing=()
for pkg in "${npm_packages[@]}"; do
    name="${pkg%@*}"
    want="${pkg##*@}"
    [ "$(installed_version "$name")" = "$want" ] || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup_browser_test: npm install ${missing[*]}"
    mkdir -p "$asset_dir"
    [ -f "$asset_dir/package.json" ] \
        || echo '{"name": "ev-nav-browser-test", "private": true}' > "$asset_dir/package.json"
    (cd "$asset_dir" && npm install --no-audit --no-fund --loglevel=error "${missing[@]}") \
        || fail "npm install ${missing[*]} failed"
fi
for pkg in "${npm_packages[@]}"; do
    name="${pkg%@*}"
    [ "$(installed_version "$name")" = "${pkg##*@}" ] || fail "npm package $pkg did not install"
done

echo "setup_browser_test: ok ($("$chromium_bin" --version 2>/dev/null || echo chromium))"
