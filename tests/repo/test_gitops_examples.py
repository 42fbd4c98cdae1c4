"""The GitOps health examples of ``examples/``, run for real where a unit test can:
the Argo CD and Sveltos health checks are Lua run by a Lua 5.1 interpreter
(both tools run gopher-lua, Lua 5.1) on sample Reports, the status each returns
asserted; the Argo CD snippet has the shape argocd-cm needs. The Flux
Kustomization is checked against its CRD in e2e/test_gitops_health.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ARGO_KEY = "resource.customizations.health.openreports.io_Report"


def lua() -> str:
    """lua5.1, installed through the project's bootstrap (Debian package) when missing."""
    found = shutil.which("lua5.1")
    if found is None:
        subprocess.run(["bash", str(ROOT / "scripts/bootstrap-tools.sh"), "debian"], check=True, timeout=600)
        found = shutil.which("lua5.1")
    assert found, "lua5.1 missing after scripts/bootstrap-tools.sh debian"
    return found


def lua_value(value: Any) -> str:
    """A Python value as a Lua literal (what Argo CD's obj is: the object as tables)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"[{lua_value(k)}] = {lua_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def run_lua(script: str, obj: dict[str, Any], *, sveltos: bool, tmp_path: Path) -> tuple[str, str]:
    """Argo CD: the chunk sees ``obj`` and returns ``hs``. Sveltos: the chunk
    defines ``evaluate()``, which sees ``resources`` and returns
    ``hs.resources``, one ``{resource, status, message}`` per object."""
    chunk = tmp_path / "health.lua"
    chunk.write_text(script)
    load = f"local f = assert(loadfile({lua_value(str(chunk))}))\n"
    if sveltos:
        driver = f"resources = {{{lua_value(obj)}}}\n{load}f()\nlocal out = evaluate()\n"
        driver += "assert(#out.resources == 1 and out.resources[1].resource == resources[1])\n"
        driver += "local hs = out.resources[1]\n"
    else:
        driver = f"obj = {lua_value(obj)}\n{load}local hs = f()\n"
    driver += 'io.write(hs.status, "\\t", hs.message)\n'
    done = subprocess.run([lua(), "-"], input=driver, capture_output=True, text=True, timeout=30, check=True)
    status, message = done.stdout.split("\t", 1)
    return status, message


def report(summary: dict[str, int] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "openreports.io/v1alpha1", "kind": "Report", "metadata": {"name": "aicr-gpu"}}
    if summary is not None:
        body["summary"] = summary
    return body


SAMPLES = [
    ({"pass": 16, "fail": 0, "warn": 0, "error": 0, "skip": 1}, "Healthy", "verdict passed: 16 passed"),
    ({"pass": 15, "fail": 1, "warn": 0, "error": 0, "skip": 0}, "Degraded", "verdict failed: 15 passed, 1 failed"),
    ({"pass": 3, "error": 2}, "Degraded", "verdict failed: 3 passed, 0 failed, 2 errored"),
    ({"pass": 0, "fail": 0, "skip": 4}, "Degraded", "verdict inconclusive (no check passed)"),
    (None, "Progressing", "no verdict yet"),
]


def argocd_script() -> str:
    doc = yaml.safe_load((EXAMPLES / "argocd-health-report.yaml").read_text())
    return str(doc["data"][ARGO_KEY])


def sveltos_script() -> str:
    doc = yaml.safe_load((EXAMPLES / "sveltos-healthcheck.yaml").read_text())
    return str(doc["spec"]["evaluateHealth"])


@pytest.mark.parametrize(("summary", "status", "message"), SAMPLES)
def test_argocd_health_check(summary: dict[str, int] | None, status: str, message: str, tmp_path: Path) -> None:
    got = run_lua(argocd_script(), report(summary), sveltos=False, tmp_path=tmp_path)
    assert got[0] == status
    assert got[1].startswith(message)


@pytest.mark.parametrize(("summary", "status", "message"), SAMPLES)
def test_sveltos_health_check(summary: dict[str, int] | None, status: str, message: str, tmp_path: Path) -> None:
    got = run_lua(sveltos_script(), report(summary), sveltos=True, tmp_path=tmp_path)
    assert got[0] == status
    assert got[1].startswith(message)


def test_the_argocd_snippet_is_an_argocd_cm_configmap() -> None:
    doc = yaml.safe_load((EXAMPLES / "argocd-health-report.yaml").read_text())
    assert (doc["apiVersion"], doc["kind"], doc["metadata"]["name"]) == ("v1", "ConfigMap", "argocd-cm")
    assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "argocd"
    assert list(doc["data"]) == [ARGO_KEY]
    assert all(isinstance(value, str) for value in doc["data"].values())


def test_the_sveltos_healthcheck_selects_the_runners_reports() -> None:
    doc = yaml.safe_load((EXAMPLES / "sveltos-healthcheck.yaml").read_text())
    assert (doc["apiVersion"], doc["kind"]) == ("lib.projectsveltos.io/v1beta1", "HealthCheck")
    [selector] = doc["spec"]["resourceSelectors"]
    assert (selector["group"], selector["version"], selector["kind"]) == ("openreports.io", "v1alpha1", "Report")


def flux_exprs() -> dict[str, str]:
    doc = yaml.safe_load((EXAMPLES / "flux-kustomization-health.yaml").read_text())
    [check] = doc["spec"]["healthCheckExprs"]
    assert (check["apiVersion"], check["kind"]) == ("openreports.io/v1alpha1", "Report")
    return {key: str(check[key]) for key in ("failed", "current")}


FLUX_STATUS = {"Healthy": "current", "Degraded": "failed"}


@pytest.mark.parametrize(("summary", "status", "message"), [s for s in SAMPLES if s[0] is not None])
def test_flux_health_check_exprs(summary: dict[str, int], status: str, message: str) -> None:
    """Flux evaluates inProgress (none here), failed, then current on the object
    itself; exactly one of ours holds for a Report with a summary."""
    import cel  # common-expression-language: CEL's standard macros and has()

    report_vars = report(summary)
    held = [name for name, expr in flux_exprs().items() if cel.evaluate(expr, report_vars) is True]
    assert held == [FLUX_STATUS[status]], message
