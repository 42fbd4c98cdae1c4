"""Render the chart with the pinned helm and read the result.

Tests use the helms that scripts/bootstrap-tools.sh builds into .tools/bin (never
one found on PATH); a missing one is built on first use. The suite runs under
Helm 4 and Helm 3 (tests/chart/conftest.py parametrizes every rendering test on
the major; ``use_helm_major`` switches). AICR_CHART_DIR points the suite at
another copy of the chart (scripts/mutate-chart.py uses it).

Every render is memoised on its inputs and the major, so tests that share values
share a helm call. Values travel as a YAML file, never as --set strings, so types
are exact.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
#: helm major -> (binary, scripts/bootstrap-tools.sh target)
HELMS: dict[int, tuple[Path, str]] = {
    4: (ROOT / ".tools" / "bin" / "helm", "helm"),
    3: (ROOT / ".tools" / "bin" / "helm3", "helm3"),
}
CHART = Path(os.environ.get("AICR_CHART_DIR") or ROOT / "chart")
RELEASE = "t"
NAMESPACE = "aicr"
#: Base criteria added unless a test renders "raw" (anchor T-01).
BASE = {"accelerator": "h100"}

_FAIL = re.compile(r"execution error at \([^)]*\): (?P<msg>.*?)(?:\n\nUse --debug.*)?\s*$", re.S)
_SCHEMA = "values don't meet the specifications of the schema"


_major = 4


def helm_major() -> int:
    """The helm major the suite renders with right now."""
    return _major


def use_helm_major(major: int) -> int:
    """Render with helm ``major`` from now on; returns the previous one."""
    global _major  # one switch for the whole module, set per test by a fixture
    if major not in HELMS:
        raise ValueError(f"helm major {major}: only {sorted(HELMS)} are pinned")
    previous, _major = _major, major
    return previous


def helm_binary(major: int | None = None) -> Path:
    """The pinned helm of ``major`` (default: the current one); built with the
    project's bootstrap when missing."""
    path, target = HELMS[_major if major is None else major]
    if not path.is_file():
        subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap-tools.sh"), target], check=True, cwd=ROOT)
    assert path.is_file(), f"{path} is missing after scripts/bootstrap-tools.sh {target}"
    return path


def helm(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    with tempfile.TemporaryDirectory(prefix="helm-home-") as home:
        env.update(HELM_CACHE_HOME=f"{home}/cache", HELM_CONFIG_HOME=f"{home}/config", HELM_DATA_HOME=f"{home}/data")
        return subprocess.run(
            [str(helm_binary()), *args],
            check=False,
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


@dataclass(frozen=True)
class Rendered:
    ok: bool
    stdout: str
    stderr: str
    docs: list[dict[str, Any]] = field(default_factory=list)

    # -- failures -----------------------------------------------------------
    @property
    def error(self) -> str:
        """The `fail` message of a template guard ("" when the render did not fail in a guard)."""
        match = _FAIL.search(self.stderr)
        return match.group("msg").strip() if match else ""

    @property
    def schema_error(self) -> str:
        return self.stderr if _SCHEMA in self.stderr else ""

    # -- objects ------------------------------------------------------------
    def kinds(self) -> list[str]:
        return [doc["kind"] for doc in self.docs]

    def one(self, kind: str) -> dict[str, Any]:
        found = [doc for doc in self.docs if doc["kind"] == kind]
        assert len(found) == 1, f"expected one {kind}, got {len(found)}: {self.kinds()}"
        return found[0]

    def maybe(self, kind: str) -> dict[str, Any] | None:
        found = [doc for doc in self.docs if doc["kind"] == kind]
        assert len(found) <= 1
        return found[0] if found else None

    @property
    def job(self) -> dict[str, Any]:
        return self.one("Job")

    @property
    def pod(self) -> dict[str, Any]:
        return self.job["spec"]["template"]["spec"]  # type: ignore[no-any-return]

    @property
    def container(self) -> dict[str, Any]:
        containers = self.pod["containers"]
        assert len(containers) == 1
        return containers[0]  # type: ignore[no-any-return]

    @property
    def env_list(self) -> list[dict[str, Any]]:
        return list(self.container.get("env") or [])

    @property
    def env_from(self) -> dict[str, str]:
        """The data of the ConfigMaps the container takes with envFrom (rendered by the chart)."""
        out: dict[str, str] = {}
        for source in self.container.get("envFrom") or []:
            name = source["configMapRef"]["name"]
            [cm] = [d for d in self.docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
            out.update(cm.get("data") or {})
        return out

    @property
    def env(self) -> dict[str, str]:
        """What the container's environment holds, as the kubelet builds it: the
        envFrom ConfigMaps the chart renders, then the value entries (valueFrom
        entries are absent: see env_list)."""
        out = self.env_from
        for entry in self.env_list:
            if "value" in entry:
                assert isinstance(entry["value"], str), f"env {entry['name']} is not a string: {entry['value']!r}"
                out[entry["name"]] = entry["value"]
        return out

    @property
    def volumes(self) -> dict[str, dict[str, Any]]:
        return {vol["name"]: vol for vol in self.pod.get("volumes") or []}

    @property
    def mounts(self) -> dict[str, dict[str, Any]]:
        return {m["name"]: m for m in self.container.get("volumeMounts") or []}


@functools.cache
def _render_cached(values_json: str, args: tuple[str, ...], release: str, namespace: str, major: int) -> Rendered:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="values-", delete=False) as fh:
        yaml.safe_dump(json.loads(values_json), fh)
        values_file = fh.name
    try:
        proc = helm("template", release, str(CHART), "--namespace", namespace, "-f", values_file, *args)
    finally:
        Path(values_file).unlink()
    # libyaml's loader (PyYAML's wheels carry it): the pure-Python one took ~55 ms a
    # render, a third of what helm itself takes.
    docs = [doc for doc in yaml.load_all(proc.stdout, Loader=yaml.CSafeLoader) if doc] if proc.returncode == 0 else []
    return Rendered(ok=proc.returncode == 0, stdout=proc.stdout, stderr=proc.stderr, docs=docs)


def forget_renders() -> None:
    """Drop the memoised renders: the chart's files changed under the same path
    (scripts/mutate-chart.py edits its copy of the chart in place)."""
    _render_cached.cache_clear()


def render(
    values: Mapping[str, Any] | None = None,
    *,
    raw: bool = False,
    args: Sequence[str] = (),
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> Rendered:
    """helm template with BASE criteria (unless raw) merged under ``values``."""
    merged = merge({} if raw else BASE, values or {})
    cached = _render_cached(json.dumps(merged, sort_keys=True), tuple(args), release, namespace, _major)
    # A private copy: a test that edits a rendered object must not change another test's render.
    return dataclasses.replace(cached, docs=copy.deepcopy(cached.docs))


def renders(values: Mapping[str, Any] | None = None, **kw: Any) -> Rendered:
    result = render(values, **kw)
    assert result.ok, f"render failed:\n{result.stderr}"
    return result


def rejects_with(values: Mapping[str, Any] | None, message: str, **kw: Any) -> Rendered:
    """The render fails in a template guard whose message is exactly ``message``."""
    result = render(values, **kw)
    assert not result.ok, f"render succeeded, expected: {message}"
    assert result.error, f"render failed, but not in a guard:\n{result.stderr}"
    assert result.error == message, f"\nexpected: {message}\n     got: {result.error}"
    return result


def rejects_by_schema(values: Mapping[str, Any] | None, pointer: str, reason: str, **kw: Any) -> Rendered:
    """values.schema.json refuses ``values`` at ``pointer`` for ``reason``."""
    result = render(values, **kw)
    assert not result.ok, "render succeeded, expected a schema error"
    assert result.schema_error, f"render failed, but not on the schema:\n{result.stderr}"
    assert f"at '{pointer}'" in result.stderr, result.stderr
    assert reason in result.stderr, result.stderr
    return result


def load_script(name: str) -> Any:
    """Import scripts/<name>.py (a dash-named file) as a module."""
    import importlib.util
    import sys

    module_name = name.replace("-", "_")
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, ROOT / "scripts" / f"{name}.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def iter_env_names(result: Rendered) -> Iterator[str]:
    for entry in result.env_list:
        yield entry["name"]
