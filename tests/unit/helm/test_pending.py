"""Pending Helm releases, found and settled through a real tiny `helm` (a shell script).

The script answers `helm list` and `helm history` from files, records every call,
and exits as the test says per subcommand, so the real process runner, PATH lookup
and JSON parsing all run. The deploy step's use of it is in tests/unit/steps/test_steps.py.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from aicr_runner.aicr.recipe import Component, RecipeSummary
from aicr_runner.children.process import SubprocessRunner
from aicr_runner.errors import ExitCode, HelmReleasePendingError
from aicr_runner.helm.pending import PendingRelease, PendingReleases
from aicr_runner.kube.api import LeaseRecord
from aicr_runner.kube.lease import RELEASES_ANNOTATION, InstallLease
from aicr_runner.settings.config import LeaseSettings
from tests.support.fakes import FakeKubeApi

HELM = """#!/bin/sh
echo "$*" >> "{dir}/calls"
code=$(cat "{dir}/exit-$1" 2>/dev/null || echo 0)
cat "{dir}/answer-$1" 2>/dev/null
case "$1" in rollback|uninstall) echo "helm $1 said something" >&2 ;; esac
exit "$code"
"""

SUMMARY = RecipeSummary(
    components=(Component("gpu-operator", namespace="gpu-operator"), Component("nfd", namespace=""))
)


class Helm:
    """The fake helm's answers and calls, in a directory of its own."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path / "helm"
        self.dir.mkdir(parents=True)
        (self.dir / "helm").write_text(HELM.format(dir=self.dir))
        (self.dir / "helm").chmod(0o755)

    def answer(self, subcommand: str, output: object, exit_code: int = 0) -> None:
        text = output if isinstance(output, str) else json.dumps(output)
        (self.dir / f"answer-{subcommand}").write_text(text)
        (self.dir / f"exit-{subcommand}").write_text(str(exit_code))

    @property
    def calls(self) -> list[str]:
        calls = self.dir / "calls"
        return calls.read_text().splitlines() if calls.is_file() else []


class World:
    """PendingReleases over the fake helm, with what it relays, records and reports."""

    def __init__(self, tmp_path: Path, *, helm_on_path: bool = True) -> None:
        self.helm = Helm(tmp_path)
        self.work = tmp_path / "work"
        (self.work / "logs").mkdir(parents=True)
        self.relayed: list[str] = []
        self.recoveries: list[dict[str, str]] = []
        self.progress: list[int] = []
        self.releases = PendingReleases(
            SubprocessRunner(),
            # The script needs cat; a PATH without the fake helm has no helm at all.
            {"PATH": f"{self.helm.dir}:{os.defpath}" if helm_on_path else str(tmp_path / "empty")},
            self.work,
            relay=self.relayed.append,
            recoveries=self.recoveries,
            progress=lambda: self.progress.append(len(self.recoveries)),
        )


def lease_announcing(announced: list[str]) -> InstallLease:
    api = FakeKubeApi()
    api.leases[("aicr", "t-install")] = LeaseRecord(
        "t-install", annotations={RELEASES_ANNOTATION: json.dumps(announced)}, resource_version="1"
    )
    lease = InstallLease(api, "aicr", LeaseSettings(name="t-install", pod_name="p", job_name="j"))
    lease.acquire()
    return lease


def pending(name: str, namespace: str, status: str) -> dict[str, str]:
    return {"name": name, "namespace": namespace, "status": status, "chart": f"{name}-1.0.0"}


def test_find_keeps_only_pending_releases_of_the_bundles_components(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.helm.answer(
        "list",
        [
            pending("gpu-operator", "gpu-operator", "pending-upgrade"),
            pending("gpu-operator", "team-b", "pending-upgrade"),  # same name, another team's namespace
            pending("nfd", "anywhere", "pending-rollback"),  # the recipe names no namespace for nfd
            pending("someone-else", "apps", "pending-install"),
            pending("nfd", "other", "deployed"),
            "not a release",
        ],
    )
    assert world.releases.find(SUMMARY) == [
        PendingRelease("gpu-operator", "gpu-operator", "pending-upgrade"),
        PendingRelease("anywhere", "nfd", "pending-rollback"),
    ]
    assert world.helm.calls == ["list --all-namespaces --pending --output json"]


@pytest.mark.parametrize(
    ("output", "exit_code"),
    [("Error: Kubernetes cluster unreachable", 1), ("not json", 0), ('{"a": "mapping"}', 0)],
)
def test_find_is_advisory_when_helm_list_gives_no_list(tmp_path: Path, output: str, exit_code: int) -> None:
    world = World(tmp_path)
    world.helm.answer("list", output, exit_code)
    assert world.releases.find(SUMMARY) == []
    assert (world.work / "logs" / "deploy-preflight.log").read_text().startswith(output)


def test_find_without_helm_on_path_or_without_a_recipe_asks_nothing(tmp_path: Path) -> None:
    nowhere = World(tmp_path / "a", helm_on_path=False)
    nowhere.helm.answer("list", [pending("gpu-operator", "gpu-operator", "pending-upgrade")])
    assert nowhere.releases.find(SUMMARY) == []
    world = World(tmp_path / "b")
    world.helm.answer("list", [pending("gpu-operator", "gpu-operator", "pending-upgrade")])
    assert world.releases.find(None) == []
    assert nowhere.helm.calls == world.helm.calls == []


ROLLED = [{"revision": 1, "status": "superseded"}, {"revision": 2, "status": "deployed"}]


@pytest.mark.parametrize(
    ("status", "history", "call", "action"),
    [
        (
            "pending-upgrade",
            [*ROLLED, {"revision": 3, "status": "pending-upgrade"}],
            "rollback gpu-operator 2 --namespace gpu-operator",
            "rolled back from revision 3 to 2",
        ),
        (
            "pending-rollback",
            [{"revision": 4, "status": "superseded"}, {"revision": 5, "status": "failed"}, {"revision": 6}],
            "rollback gpu-operator 4 --namespace gpu-operator",
            "rolled back from revision 6 to 4",
        ),
        # Nothing was ever deployed before the pending revision: nothing to roll back to.
        (
            "pending-upgrade",
            [{"revision": 1, "status": "failed"}, {"revision": 2, "status": "pending-upgrade"}],
            "uninstall gpu-operator --namespace gpu-operator",
            "uninstalled (a cut first install; deploy.sh installs it again)",
        ),
        (
            "pending-install",
            [*ROLLED, {"revision": 3, "status": "pending-install"}],
            "uninstall gpu-operator --namespace gpu-operator",
            "uninstalled (a cut first install; deploy.sh installs it again)",
        ),
    ],
)
def test_recover_rolls_back_to_the_last_deployed_revision_or_uninstalls(
    tmp_path: Path, status: str, history: list[dict[str, object]], call: str, action: str
) -> None:
    world = World(tmp_path)
    world.helm.answer("history", history)
    world.releases.recover(PendingRelease("gpu-operator", "gpu-operator", status))
    assert world.helm.calls == ["history gpu-operator --namespace gpu-operator --output json", call]
    [recovery] = world.recoveries
    assert {k: recovery[k] for k in ("release", "status", "action")} == {
        "release": "gpu-operator/gpu-operator",
        "status": status,
        "action": action,
    }
    assert recovery["at"].endswith("Z")
    assert world.progress == [1], "the report is written once the recovery is recorded"
    subcommand = call.split(maxsplit=1)[0]
    assert world.relayed == [f"helm {subcommand} said something\n"], "helm's output goes to the pod log"
    assert (world.work / "logs" / "deploy-recovery-gpu-operator.log").is_file()


def test_recover_without_a_history_fails_with_exit_28_and_touches_nothing(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.helm.answer("history", "Error: release: not found", 1)
    with pytest.raises(HelmReleasePendingError) as raised:
        world.releases.recover(PendingRelease("gpu-operator", "gpu-operator", "pending-upgrade"))
    assert raised.value.exit_code == ExitCode.HELM_RELEASE_PENDING
    assert raised.value.message.startswith(
        "cannot recover gpu-operator/gpu-operator (pending-upgrade): `helm history` failed (exit 1)"
    )
    assert [c.split()[0] for c in world.helm.calls] == ["history"]
    assert world.recoveries == []


def test_a_failed_rollback_fails_with_exit_28_naming_the_command(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.helm.answer("history", [*ROLLED, {"revision": 3, "status": "pending-upgrade"}])
    world.helm.answer("rollback", "", 1)
    with pytest.raises(HelmReleasePendingError) as raised:
        world.releases.recover(PendingRelease("gpu-operator", "gpu-operator", "pending-upgrade"))
    assert raised.value.message == (
        "recovering gpu-operator/gpu-operator (pending-upgrade) failed: "
        "`rollback gpu-operator 2 --namespace gpu-operator` exited 1; repair it by hand and re-run"
    )
    assert world.recoveries == []
    assert world.progress == []


def test_settle_recovers_what_the_lease_proves_is_this_releases_own(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.helm.answer(
        "list", [pending("gpu-operator", "gpu-operator", "pending-upgrade"), pending("nfd", "ops", "pending-install")]
    )
    world.helm.answer("history", [*ROLLED, {"revision": 3, "status": "pending-upgrade"}])
    # A release announced without a namespace (the recipe named none) proves any namespace.
    lease = lease_announcing(["gpu-operator/gpu-operator", "/nfd"])
    assert world.releases.settle(SUMMARY, lease) == ["gpu-operator/gpu-operator", "ops/nfd"]
    assert [r["action"] for r in world.recoveries] == [
        "rolled back from revision 3 to 2",
        "uninstalled (a cut first install; deploy.sh installs it again)",
    ]
    assert world.progress == [1, 2]


@pytest.mark.parametrize(
    ("announced", "why"),
    [
        (["gpu-operator/gpu-operator"], "the install Lease aicr/t-install has no record of a run of this release"),
        (None, "without an install Lease the runner cannot tell who left them"),
    ],
)
def test_settle_leaves_releases_nothing_proves_are_its_own_alone(
    tmp_path: Path, announced: list[str] | None, why: str
) -> None:
    world = World(tmp_path)
    world.helm.answer(
        "list", [pending("gpu-operator", "gpu-operator", "pending-upgrade"), pending("nfd", "ops", "pending-install")]
    )
    lease = lease_announcing(announced) if announced is not None else None
    with pytest.raises(HelmReleasePendingError) as raised:
        world.releases.settle(SUMMARY, lease)
    message = raised.value.message
    if announced is not None:
        assert "pending from an interrupted helm operation: ops/nfd (pending-install);" in message
    else:
        assert "gpu-operator/gpu-operator (pending-upgrade), ops/nfd (pending-install);" in message
    assert why in message
    assert "`helm uninstall <name>` (pending-install), and re-run" in message
    assert world.helm.calls == ["list --all-namespaces --pending --output json"], "nothing is touched"
    assert world.recoveries == []


def test_settle_with_nothing_pending_recovers_nothing(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.helm.answer("list", [])
    assert world.releases.settle(SUMMARY, None) == []
    assert world.progress == []


def test_a_helm_query_against_an_api_that_never_answers_ends_at_its_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """helm has no request timeout: a `helm list` against an API server that accepts
    and never answers waits for ever. The query gets HELM_QUERY_SECONDS, then the
    check is skipped (advisory) and deploy.sh runs."""
    from aicr_runner.helm import pending as pending_module

    monkeypatch.setattr(pending_module, "HELM_QUERY_SECONDS", 1)
    world = World(tmp_path)
    hung = world.helm.dir / "helm"
    hung.write_text(f'#!/bin/sh\necho "$*" >> "{world.helm.dir}/calls"\nexec sleep 600\n')
    started = time.monotonic()
    assert world.releases.find(SUMMARY) == []
    assert time.monotonic() - started < 60, "the query was not ended at its deadline"
    assert world.helm.calls == ["list --all-namespaces --pending --output json"]
