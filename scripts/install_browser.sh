#!/usr/bin/env bash
# Install Debian's headless-capable `chromium` for the report's browser test, idempotently.
#
# The test (tests/report/test_report_html.py) drives this browser with playwright through
# `executable_path`; `playwright install` is never used (it downloads its own build from a CDN).
# Routes: already on PATH -> nothing to do; root + apt-get -> apt-get install chromium;
# otherwise print why it was skipped and exit 0 (the browser test then skips with the same reason).
set -euo pipefail
log() { echo "install_browser: $*" >&2; }

for exe in chromium chromium-browser; do
  if command -v "$exe" >/dev/null 2>&1; then log "$exe already installed ($(command -v "$exe"))"; exit 0; fi
done
if ! command -v apt-get >/dev/null 2>&1; then
  log "skipped: no apt-get on this machine; install a chromium by hand for the browser test"; exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
  log "skipped: apt-get needs root (run: sudo apt-get install chromium); the browser test will skip"; exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q --no-install-recommends chromium >/dev/null; then
  log "apt-get install failed with the current package lists; running apt-get update"
  if ! { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends chromium >/dev/null; }; then
    log "skipped: apt-get could not install chromium; the browser test will skip"; exit 0
  fi
fi
log "installed $(command -v chromium) ($(chromium --version 2>/dev/null | head -1 || echo 'version unknown'))"
