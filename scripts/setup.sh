#!/usr/bin/env bash
# Sets up a development machine: the Python venv (.venv) with the runtime and test
# dependencies, and (unless --python-only) the pinned test tools in .tools/bin.
# Idempotent; safe to run again.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup: Python 3.11 or later is required (found $("$python" --version 2>&1))" >&2
  exit 2
fi
if [[ ! -x .venv/bin/python ]]; then
  "$python" -m venv .venv
fi
stamp=.venv/.installed-$(cat pyproject.toml requirements.lock | sha256sum | cut -c1-16)
if [[ ! -f $stamp ]]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # The runtime dependencies at the versions the image ships (requirements.lock,
  # without its hashes: pip takes hashes in a constraints file as --require-hashes
  # for every test tool too).
  constraints=$(mktemp)
  trap 'rm -f "$constraints"' EXIT
  sed -n 's/^\([A-Za-z0-9][A-Za-z0-9._-]*==[^ ;\\]*\).*/\1/p' requirements.lock >"$constraints"
  .venv/bin/python -m pip install -q -e '.[test]' --constraint "$constraints"
  rm -f .venv/.installed-* && touch "$stamp"
fi
if [[ ${1:-} != --python-only ]]; then
  bash scripts/bootstrap-tools.sh
fi
