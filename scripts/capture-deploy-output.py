#!/usr/bin/env python3
"""Capture what a REAL aicr 0.11.1 bundle's deploy.sh prints, as test fixtures.

The real aicr v0.11.1 release (``$AICR_TEST_RELEASES_DIR/v0.11.1``, default
``../shared/testdata/aicr-releases`` next to the checkout, as scripts/test.sh
sets it) is extracted; ``aicr recipe`` and ``aicr bundle`` run for a few
criteria; then each bundle's own deploy.sh runs with stub ``helm`` and
``kubectl`` first on PATH (they succeed, or fail for the components a scenario
names) and no ``jq`` (so the pre-flight takes the same path everywhere). What
deploy.sh prints is written to ``tests/data/aicr-0.11.1-deploy/<scenario>.log``
and each scenario's argv, failing components and exit code to
``scenarios.json``; ``tests/unit/aicr/test_progress.py`` parses them.

Usage: scripts/capture-deploy-output.py [--output DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSION = "0.11.1"

#: name -> (criteria flags, deploy.sh arguments, components whose helm install fails,
#:          components whose manifests fail to apply)
SCENARIOS: dict[str, tuple[list[str], list[str], list[str], list[str]]] = {
    "eks-training-clean": (
        ["--service", "eks", "--accelerator", "h100", "--os", "ubuntu", "--intent", "training"],
        ["--no-wait", "--retries", "0"],
        [],
        [],
    ),
    "eks-training-best-effort-failures": (
        ["--service", "eks", "--accelerator", "h100", "--os", "ubuntu", "--intent", "training"],
        ["--best-effort", "--no-wait", "--retries", "1"],
        ["gpu-operator", "nvsentinel"],
        ["skyhook-customizations"],
    ),
    "eks-training-fail-fast": (
        ["--service", "eks", "--accelerator", "h100", "--os", "ubuntu", "--intent", "training"],
        ["--no-wait", "--retries", "0"],
        ["gpu-operator"],
        [],
    ),
    "gke-inference-best-effort-clean": (
        ["--service", "gke", "--accelerator", "h100", "--os", "cos", "--intent", "inference"],
        ["--best-effort", "--no-wait", "--retries", "0"],
        [],
        [],
    ),
}

#: helm: ``helm upgrade --install <release> ...`` fails for a release in STUB_HELM_FAIL.
HELM_STUB = """#!/bin/sh
release="$3"
for name in $STUB_HELM_FAIL; do
  if [ "$name" = "$release" ]; then
    echo "Error: INSTALLATION FAILED: stub helm: $release refused" >&2
    exit 1
  fi
done
echo "Release \\"$release\\" has been upgraded. Happy Helming!"
"""

#: kubectl: reads find nothing; ``apply -f <dir>/<component>/manifests/`` fails for
#: a component in STUB_KUBECTL_FAIL; everything else succeeds.
KUBECTL_STUB = """#!/bin/sh
case "$1" in
  get) exit 0 ;;
  create) echo "apiVersion: v1"; echo "kind: Namespace"; exit 0 ;;
  apply)
    # ``kubectl apply -f -`` reads the namespace deploy.sh pipes in (a stub that
    # did not would break the pipe, and deploy.sh's pipefail would see a failure).
    if [ "$3" = "-" ]; then cat >/dev/null; fi
    for name in $STUB_KUBECTL_FAIL; do
      case "$*" in
        */$name/manifests/*) echo "error: stub kubectl: $name manifests refused" >&2; exit 1 ;;
      esac
    done
    echo "configmap/stub configured"; exit 0 ;;
esac
exit 0
"""

#: What deploy.sh itself needs besides helm and kubectl (no jq: a fixed pre-flight path).
TOOLS = ("bash", "sh", "mktemp", "rm", "tr", "sort", "grep", "awk", "sleep", "dirname", "cat", "echo")


def releases_dir() -> Path:
    default = ROOT.parent / "shared" / "testdata" / "aicr-releases"
    path = Path(os.environ.get("AICR_TEST_RELEASES_DIR") or default)
    if not (path / f"v{VERSION}").is_dir():
        sys.exit(f"capture: no v{VERSION} release in {path} (set AICR_TEST_RELEASES_DIR to the aicr releases folder)")
    return path


def extract_aicr(work: Path) -> Path:
    archive = releases_dir() / f"v{VERSION}" / f"aicr_{VERSION}_linux_amd64.tar.gz"
    with tarfile.open(archive) as tar:
        member = tar.getmember("aicr")
        tar.extractall(work, members=[member], filter="data")
    binary = work / "aicr"
    binary.chmod(0o755)
    return binary


def stub_path(work: Path) -> str:
    stubs, tools = work / "stubs", work / "tools"
    stubs.mkdir()
    tools.mkdir()
    for name, text in (("helm", HELM_STUB), ("kubectl", KUBECTL_STUB)):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    for tool in TOOLS:
        found = shutil.which(tool)
        if found is None:
            sys.exit(f"capture: {tool} not found on PATH")
        (tools / tool).symlink_to(found)
    return f"{stubs}{os.pathsep}{tools}"


def capture(name: str, aicr: Path, work: Path, path: str) -> tuple[str, dict[str, object]]:
    criteria, flags, helm_fails, kubectl_fails = SCENARIOS[name]
    recipe, bundle = work / f"{name}.recipe.yaml", work / f"{name}-bundle"
    env = {"HOME": str(work), "PATH": os.environ.get("PATH", ""), "NO_COLOR": "1"}
    subprocess.run([str(aicr), "recipe", *criteria, "-o", str(recipe)], env=env, check=True, capture_output=True)
    subprocess.run(
        [str(aicr), "bundle", "-r", str(recipe), "-o", str(bundle)], env=env, check=True, capture_output=True
    )
    run_env = {
        "HOME": str(work),
        "TMPDIR": str(work),
        "PATH": path,
        "STUB_HELM_FAIL": " ".join(helm_fails),
        "STUB_KUBECTL_FAIL": " ".join(kubectl_fails),
    }
    argv = ["bash", str(bundle / "deploy.sh"), *flags]
    result = subprocess.run(argv, env=run_env, capture_output=True, text=True, check=False, timeout=600)
    facts = {
        "criteria": criteria,
        "args": flags,
        "helmFails": helm_fails,
        "manifestsFail": kubectl_fails,
        "exitCode": result.returncode,
    }
    return result.stdout, facts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--output", type=Path, default=ROOT / "tests" / "data" / f"aicr-{VERSION}-deploy")
    args = parser.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)
    scenarios: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="aicr-capture-") as scratch:
        work = Path(scratch)
        aicr = extract_aicr(work)
        path = stub_path(work)
        for name in SCENARIOS:
            output, facts = capture(name, aicr, work, path)
            if scratch in output:
                sys.exit(f"capture: {name}: the output names the scratch directory; refusing to commit it")
            (args.output / f"{name}.log").write_text(output)
            scenarios[name] = facts
            print(f"{name}: exit {facts['exitCode']}, {len(output.splitlines())} lines")
    (args.output / "scenarios.json").write_text(json.dumps(scenarios, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
