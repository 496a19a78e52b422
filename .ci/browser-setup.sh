#!/usr/bin/env bash
# Install what the daemon web page's browser test needs
# (tests/runtime/serve/test_web_browser.py): headless Chromium from the OS
# (Debian's `chromium` package) and `playwright-core` from npm to drive it
# (RECIPES.md, "Other facts").  No browser is downloaded by Playwright itself.
#
# - Chromium: `apt-get install -y --no-install-recommends chromium`, run as
#   root (CI has no sudo); skipped when /usr/bin/chromium already exists.
# - playwright-core (pinned) goes into $AGENTRT_CACHE/node-browser
#   (default $HOME/.cache/agentrt/node-browser); skipped when that version is
#   already there.
# - Idempotent; a second run prints "up to date" for both and takes < 1 s.
#
# On success the last line of stdout is the variable to export, e.g.
#   export NODE_PATH=/root/.cache/agentrt/node-browser/node_modules
# so a caller can `eval "$(.ci/browser-setup.sh | tail -n 1)"`.
set -euo pipefail

CACHE="${AGENTRT_CACHE:-$HOME/.cache/agentrt}"
NODE_DIR="$CACHE/node-browser"
PLAYWRIGHT_CORE_VERSION="1.65.1"
CHROMIUM="/usr/bin/chromium"

log() { printf '[browser-setup] %s\n' "$*" >&2; }
die() { printf '[browser-setup] ERROR: %s\n' "$*" >&2; exit 1; }

# --- Chromium (Debian package) ------------------------------------------------
if [ -x "$CHROMIUM" ]; then
  log "chromium up to date: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
else
  command -v apt-get >/dev/null || die "no $CHROMIUM and no apt-get to install it"
  [ "$(id -u)" = 0 ] || die "installing chromium needs root (no sudo is used); run as root"
  export DEBIAN_FRONTEND=noninteractive
  log "installing chromium with apt-get"
  # A fresh machine may have empty package lists: update once, then retry.
  if ! apt-get install -y --no-install-recommends chromium >&2; then
    log "apt-get install failed; running apt-get update and retrying"
    apt-get update >&2
    apt-get install -y --no-install-recommends chromium >&2
  fi
  [ -x "$CHROMIUM" ] || die "apt-get installed chromium but $CHROMIUM is missing"
  log "installed: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
fi

# --- playwright-core (npm) -------------------------------------------------------
command -v npm >/dev/null || die "npm not found (Node 18+ is required)"
installed=""
pkg_json="$NODE_DIR/node_modules/playwright-core/package.json"
if [ -f "$pkg_json" ]; then
  installed="$(node -p "require(process.argv[1]).version" "$pkg_json" 2>/dev/null || true)"
fi
if [ "$installed" = "$PLAYWRIGHT_CORE_VERSION" ]; then
  log "playwright-core up to date: $PLAYWRIGHT_CORE_VERSION in $NODE_DIR"
else
  log "installing playwright-core@$PLAYWRIGHT_CORE_VERSION into $NODE_DIR"
  mkdir -p "$NODE_DIR"
  [ -f "$NODE_DIR/package.json" ] \
    || printf '{"name":"agentrt-node-browser","private":true}\n' >"$NODE_DIR/package.json"
  # playwright-core never downloads a browser on install; we use the OS one.
  timeout 300 npm install --prefix "$NODE_DIR" --no-audit --no-fund --loglevel=error \
    "playwright-core@$PLAYWRIGHT_CORE_VERSION" >&2
  [ -f "$pkg_json" ] || die "npm install finished but $pkg_json is missing"
fi

echo "export NODE_PATH=$NODE_DIR/node_modules"
