"""Crossing an aicr pin: detection from two recipes, and each verdict judged under
each acknowledgement and policy."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from aicr_runner.aicr.crossing import MoveKind, RecipeFacts, crossing_of
from aicr_runner.aicr.upgrade_check import (
    Action,
    ComponentVerdict,
    Verdict,
    headline,
    judge,
    not_assessed,
    parse_report,
    table,
)
from aicr_runner.errors import AicrContractError, ExitCode
from aicr_runner.settings.config import UpgradeCheckSettings


def recipe(aicr: str = "v1.1.0", **components: str) -> bytes:
    """A recipe document with ``name=version`` components (chart = name)."""
    refs = [{"name": n.replace("_", "-"), "chart": n.replace("_", "-"), "version": v} for n, v in components.items()]
    doc = {"kind": "RecipeResult", "apiVersion": "aicr.run/v1", "metadata": {"version": aicr}, "componentRefs": refs}
    return yaml.safe_dump(doc).encode()


BASE = {"gpu_operator": "v25.10.1", "nfd": "0.17.3"}


def facts(raw: bytes) -> RecipeFacts:
    return RecipeFacts.of(raw)


def test_a_first_install_crosses_nothing() -> None:
    assert crossing_of(None, facts(recipe(**BASE))) is None


def test_the_same_recipe_crosses_nothing() -> None:
    assert crossing_of(facts(recipe(**BASE)), facts(recipe(**BASE))) is None


def test_only_the_aicr_version_moved_is_a_crossing_without_moves() -> None:
    crossing = crossing_of(facts(recipe("v1.1.0", **BASE)), facts(recipe("v1.2.0", **BASE)))
    assert crossing is not None
    assert crossing.moves == ()
    assert crossing.text() == "aicr v1.1.0 → v1.2.0; no component moves"


def test_one_component_moved() -> None:
    crossing = crossing_of(facts(recipe(**BASE)), facts(recipe(**{**BASE, "gpu_operator": "v26.3.3"})))
    assert crossing is not None
    [move] = crossing.moves
    assert (move.component, move.kind, move.source, move.target) == (
        "gpu-operator",
        MoveKind.MOVED,
        "v25.10.1",
        "v26.3.3",
    )
    assert crossing.text() == "aicr v1.1.0 (unchanged); gpu-operator v25.10.1 → v26.3.3"


def test_a_component_added_and_one_removed() -> None:
    crossing = crossing_of(facts(recipe(**BASE)), facts(recipe(gpu_operator="v25.10.1", dra_driver="v25.8.0")))
    assert crossing is not None
    kinds = {(m.component, m.kind, m.source, m.target) for m in crossing.moves}
    assert kinds == {("dra-driver", MoveKind.ADDED, "", "v25.8.0"), ("nfd", MoveKind.REMOVED, "0.17.3", "")}
    assert "dra-driver added (v25.8.0)" in crossing.text()
    assert "nfd removed (was 0.17.3)" in crossing.text()


def test_a_chart_change_at_the_same_version_is_a_move() -> None:
    moved = yaml.safe_load(recipe(**BASE))
    moved["componentRefs"][0]["chart"] = "gpu-operator-v2"
    crossing = crossing_of(facts(recipe(**BASE)), facts(yaml.safe_dump(moved).encode()))
    assert crossing is not None
    assert [m.text() for m in crossing.moves] == [
        "gpu-operator v25.10.1 → v25.10.1 (chart gpu-operator → gpu-operator-v2)"
    ]


# -- each verdict, acknowledgement and policy ------------------------------------------------------


def verdict(kind: Verdict, name: str = "nfd", **extra: Any) -> ComponentVerdict:
    return ComponentVerdict(name, "0.17.3", "v0.18.2", kind, **extra)


def settings(**values: Any) -> UpgradeCheckSettings:
    return UpgradeCheckSettings(**values)


@pytest.mark.parametrize(
    ("kind", "values", "action"),
    [
        (Verdict.SAFE, {}, Action.GO),
        (Verdict.SAFE, {"on_unknown": "warn"}, Action.GO),
        (Verdict.MANUAL, {}, Action.STOP),
        (Verdict.MANUAL, {"acknowledge": ["nfd:0.17.3:v0.18.2"]}, Action.GO),
        # An acknowledgement of another move does not count: another target, source or component.
        (Verdict.MANUAL, {"acknowledge": ["nfd:0.17.3:v0.19.0"]}, Action.STOP),
        (Verdict.MANUAL, {"acknowledge": ["nfd:0.16.0:v0.18.2"]}, Action.STOP),
        (Verdict.MANUAL, {"acknowledge": ["gpu-operator:0.17.3:v0.18.2"]}, Action.STOP),
        (Verdict.MANUAL, {"on_unknown": "warn"}, Action.STOP),
        # Blocked: never overridable, neither by an acknowledgement nor by the unknown policy.
        (Verdict.BLOCKED, {}, Action.STOP),
        (Verdict.BLOCKED, {"acknowledge": ["nfd:0.17.3:v0.18.2"], "on_unknown": "warn"}, Action.STOP),
        (Verdict.UNKNOWN, {}, Action.STOP),
        (Verdict.UNKNOWN, {"on_unknown": "warn"}, Action.WARN),
        (Verdict.UNKNOWN, {"acknowledge": ["nfd:0.17.3:v0.18.2"]}, Action.STOP),
        (Verdict.UNVERSIONED, {}, Action.STOP),
        (Verdict.UNVERSIONED, {"on_unknown": "warn"}, Action.WARN),
    ],
)
def test_each_verdict_under_each_acknowledgement_and_policy(
    kind: Verdict, values: dict[str, Any], action: Action
) -> None:
    [judged] = judge([verdict(kind, steps=("relabel",))], settings(**values))
    assert judged.action is action


def test_what_to_do_names_the_steps_the_starting_point_and_the_acknowledgement() -> None:
    manual, blocked = judge(
        [
            verdict(Verdict.MANUAL, steps=("move the namespace", "relabel the nodes")),
            verdict(Verdict.BLOCKED, "gpu-operator", earliest_from="v25.10.2", reference="UPGRADING.md"),
        ],
        settings(),
    )
    assert "move the namespace; relabel the nodes" in manual.todo
    assert "{component: nfd, from: 0.17.3, to: v0.18.2} to upgradeCheck.acknowledge" in manual.todo
    assert "upgrade to v25.10.2 (the earliest recorded starting point) first, then to v0.18.2" in blocked.todo
    assert "read UPGRADING.md" in blocked.todo


def test_the_headline_puts_the_blocked_first_and_leaves_out_what_goes_on() -> None:
    judged = judge(
        [
            ComponentVerdict("nfd", "0.17.3", "v0.18.2", Verdict.MANUAL),
            ComponentVerdict("gpu-operator", "v25.10.1", "v26.3.3", Verdict.BLOCKED),
            ComponentVerdict("cert-manager", "v1.17.2", "v1.18.0", Verdict.SAFE),
        ],
        settings(),
    )
    assert headline(judged) == "upgrade blocked: gpu-operator v25.10.1 → v26.3.3; manual: nfd 0.17.3 → v0.18.2"
    assert headline(judge([ComponentVerdict("nfd", "a", "b", Verdict.MANUAL)], settings())) == (
        "upgrade needs manual steps: nfd a → b"
    )
    assert headline(judge([ComponentVerdict("nfd", "a", "b", Verdict.SAFE)], settings())) == ""
    rows = table(judged).splitlines()
    assert rows[0].split() == ["COMPONENT", "FROM", "TO", "VERDICT", "WHAT", "TO", "DO"]
    assert rows[2].split()[:4] == ["gpu-operator", "v25.10.1", "v26.3.3", "blocked"]


def test_not_assessed_warns_each_move_or_stops_under_require_assessment() -> None:
    crossing = crossing_of(facts(recipe(**BASE)), facts(recipe(**{**BASE, "gpu_operator": "v26.3.3"})))
    assert crossing is not None
    warned = not_assessed(crossing, settings(), "aicr v0.11.1")
    assert [(j.component.name, j.component.verdict, j.action) for j in warned.judged] == [
        ("gpu-operator", Verdict.NOT_ASSESSED, Action.WARN)
    ]
    assert warned.assessed is False
    assert warned.stops == ()
    stopped = not_assessed(crossing, settings(require_assessment=True), "aicr v0.11.1")
    assert [j.action for j in stopped.stops] == [Action.STOP]


def test_a_report_without_the_contracts_fields_is_a_broken_contract() -> None:
    for text in ("not json", json.dumps({"items": []}), json.dumps({"components": [{"name": "nfd"}]})):
        with pytest.raises(AicrContractError) as raised:
            parse_report(text)
        assert raised.value.exit_code == ExitCode.AICR_CONTRACT_BROKEN
    # A verdict this runner does not know is one it cannot judge: unknown (stopped by default), never safe.
    [odd] = parse_report(json.dumps({"components": [{"name": "nfd", "verdict": "risky"}]}))
    assert odd.verdict is Verdict.UNKNOWN


def test_the_exit_code_of_a_stop_is_final_under_the_charts_pod_failure_policy() -> None:
    from aicr_runner.errors import DETERMINISTIC_EXIT_CODES

    assert int(ExitCode.UPGRADE_STOPPED) == 35
    assert ExitCode.UPGRADE_STOPPED in DETERMINISTIC_EXIT_CODES
