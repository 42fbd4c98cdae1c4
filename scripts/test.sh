#!/usr/bin/env bash
# The whole test suite, as CI runs it: setup, static checks, then pytest (unit,
# integration against a real registry, chart render suite with real helm, the
# chart mutation check, and the end-to-end scenarios against a real API server).
#
# Two lanes, so a cold machine's two cores are never idle while a Go build links
# or an end-to-end test waits for a pod:
#   main lane  the tools every suite but the end-to-end one needs, the static
#              checks, the image, then `pytest tests`;
#   e2e lane   (in the background) the tools the end-to-end suite needs (API
#              servers, the node, Flux, kube-state-metrics), then `pytest e2e`,
#              then the whole recipe's test in a session of its own.
# The programs only that last test runs (--recipe: node-exporter, NFD) are built by
# the main lane once `pytest tests` ends, while `pytest e2e` runs, so a cold machine
# builds them off the e2e lane's path; that lane asks for them again before the
# recipe's test (found built, or waited for).
# The bootstrap's lock per tool means a tool both lanes ask for is built once; the
# e2e suite builds the image through scripts/build-image.sh's lock likewise. The
# e2e lane's output is printed when it ends; the script ends with one line adding
# both runs up (`pytest: N passed, N failed`) and one coverage report.
# Arguments are pytest's: with any, one pytest run takes them, after every tool.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/setup.sh --python-only
export PATH="$root/.tools/bin:$PATH"
# The real aicr release the tests and the benchmark use (tests that need it fail, never skip, without it).
export AICR_TEST_RELEASES_DIR="${AICR_TEST_RELEASES_DIR:-$root/../shared/testdata/aicr-releases}"
# The real deployment validator of aicr v0.11.1 (e2e/test_real_validators.py builds its image from it).
export AICR_TEST_VALIDATORS_DIR="${AICR_TEST_VALIDATORS_DIR:-$root/../shared/testdata/aicr-validators}"
# NVIDIA's GPU Operator v25.10.1 built from its tag (e2e/test_real_gpu_operator.py builds its image from it).
export AICR_TEST_GPU_OPERATOR_DIR="${AICR_TEST_GPU_OPERATOR_DIR:-$root/../shared/testdata/gpu-operator}"

pytest=(.venv/bin/pytest --durations=30 --cov=aicr_runner --cov-branch)
if (($#)); then
  bash scripts/bootstrap-tools.sh
  bash scripts/build-image.sh >/dev/null
  echo "== pytest $*"
  exec "${pytest[@]}" --cov-report=term:skip-covered "$@"
fi

started=$SECONDS
elapsed() { printf '%dm%02ds' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)); }
results=$(mktemp -d)
mkdir -p .tools
rm -f .coverage .coverage.*

e2e_lane() {
  local lane_started=$SECONDS
  if ! bash scripts/bootstrap-tools.sh --e2e --base; then
    echo "test: scripts/bootstrap-tools.sh --e2e --base failed" >&2
    return 3
  fi
  echo "== e2e lane: tools in place after $((SECONDS - lane_started))s; pytest e2e"
  local rc=0
  COVERAGE_FILE=.coverage.e2e "${pytest[@]}" --cov-report= --junitxml="$results/e2e.xml" \
    --ignore=e2e/test_air_gapped_recipe.py e2e || rc=$?
  # The whole real recipe's install leaves what one session cannot undo (its CRDs, what
  # its hooks made, namespaces that cannot go: the session runs no namespace controller),
  # and the other real-aicr tests install into the same namespaces: a session of its own.
  if ! bash scripts/bootstrap-tools.sh --recipe; then
    echo "test: scripts/bootstrap-tools.sh --recipe failed" >&2
    return 3
  fi
  echo "== e2e lane: pytest e2e/test_air_gapped_recipe.py (a session of its own)"
  COVERAGE_FILE=.coverage.e2e-recipe "${pytest[@]}" --cov-report= --junitxml="$results/e2e-recipe.xml" \
    e2e/test_air_gapped_recipe.py || rc=$?
  return "$rc"
}

echo "== e2e lane: its tools, then pytest e2e, in the background (printed when it ends)"
# Job control on for this one job: the lane is its own process group, so a failed
# main lane stops all of it (its builds and its test processes).
set -m
e2e_lane >"$results/e2e-lane.log" 2>&1 &
e2e_lane_pid=$!
set +m
trap 'kill -TERM -- -"$e2e_lane_pid" 2>/dev/null || true; rm -rf "$results"' EXIT

echo "== tools for the other suites ($(elapsed))"
bash scripts/bootstrap-tools.sh --base
echo "== ruff ($(elapsed))"
.venv/bin/ruff check src tests e2e scripts
.venv/bin/ruff format --check src tests e2e scripts
echo "== mypy --strict (the runtime, and the tests, the e2e harness and the scripts that check it) ($(elapsed))"
.venv/bin/mypy --strict src tests e2e scripts
echo "== function length (scripts/check-function-length.py: no function in src/aicr_runner over 40 lines, steps/table.py at most 450)"
.venv/bin/python scripts/check-function-length.py
echo "== image (scripts/build-image.sh: the image tests and the e2e pods run it) ($(elapsed))"
bash scripts/build-image.sh

status=0
echo "== pytest tests: every suite but the end-to-end one ($(elapsed))"
COVERAGE_FILE=.coverage.tests "${pytest[@]}" --cov-report= --junitxml="$results/tests.xml" tests || status=$?
echo "== pytest tests ended ($(elapsed)); the recipe test's programs (bootstrap --recipe)"
bash scripts/bootstrap-tools.sh --recipe || status=$?
echo "== waiting for the e2e lane ($(elapsed))"
e2e_status=0
wait "$e2e_lane_pid" || e2e_status=$?
echo "== e2e lane (ended $(elapsed), exit $e2e_status)"
cat "$results/e2e-lane.log"
((e2e_status == 0)) || status=$e2e_status

echo "== coverage of both runs"
.venv/bin/coverage combine --keep .coverage.tests .coverage.e2e .coverage.e2e-recipe >/dev/null
.venv/bin/coverage report --skip-covered
# One closing line for both runs (a run that wrote no report is an error, never zero tests).
.venv/bin/python scripts/junit-totals.py "$results/tests.xml" "$results/e2e.xml" "$results/e2e-recipe.xml"
echo "== done in $(elapsed)"
exit "$status"
