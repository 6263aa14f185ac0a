#!/usr/bin/env bash
# Installs the moto EC2 emulator (PyPI `moto[server]`) into a venv outside the repository, idempotently.
# Prints the path of the moto_server executable on stdout. Cache: $CNIKIT_MOTO_DIR or ~/.cache/cnikit/moto.
# Test-time tool only: never vendored, never committed.
set -euo pipefail
MOTO_VERSION="${CNIKIT_MOTO_VERSION:-5.1.*}"
DIR="${CNIKIT_MOTO_DIR:-$HOME/.cache/cnikit/moto}"
BIN="$DIR/venv/bin/moto_server"
STAMP="$DIR/.installed-$(echo "$MOTO_VERSION" | tr -c 'a-zA-Z0-9.\n' '_')"
if [[ -x "$BIN" && -f "$STAMP" ]]; then echo "$BIN"; exit 0; fi
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9
if [[ ! -x "$BIN" || ! -f "$STAMP" ]]; then
  PY="${PYTHON:-python3}"
  "$PY" -m venv "$DIR/venv" >&2
  "$DIR/venv/bin/pip" install --disable-pip-version-check -q --cache-dir "$DIR/pip-cache" "moto[server]==$MOTO_VERSION" >&2
  touch "$STAMP"
fi
echo "$BIN"
