"""A contract-faithful fake of NVIDIA's aicr CLI at v1.2.0, for tests.

No aicr v1.2.0 binary is available here (its Go module is not served), so this
fake behaves as the aicr CLI contract describes: flags, exit codes, log lines,
bundle layout, deploy.sh markers, verify, validate, evidence publish. Its 0.11
mode is checked against the real v0.11.1 (tests/contract/test_fake_contract.py).

``install_fake_aicr(directory)`` writes an executable ``aicr`` launcher bound
to the current interpreter and returns its path.

Environment knobs (all optional; the runner passes its environment through,
minus its own AICR_RUNNER_* settings, so they reach aicr and deploy.sh):

FAKE_AICR_VERSION=0.11.1          behave as aicr 0.11.1 (checked against the real one): --version says so,
                                  no bundle --storage-class, no validate
                                  --emit-attestation, no `evidence` command
                                  ("No help topic", exit 3), verify not closed-world,
                                  deploy.sh's 0.11 markers (no per-component result
                                  lines), 0.11 text logs
FAKE_AICR_LOG_STYLE=0.11          v0.11 text logs: ANSI colour on every line and
                                  a completion line without componentNames
FAKE_AICR_SKIP_OUTPUT=<command>   recipe | validate: exit 0 without writing the
                                  --output file (a broken aicr)
FAKE_AICR_ENV_LOG=<file>          append {argv, env} per invocation; env holds
                                  DOCKER_CONFIG, COSIGN_IDENTITY_TOKEN, AICR_RUNNER_*
FAKE_AICR_DEPLOY_REAL=1           install.sh runs real `helm upgrade --install`
FAKE_AICR_CHART_REPO=<repo>       recipe: every embedded component's chart source
                                  becomes this repository (e.g. oci://host/charts)
FAKE_AICR_HELM_FLAGS="..."        extra helm flags, e.g. --plain-http for a
                                  local OCI registry (real mode)
FAKE_AICR_DEPLOY_FAIL="a b"       these components fail to install (space or
                                  comma separated; both modes)
FAKE_AICR_DEPLOY_DRA_DEFERRED=1   deploy.sh withholds the DRA plugin restart:
                                  DRA warning line, exit 2
FAKE_AICR_DEPLOY_PREFLIGHT_FAIL=1 pre-flight fails, exit 1
FAKE_AICR_DEPLOY_SLEEP=<s>        sleep before installing (signal tests)
FAKE_AICR_DEPLOY_OUTPUT_BYTES=<n> print n bytes of output (memory tests)
FAKE_AICR_DEPLOY_HOLD_AT=<name>   deploy.sh holds that component's install (its
                                  start line printed) until released: a line
                                  written to FAKE_AICR_DEPLOY_HOLD_FIFO=<path>, or
                                  (in a pod) the ConfigMap
                                  FAKE_AICR_DEPLOY_HOLD_CONFIGMAP=<ns>/<name>
                                  created (kubectl wait --for=create)
FAKE_AICR_DEPLOY_BACKOFF=<s>      retry backoff; default 0 when simulating,
                                  5s*attempt^2 (cap 120s) in real mode
FAKE_AICR_VALIDATE_RESULT=...     pass | fail | other | skip | readiness-fail | timeout
                                  (exit 0 / 8 / 8 / 0 / 2 / 5; no CTRF for the last
                                  two). other: the first check crashed (0.11 mode:
                                  exit 0); skip: every check skipped (validator exit 2)
FAKE_AICR_VALIDATE_SLEEP=<s>      validate sleeps before the checks (SIGTERM -> 9)
FAKE_AICR_VALIDATE_REPORT=<path>  a misbehaving aicr: these bytes are its CTRF report
FAKE_AICR_VALIDATE_EXIT=<n>       a misbehaving aicr: validate exits n after its report
FAKE_AICR_EVIDENCE_BYTES=<n>      pad the evidence summary bundle by n random bytes
FAKE_AICR_ORAS=<path>             evidence publish pushes for real with this oras
                                  (credentials: $DOCKER_CONFIG/config.json, passed
                                  as --registry-config; signed mode also attaches
                                  a stand-in Sigstore bundle with `oras attach`)
FAKE_AICR_SNAPSHOT_RESULT=...     ok | job-failed | unauthorized (exit 0 / 8 / 4)
FAKE_AICR_SNAPSHOT_FACTS=<json>   snapshot readings over the defaults, {"Type.subtype.key": value}
                                  (null: not read); snapshot.py
FAKE_AICR_CONFIGMAP_DIR=<dir>     where `-o cm://ns/name` is written (<dir>/ns/name/snapshot.yaml)
FAKE_AICR_UPGRADE_TRANSITIONS=<json> upgrade-check's transition records: {"<component>" or
                                  "<component>:<from>:<to>": {"verdict": safe|manual|blocked|unknown|
                                  unversioned, "steps": [...], "earliestFrom": "...", "reference": "..."}}
                                  (upgrade.py; a moved component without one is unknown)
FAKE_AICR_UPGRADE_CLUSTER=<file>  upgrade-check --from cluster: the recipe standing for what is installed
FAKE_AICR_PUBLISH_FAIL=...        unauthorized | unavailable: simulated push failure
FAKE_AICR_MIRROR_IMAGES=a,b       the images `mirror list` names (1.x only; its charts
                                  are the recipe's componentRefs)
"""

from __future__ import annotations

import sys
from pathlib import Path

FAKE_VERSION = "1.2.0"
PACKAGE_DIR = Path(__file__).resolve().parent
SCRIPT = PACKAGE_DIR / "aicr"


def install_fake_aicr(directory: Path, *, python: str | None = None, package_dir: str | None = None) -> Path:
    """Write an executable ``aicr`` into ``directory`` and return its path.

    By default the launcher runs this checkout's fake with the test interpreter.
    For a container, ``python`` is the interpreter inside it (the image's
    ``/opt/venv/bin/python`` has PyYAML) and ``package_dir`` where this package is
    mounted there."""
    directory.mkdir(parents=True, exist_ok=True)
    launcher = directory / "aicr"
    script = f"{package_dir}/aicr" if package_dir else str(SCRIPT)
    launcher.write_text(
        f"#!{python or sys.executable}\nimport runpy\nrunpy.run_path({script!r}, run_name='__main__')\n",
        encoding="utf-8",
    )
    launcher.chmod(0o755)
    return launcher
