"""The snapshot step in a cluster: the agent's ConfigMap read back, kept, compared, told."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from pathlib import Path

import yaml

from aicr_runner.kube.sink import CONFIGMAP_BUDGET_BYTES, ConfigMapSink
from aicr_runner.run.machine import State, StepResult
from aicr_runner.run.report import StepStatus
from aicr_runner.steps.context import RunContext
from aicr_runner.steps.snapshot import AGENT_CONFIGMAP
from aicr_runner.steps.table import Steps
from tests.support.fakes import FakeKubeApi
from tests.unit.aicr.test_snapshot_diff import snapshot
from tests.unit.steps.test_steps import StubProcesses, context, rewired, step

AGENT = ("aicr-validation", AGENT_CONFIGMAP)
ON = {"AICR_RUNNER_SNAPSHOT__ENABLED": "true"}


def cluster(tmp_path: Path, api: FakeKubeApi, document: str | None, told: list[list[str]]) -> RunContext:
    """A run whose ``aicr snapshot`` has its agent write ``document`` to its ConfigMap."""

    def agent(argv: Sequence[str]) -> None:
        if "snapshot" in argv and document is not None:
            api.objects[AGENT] = {"data": {"snapshot.yaml": document, "format": "yaml"}, "binaryData": {}}

    base = context(tmp_path, StubProcesses(effect=agent), sink=ConfigMapSink(api, "runner-ns"), **ON)
    return rewired(
        base,
        read_configmap=api.get_configmap_data,
        on_cluster_change=lambda changes, since: told.append(list(changes)),
    )


def test_the_agents_configmap_is_passed_to_validate_kept_and_compared(tmp_path: Path) -> None:
    api = FakeKubeApi()
    told: list[list[str]] = []
    first = cluster(tmp_path, api, snapshot(), told)
    status, _, message = step(first, State.SNAPSHOT)
    assert status is StepStatus.SUCCEEDED, message
    argv = first.externals.processes.calls[-1]  # type: ignore[attr-defined]
    assert argv[argv.index("--output") + 1] == "cm://aicr-validation/aicr-runner-snapshot"
    assert first.findings.snapshot == "cm://aicr-validation/aicr-runner-snapshot"
    assert "kept in configmap runner-ns/aicr-cluster-snapshot" in message
    kept = api.objects[("runner-ns", "aicr-cluster-snapshot")]["data"]
    assert "kind: Snapshot" in kept["snapshot.yaml"]  # type: ignore[index]
    assert json.loads(kept["facts.json"])["facts"]["GPU count"] == "8"  # type: ignore[index]

    second = cluster(tmp_path, api, snapshot(driver="570.86.15", gpus=7), told)
    status, _, message = step(second, State.SNAPSHOT)
    assert status is StepStatus.SUCCEEDED, message
    assert "cluster changed since" in message
    assert told == [["GPU count: 8 -> 7", "GPU driver: 560.35.03 -> 570.86.15"]]
    assert second.report.cluster_changes == told[0]
    summary = second.report.summary_text()
    assert f"cluster changed since {second.report.cluster_changed_since}:" in summary
    assert "- GPU count: 8 -> 7" in summary

    third = cluster(tmp_path, api, snapshot(driver="570.86.15", gpus=7, timestamp="2027-01-01T00:00:00Z"), told)
    assert "unchanged since" in step(third, State.SNAPSHOT)[2]
    assert len(told) == 1


def test_validate_gets_the_runs_snapshot(tmp_path: Path) -> None:
    api = FakeKubeApi()
    ctx = cluster(tmp_path, api, snapshot(), [])
    step(ctx, State.SNAPSHOT)
    ctx.recipe_path.write_text("kind: RecipeResult\n")
    ctx = rewired(ctx, settings=ctx.settings.model_copy(update={"validate": ctx.settings.validate.model_copy(
        update={"enabled": True})}))  # fmt: skip
    step(ctx, State.VALIDATE)
    validate = ctx.externals.processes.calls[-1]  # type: ignore[attr-defined]
    assert validate[validate.index("--snapshot") + 1] == "cm://aicr-validation/aicr-runner-snapshot"


def test_an_agent_that_wrote_nothing_or_garbage_is_a_warning_and_validate_takes_its_own(tmp_path: Path) -> None:
    for document, classification in ((None, "snapshot-missing"), ("kind: Recipe\n", "snapshot-unreadable")):
        api = FakeKubeApi()
        ctx = cluster(tmp_path, api, document, [])
        result = snapshot_result(ctx)
        assert (result.status, result.classification) == (StepStatus.WARNED, classification)
        assert "advisory" in result.reason
        assert ctx.findings.snapshot == ""
        assert ("runner-ns", "aicr-cluster-snapshot") not in api.objects


def test_a_document_over_budget_even_compressed_keeps_its_facts(tmp_path: Path) -> None:
    doc = yaml.safe_load(snapshot())
    # A reading that does not compress below the budget (random bytes, base64).
    noise = {"blob": base64.b64encode(os.urandom(CONFIGMAP_BUDGET_BYTES + CONFIGMAP_BUDGET_BYTES // 5)).decode()}
    doc["measurements"].append({"type": "OS", "subtypes": [{"subtype": "kmod", "data": noise}]})
    text = yaml.safe_dump(doc)
    assert len(text) > CONFIGMAP_BUDGET_BYTES
    api = FakeKubeApi()
    result = snapshot_result(cluster(tmp_path, api, text, []))
    kept = api.objects[("runner-ns", "aicr-cluster-snapshot")]
    assert result.status is StepStatus.WARNED, result.reason
    assert "facts only" in result.reason
    assert set(kept["data"]) == {"facts.json"}  # type: ignore[call-overload]


def test_off_it_runs_nothing(tmp_path: Path) -> None:
    api = FakeKubeApi()
    ctx = rewired(cluster(tmp_path, api, snapshot(), []), settings=context(tmp_path, StubProcesses()).settings)
    assert step(ctx, State.SNAPSHOT)[:1] == (StepStatus.SKIPPED,)
    assert ctx.externals.processes.calls == []  # type: ignore[attr-defined]


def snapshot_result(ctx: RunContext) -> StepResult:
    return Steps(ctx).functions()[State.SNAPSHOT]()


def test_a_damaged_facts_json_is_kept_aside_replaced_and_said(tmp_path: Path) -> None:
    """Issue 35 finding 9: a corrupt facts.json was never replaced (exit 70 every run)."""
    api = FakeKubeApi()
    damaged = '{"time": "t0", "facts": {"GPU count": '
    api.objects[("runner-ns", "aicr-cluster-snapshot")] = {"data": {"facts.json": damaged}, "binaryData": {}}
    told: list[list[str]] = []
    ctx = cluster(tmp_path, api, snapshot(), told)
    status, _, message = step(ctx, State.SNAPSHOT)
    assert status is StepStatus.SUCCEEDED, message
    assert "facts.json is damaged: kept aside in configmap runner-ns/aicr-cluster-snapshot (facts.damaged.json)" in (
        message
    )
    kept = api.objects[("runner-ns", "aicr-cluster-snapshot")]["data"]
    assert kept["facts.damaged.json"] == damaged  # type: ignore[index]
    assert json.loads(kept["facts.json"])["facts"]["GPU count"] == "8"  # type: ignore[index]
    assert any("facts.json is damaged" in warning for warning in ctx.report.warnings)
    # The next run compares with the replaced facts and still keeps the damaged copy.
    again = cluster(tmp_path, api, snapshot(), told)
    assert "unchanged since" in step(again, State.SNAPSHOT)[2]
    assert api.objects[("runner-ns", "aicr-cluster-snapshot")]["data"]["facts.damaged.json"] == damaged  # type: ignore[index]
