"""The pinned helm (v4), pointed at the test API server with the admin kubeconfig.

Helm's own state (config, cache, data, registry config) lives in a private
directory, so a user's repositories, plugins or registry logins never leak in.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from e2e.harness.tools import tool

__all__ = ["Helm", "HelmError"]


class HelmError(RuntimeError):
    def __init__(self, argv: Sequence[str], proc: subprocess.CompletedProcess[str]) -> None:
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        super().__init__(
            f"helm {' '.join(argv)} exited {proc.returncode}:\n{proc.stderr.strip() or proc.stdout.strip()}"
        )


class Helm:
    def __init__(self, kubeconfig: Path, home: Path) -> None:
        self.binary = tool("helm")
        self.kubeconfig = kubeconfig
        self.home = home
        for sub in ("config", "cache", "data"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        self._values_seq = 0

    def env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "KUBECONFIG": str(self.kubeconfig),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_DATA_HOME": str(self.home / "data"),
            "HELM_REGISTRY_CONFIG": str(self.home / "config" / "registry.json"),
        }

    def run(self, *args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        argv = [str(self.binary), *args]
        proc = subprocess.run(argv, env=self.env(), capture_output=True, text=True, check=False, timeout=timeout)
        if check and proc.returncode != 0:
            raise HelmError(args, proc)
        return proc

    def _values_args(
        self,
        values: Mapping[str, Any] | None,
        values_files: Sequence[Path],
        set_values: Mapping[str, str] | None,
    ) -> list[str]:
        args: list[str] = []
        for f in values_files:
            args += ["-f", str(f)]
        if values:
            self._values_seq += 1
            path = self.home / f"values-{self._values_seq}.yaml"
            path.write_text(yaml.safe_dump(dict(values)))
            args += ["-f", str(path)]
        for key, value in (set_values or {}).items():
            args += ["--set", f"{key}={value}"]
        return args

    def install(
        self,
        release: str,
        chart: Path | str,
        namespace: str,
        *,
        values: Mapping[str, Any] | None = None,
        values_files: Sequence[Path] = (),
        set_values: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """``helm install RELEASE CHART -n NAMESPACE --create-namespace`` (no --wait:
        the test follows the Job's pod itself, see ``Kubelet.run_job``)."""
        return self.run(
            "install",
            release,
            str(chart),
            "--namespace",
            namespace,
            "--create-namespace",
            *self._values_args(values, values_files, set_values),
            *extra_args,
            check=check,
        )

    def template(
        self, release: str, chart: Path | str, namespace: str, *, values: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        proc = self.run("template", release, str(chart), "--namespace", namespace, *self._values_args(values, (), None))
        return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]

    def uninstall(self, release: str, namespace: str) -> None:
        self.run("uninstall", release, "--namespace", namespace)

    def list_releases(self, namespace: str | None = None) -> list[dict[str, Any]]:
        scope = ["--namespace", namespace] if namespace else ["--all-namespaces"]
        # Every state (Helm 4 has no --all): a failed or pending release must show up too.
        states = ["--deployed", "--failed", "--pending", "--superseded", "--uninstalling", "--uninstalled"]
        proc = self.run("list", *scope, *states, "--output", "json")
        return list(json.loads(proc.stdout or "[]"))

    def manifest(self, release: str, namespace: str) -> list[dict[str, Any]]:
        proc = self.run("get", "manifest", release, "--namespace", namespace)
        return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]
