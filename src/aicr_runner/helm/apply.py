"""How deploy.sh's helm applies a release's objects (deploy.helmApply): the flag the
helm guard (``helm.guard``) puts into each ``helm install`` and ``helm upgrade``.

Helm 4 applies a new release server-side by default and upgrades a release the way it
was last applied (``--server-side=auto``); the chart this project replaces ran Helm 3,
which knows only client-side apply. Server-side apply sends a ``null`` a chart's values
leave in an object (aicr v0.11.1's kube-prometheus-stack values set
``storageSpec.emptyDir: null``), and a CRD's schema refuses it; client-side apply drops
it. So ``client`` (the default) gives Helm 4 ``--server-side=false``, ``server`` gives
``--server-side=true``, ``auto`` gives nothing.

Only Helm 4 has the flag: deploy.sh's helm is asked its version once, when the guard is
installed. A Helm 3 gets no flag (client-side apply is all it does), and ``server`` with
a Helm 3 fails the deploy step with exit 2 (``ConfigError``) before deploy.sh starts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from aicr_runner.children.process import ProcessRunner, child_env
from aicr_runner.errors import ConfigError, InputProblem, InterruptedRun, ToolError
from aicr_runner.settings.config import ENV_PREFIX, HelmApply

__all__ = ["APPLY_FLAGS", "SETTING", "apply_flag", "helm_major"]

#: The variable (chart value ``deploy.helmApply``) the refusal names.
SETTING = f"{ENV_PREFIX}DEPLOY__HELM_APPLY"
#: Each choice's flag for Helm 4's ``install`` and ``upgrade`` ("": none).
APPLY_FLAGS = {
    HelmApply.CLIENT: "--server-side=false",
    HelmApply.SERVER: "--server-side=true",
    HelmApply.AUTO: "",
}
#: The first Helm major with ``--server-side``.
SERVER_SIDE_MAJOR = 4
#: ``helm version`` reads no cluster and no network: it answers at once, or is stopped.
VERSION_DEADLINE_SECONDS = 30.0
#: What ``helm version --template {{.Version}}`` prints: ``v4.3.1``, ``v3.22.0``.
_VERSION = re.compile(r"v?([0-9]+)\.[0-9]+\.[0-9]+\S*")


def helm_major(helm: str, processes: ProcessRunner, environ: Mapping[str, str], log_path: Path) -> int:
    """The major version of the helm at ``helm``; ``ToolError`` (exit 27) when it
    does not answer with one; ``InterruptedRun`` (143) when a shutdown stopped the question."""
    said: list[str] = []
    log_path.parent.mkdir(parents=True, exist_ok=True)
    result = processes.run(
        [helm, "version", "--template", "{{.Version}}"],
        env=child_env(environ),
        cwd=log_path.parent,
        log_path=log_path,
        on_line=said.append,
        deadline_seconds=VERSION_DEADLINE_SECONDS,
    )
    if result.stopped_by_shutdown:
        # A shutdown stops the question at once: the run is interrupted (143), not a
        # helm that cannot say its version (27), whatever it printed before it was stopped.
        raise InterruptedRun(
            f"interrupted: a shutdown was requested while deploy.sh's helm {helm} was asked its version "
            "(`helm version`, stopped); deploy.sh was not started"
        )
    if result.overdue:
        raise ToolError(
            f"deploy.sh's helm {helm} did not say its version within {VERSION_DEADLINE_SECONDS:g}s "
            f"(`helm version`, stopped); {SETTING} needs it to choose the apply flag"
        )
    # stdout and stderr are merged: a warning helm prints (a group-readable
    # kubeconfig) is a line of its own beside the version.
    lines = [line.strip() for line in said if line.strip()]
    found = next((m for line in reversed(lines) if (m := _VERSION.fullmatch(line))), None)
    if result.exit_code != 0 or found is None:
        shown = lines[-1][:200] if lines else "nothing"
        raise ToolError(
            f"deploy.sh's helm {helm} did not say its version (`helm version` exit {result.exit_code}: {shown}); "
            f"{SETTING} needs it to choose the apply flag"
        )
    return int(found.group(1))


def apply_flag(
    method: HelmApply, helm: str, processes: ProcessRunner, environ: Mapping[str, str], log_path: Path
) -> str:
    """The flag deploy.sh's helm at ``helm`` gets for ``method`` ("" for none): Helm 4's
    ``--server-side=...``; nothing for ``auto`` or a Helm 3, whose only method is
    client-side. ``server`` with a Helm 3: ``ConfigError`` (exit 2)."""
    flag = APPLY_FLAGS[method]
    if not flag:
        return ""
    major = helm_major(helm, processes, environ, log_path)
    if major >= SERVER_SIDE_MAJOR:
        return flag
    if method is HelmApply.SERVER:
        line = (
            f"{SETTING}={method.value} (chart: deploy.helmApply): deploy.sh's helm is Helm {major}, which applies "
            f"client-side only; server-side apply needs Helm {SERVER_SIDE_MAJOR} (allowed here: client, auto)"
        )
        raise ConfigError([InputProblem(line, SETTING)])
    return ""
