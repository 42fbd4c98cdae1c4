#!/usr/bin/env bash
# The whole test suite, as CI runs it: setup, static checks, then pytest (unit,
# integration against a real registry, chart render suite with real helm, the
# chart mutation check, and the end-to-end scenarios against a real API server).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/setup.sh
export PATH="$root/.tools/bin:$PATH"
# The real aicr release the tests and the benchmark use (tests that need it fail, never skip, without it).
export AICR_TEST_RELEASES_DIR="${AICR_TEST_RELEASES_DIR:-$root/../shared/testdata/aicr-releases}"
# The real deployment validator of aicr v0.11.1 (e2e/test_real_validators.py builds its image from it).
export AICR_TEST_VALIDATORS_DIR="${AICR_TEST_VALIDATORS_DIR:-$root/../shared/testdata/aicr-validators}"

echo "== ruff"
.venv/bin/ruff check src tests e2e scripts
.venv/bin/ruff format --check src tests e2e scripts
echo "== mypy --strict (the runtime, and the tests, the e2e harness and the scripts that check it)"
.venv/bin/mypy --strict src tests e2e scripts
echo "== function length (scripts/check-function-length.py: no function in src/aicr_runner over 40 lines, steps/table.py at most 450)"
.venv/bin/python scripts/check-function-length.py
echo "== image (scripts/build-image.sh: the image tests and the e2e pods run it)"
bash scripts/build-image.sh
echo "== pytest"
.venv/bin/pytest --durations=30 --cov=aicr_runner --cov-branch --cov-report=term:skip-covered "$@"
