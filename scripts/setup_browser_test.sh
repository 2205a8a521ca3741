#!/usr/bin/env bash
# Install what tests/test_maps_browser.py needs: Debian's chromium and the npm packages whose
# JS/CSS the test serves in place of folium's CDN links. Idempotent; quick once done.
#
# Usage: scripts/setup_browser_test.sh [ASSET_DIR]   (default: tests/.browser)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
asset_dir="${1:-$here/tests/.browser}"
chromium_bin="/usr/bin/chromium"

# npm packages served for folium's CDN URLs (versions match folium's defaults where it pins them).
npm_packages=(leaflet@1.9.3 jquery@3.7.1 bootstrap@5.2.2)

apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
}

if [ ! -x "$chromium_bin" ]; then
    if [ "$(id -u)" != "0" ] && ! command -v sudo >/dev/null; then
        echo "setup_browser_test: $chromium_bin is missing and we are not root" >&2
        exit 1
    fi
    sudo_cmd=""
    [ "$(id -u)" != "0" ] && sudo_cmd="sudo"
    # A stale package list makes the first install fail; refresh it only then.
    if ! $sudo_cmd bash -c "$(declare -f apt_install); apt_install chromium"; then
        $sudo_cmd apt-get update
        $sudo_cmd bash -c "$(declare -f apt_install); apt_install chromium"
    fi
fi
[ -x "$chromium_bin" ] || { echo "setup_browser_test: chromium did not install" >&2; exit 1; }

if ! command -v npm >/dev/null; then
    if [ "$(id -u)" = "0" ]; then
        apt_install npm || { apt-get update && apt_install npm; }
    else
        echo "setup_browser_test: npm is missing" >&2
        exit 1
    fi
fi

mkdir -p "$asset_dir"
missing=0
for pkg in "${npm_packages[@]}"; do
    name="${pkg%@*}"
    [ -f "$asset_dir/node_modules/$name/package.json" ] || missing=1
done
if [ "$missing" = "1" ]; then
    [ -f "$asset_dir/package.json" ] || echo '{"name": "ev-nav-browser-test", "private": true}' \
        > "$asset_dir/package.json"
    (cd "$asset_dir" && npm install --no-audit --no-fund --loglevel=error "${npm_packages[@]}")
fi
echo "setup_browser_test: ok ($("$chromium_bin" --version 2>/dev/null || echo chromium))"
