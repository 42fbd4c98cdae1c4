"""Helm releases an interrupted helm operation left ``pending-*``, before deploy.sh runs.

deploy.sh fails on a pending release of its bundle ("another operation is in
progress"). Before it runs, the deploy step asks helm for the pending releases
of this bundle's components and settles them:

- a release the install Lease proves a dead predecessor of this same chart
  release was operating on is recovered the way Flux's helm-controller does:
  rolled back to its last deployed revision, or uninstalled when it has none
  (a cut first install);
- any other pending release is left alone and the step fails with exit 28
  (``HelmReleasePendingError``), saying how to repair it by hand.

The check is advisory when it cannot look (no helm on PATH, helm list failed):
it says so in the log and deploy.sh runs, reporting whatever it finds itself.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from aicr_runner import logs
from aicr_runner.children.process import ProcessResult, ProcessRunner, child_env
from aicr_runner.errors import HelmReleasePendingError
from aicr_runner.run.report import utcnow

if TYPE_CHECKING:
    from aicr_runner.aicr.recipe import RecipeSummary
    from aicr_runner.kube.lease import InstallLease

__all__ = ["PendingRelease", "PendingReleases"]

log = logs.get_logger()


class PendingRelease(NamedTuple):
    namespace: str
    name: str
    status: str


class PendingReleases:
    """The pending releases of one bundle, found and settled through helm.

    ``relay`` is the pod-log relay for helm's own output during a recovery;
    every recovery is appended to ``recoveries`` (the run report's), then
    ``progress`` writes the report.
    """

    def __init__(
        self,
        processes: ProcessRunner,
        environ: Mapping[str, str],
        work: Path,
        *,
        relay: Callable[[str], None],
        recoveries: list[dict[str, str]],
        progress: Callable[[], None],
    ) -> None:
        self._processes = processes
        self._environ = environ
        self._work = work
        self._relay = relay
        self._recoveries = recoveries
        self._progress = progress

    def settle(self, summary: RecipeSummary | None, lease: InstallLease | None) -> list[str]:
        """Recover the pending releases a dead predecessor of this release left
        and return them (``namespace/name``); raise ``HelmReleasePendingError``
        (exit 28) on pending releases nothing proves are its own."""
        pending = self.find(summary)
        if not pending:
            return []
        proven = lease.announced_before if lease is not None else frozenset()
        foreign = [p for p in pending if f"{p.namespace}/{p.name}" not in proven and f"/{p.name}" not in proven]
        if foreign:
            raise HelmReleasePendingError(_left_alone(foreign, lease))
        recovered: list[str] = []
        for release in pending:
            self.recover(release)
            recovered.append(f"{release.namespace}/{release.name}")
        return recovered

    def find(self, summary: RecipeSummary | None) -> list[PendingRelease]:
        """Releases of this bundle's components left pending-* by an interrupted helm.

        Advisory when it cannot look (no helm on PATH, cluster unreachable): it says
        so in the log and deploy.sh runs, reporting whatever it finds itself.
        """
        helm = shutil.which("helm", path=self._environ.get("PATH"))
        if summary is None:
            return []
        if helm is None:
            log.warning("pending-release check skipped: helm is not on PATH")
            return []
        result, releases, lines = self._helm_json(
            [helm, "list", "--all-namespaces", "--pending", "--output", "json"],
            self._work / "logs" / "deploy-preflight.log",
        )
        if releases is None:
            log.warning(
                "pending-release check skipped: helm list failed",
                exit_code=result.exit_code,
                detail=logs.redact(lines[-1] if lines else ""),
            )
            return []
        # A release is ours when it has a component's name, in that component's
        # namespace (any namespace when the recipe names none).
        namespace_of = {c.name: c.namespace for c in summary.components}
        return [r for r in _pending(releases) if r.name in namespace_of and namespace_of[r.name] in ("", r.namespace)]

    def recover(self, release: PendingRelease) -> None:
        """Recover a pending release a dead predecessor of this release left, the way
        Flux's helm-controller does: roll back to the last deployed revision, or
        uninstall when there is none (a cut first install)."""
        namespace, name, status = release
        argv, action = self._repair(release)
        log.warning(
            "recovering a Helm release left pending by a stopped run of this release",
            release=f"{namespace}/{name}",
            status=status,
            action=argv[1],
        )
        result = self._processes.run(
            argv,
            env=child_env(self._environ),
            cwd=self._work,
            log_path=self._work / "logs" / f"deploy-recovery-{name}.log",
            on_block=self._relay,
        )
        if result.exit_code != 0:
            raise HelmReleasePendingError(
                f"recovering {namespace}/{name} ({status}) failed: `{' '.join(argv[1:])}` exited {result.exit_code}; "
                "repair it by hand and re-run"
            )
        self._recoveries.append(
            {
                "release": f"{namespace}/{name}",
                "status": status,
                "action": action,
                "at": utcnow().isoformat(timespec="seconds").replace("+00:00", "Z"),
            }
        )
        log.info("recovered Helm release", release=f"{namespace}/{name}", action=action)
        self._progress()

    def _repair(self, release: PendingRelease) -> tuple[list[str], str]:
        """The helm command that recovers ``release`` (from its history), and what it does."""
        namespace, name, status = release
        helm = shutil.which("helm", path=self._environ.get("PATH")) or "helm"
        log_path = self._work / "logs" / "deploy-recovery.log"
        history, revisions, _ = self._helm_json(
            [helm, "history", name, "--namespace", namespace, "--output", "json"], log_path
        )
        if revisions is None:
            raise HelmReleasePendingError(
                f"cannot recover {namespace}/{name} ({status}): `helm history` failed (exit {history.exit_code}); "
                "repair it by hand (`helm rollback` or `helm uninstall`) and re-run"
            )
        pending_revision, settled = _settled_revisions(revisions)
        if status == "pending-install" or not settled:
            return [helm, "uninstall", name, "--namespace", namespace], (
                "uninstalled (a cut first install; deploy.sh installs it again)"
            )
        target = max(settled)
        return [helm, "rollback", name, str(target), "--namespace", namespace], (
            f"rolled back from revision {pending_revision} to {target}"
        )

    def _helm_json(self, argv: list[str], log_path: Path) -> tuple[ProcessResult, list[Any] | None, list[str]]:
        """Run a helm query whose output is a JSON list; the list is None when helm
        failed or printed something else. The output lines come back for messages."""
        lines: list[str] = []
        timeout = shutil.which("timeout", path=self._environ.get("PATH"))
        if timeout is not None:
            # helm has no request timeout: against an API server that accepts and never
            # answers, a query would wait for ever. coreutils' timeout ends it (124).
            argv = [timeout, "--kill-after=5", str(HELM_QUERY_SECONDS), *argv]
        result = self._processes.run(
            argv,
            env=child_env(self._environ),
            cwd=self._work,
            log_path=log_path,
            on_line=lines.append,
            safe_stop=_READ_ONLY,
        )
        try:
            parsed = json.loads("".join(lines)) if result.exit_code == 0 else None
        except ValueError:
            parsed = None
        return result, parsed if isinstance(parsed, list) else None, lines


class _ReadOnly:
    """A helm query (list, history) changes nothing, so stopping it on SIGTERM is
    always safe: it is stopped at once, not after the grace period a helm
    operation gets (against a silent API server it would hold the pod's exit)."""

    def try_hold(self) -> bool:
        return True

    def request_stop(self) -> None:
        """Nothing to tell: the query is stopped as it is."""

    def release(self) -> None:
        """Nothing was held."""


_READ_ONLY = _ReadOnly()
#: How long a helm query (list, history) may take: it reads a few objects, so a
#: reachable API answers in seconds; past this the check is advisory and deploy.sh runs.
HELM_QUERY_SECONDS = 30


def _pending(releases: list[Any]) -> list[PendingRelease]:
    """The pending-* entries of ``helm list --output json``."""
    pending: list[PendingRelease] = []
    for release in releases:
        if not isinstance(release, dict):
            continue
        ns, name, status = (str(release.get(key, "")) for key in ("namespace", "name", "status"))
        if status.startswith("pending"):
            pending.append(PendingRelease(ns, name, status))
    return pending


def _settled_revisions(revisions: list[Any]) -> tuple[int, list[int]]:
    """From ``helm history --output json``: the pending (latest) revision, and the
    earlier ones that were deployed (a rollback target)."""
    pending_revision = max((int(r.get("revision", 0)) for r in revisions if isinstance(r, dict)), default=0)
    settled = [
        int(r.get("revision", 0))
        for r in revisions
        if isinstance(r, dict)
        and str(r.get("status")) in ("deployed", "superseded")
        and int(r.get("revision", 0)) < pending_revision
    ]
    return pending_revision, settled


def _left_alone(foreign: list[PendingRelease], lease: InstallLease | None) -> str:
    listing = ", ".join(f"{ns}/{name} ({status})" for ns, name, status in foreign)
    why = (
        f"the install Lease {lease.where} has no record of a run of this release operating on them"
        if lease is not None
        else "without an install Lease the runner cannot tell who left them"
    )
    return (
        f"Helm release(s) of this bundle are pending from an interrupted helm operation: {listing}; "
        f"{why}, so they are not touched, and deploy.sh would fail on them ('another operation is in "
        "progress'). Make sure no other helm is operating on them, inspect with "
        "`helm history <name> -n <namespace>`, then `helm rollback <name> <last deployed revision>` "
        "(pending-upgrade, pending-rollback) or `helm uninstall <name>` (pending-install), and re-run"
    )
