#!/usr/bin/env bash
# The whole test suite, as CI runs it: setup, static checks, then pytest (unit,
# integration against a real registry, chart render suite with real helm, the
# chart mutation check, and the end-to-end scenarios against a real API server).
#
# Two lanes, so a cold machine's two cores are never idle: the tools only the
# end-to-end suite needs (API servers, the node, Flux, kube-state-metrics) build in
# the background while the static checks, the image and every other suite run;
# the end-to-end suite starts when they are in place. Arguments are pytest's: with
# any, one pytest run takes them, after every tool is in place.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/setup.sh --python-only
export PATH="$root/.tools/bin:$PATH"
# The real aicr release the tests and the benchmark use (tests that need it fail, never skip, without it).
export AICR_TEST_RELEASES_DIR="${AICR_TEST_RELEASES_DIR:-$root/../shared/testdata/aicr-releases}"
# The real deployment validator of aicr v0.11.1 (e2e/test_real_validators.py builds its image from it).
export AICR_TEST_VALIDATORS_DIR="${AICR_TEST_VALIDATORS_DIR:-$root/../shared/testdata/aicr-validators}"

mkdir -p .tools
e2e_tools_log=.tools/bootstrap-e2e.log
echo "== tools for the end-to-end suite: building in the background ($e2e_tools_log)"
bash scripts/bootstrap-tools.sh --e2e >"$e2e_tools_log" 2>&1 &
e2e_tools=$!
e2e_tools_ready() {
  local rc=0
  wait "$e2e_tools" || rc=$?
  cat "$e2e_tools_log"
  if ((rc != 0)); then
    echo "test: scripts/bootstrap-tools.sh --e2e failed (exit $rc)" >&2
    exit "$rc"
  fi
}
trap 'kill "$e2e_tools" 2>/dev/null || true' EXIT

echo "== tools for the other suites"
bash scripts/bootstrap-tools.sh --base
echo "== ruff"
.venv/bin/ruff check src tests e2e scripts
.venv/bin/ruff format --check src tests e2e scripts
echo "== mypy --strict (the runtime, and the tests, the e2e harness and the scripts that check it)"
.venv/bin/mypy --strict src tests e2e scripts
echo "== function length (scripts/check-function-length.py: no function in src/aicr_runner over 40 lines, steps/table.py at most 450)"
.venv/bin/python scripts/check-function-length.py
echo "== image (scripts/build-image.sh: the image tests and the e2e pods run it)"
bash scripts/build-image.sh

pytest=(.venv/bin/pytest --durations=30 --cov=aicr_runner --cov-branch)
if (($#)); then
  echo "== end-to-end tools"
  e2e_tools_ready
  echo "== pytest $*"
  exec "${pytest[@]}" --cov-report=term:skip-covered "$@"
fi

results=$(mktemp -d)
status=0
echo "== pytest tests (every suite but the end-to-end one)"
"${pytest[@]}" --cov-report= --junitxml="$results/tests.xml" tests || status=$?
echo "== end-to-end tools"
e2e_tools_ready
echo "== pytest e2e"
"${pytest[@]}" --cov-append --cov-report=term:skip-covered --junitxml="$results/e2e.xml" e2e || status=$?
# One closing line for both runs.
.venv/bin/python scripts/junit-totals.py "$results/tests.xml" "$results/e2e.xml"
rm -rf "$results"
exit "$status"
