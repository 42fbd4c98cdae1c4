"""upgradeCheck.*: what the chart tells the runner about a crossed aicr pin, and
what it refuses at render time."""

from __future__ import annotations

import json

from aicr_runner.settings.config import UnknownPolicy, UpgradeCheckSettings, load
from aicr_runner.settings.values_file import env_from_values
from tests.chart.helm import rejects_by_schema, renders

MOVE = {"component": "nfd", "from": "0.17.3", "to": "v0.18.2"}


def runner_settings(env: dict[str, str]) -> UpgradeCheckSettings:
    return load({k: v for k, v in env.items() if k.startswith("AICR_RUNNER_")}).upgrade_check


def test_the_defaults_stop_what_aicr_cannot_judge_and_acknowledge_nothing() -> None:
    env = renders({}).env
    assert env["AICR_RUNNER_UPGRADE_CHECK__ACKNOWLEDGE"] == "[]"
    assert env["AICR_RUNNER_UPGRADE_CHECK__ON_UNKNOWN"] == "stop"
    assert env["AICR_RUNNER_UPGRADE_CHECK__REQUIRE_ASSESSMENT"] == "false"
    settings = runner_settings(env)
    assert (settings.acknowledge, settings.on_unknown, settings.require_assessment) == ([], UnknownPolicy.STOP, False)


def test_the_runner_reads_what_the_chart_renders_and_plan_values_read_the_same() -> None:
    values = {"upgradeCheck": {"acknowledge": [MOVE], "onUnknown": "warn", "requireAssessment": True}}
    env = renders(values).env
    assert json.loads(env["AICR_RUNNER_UPGRADE_CHECK__ACKNOWLEDGE"]) == ["nfd:0.17.3:v0.18.2"]
    settings = runner_settings(env)
    assert settings.acknowledged("nfd", "0.17.3", "v0.18.2")
    assert not settings.acknowledged("nfd", "0.17.3", "v0.19.0")
    assert (settings.on_unknown, settings.require_assessment) == (UnknownPolicy.WARN, True)
    # plan --values turns the same values into the same variables.
    planned = env_from_values(values)
    for name in ("ACKNOWLEDGE", "ON_UNKNOWN", "REQUIRE_ASSESSMENT"):
        assert planned[f"AICR_RUNNER_UPGRADE_CHECK__{name}"] == env[f"AICR_RUNNER_UPGRADE_CHECK__{name}"]


def test_unchanged_values_render_the_same_job_and_an_acknowledgement_starts_a_new_one() -> None:
    plain = renders({})
    defaults = renders({"upgradeCheck": {"acknowledge": [], "onUnknown": "stop", "requireAssessment": False}})
    # An upgrade with unchanged values is a no-op: the same Job, the same template.
    assert defaults.job["metadata"]["name"] == plain.job["metadata"]["name"]
    assert defaults.job["spec"]["template"] == plain.job["spec"]["template"]
    # Acknowledging a move re-runs the stopped install: a new Job.
    acknowledged = renders({"upgradeCheck": {"acknowledge": [MOVE]}})
    assert acknowledged.job["metadata"]["name"] != plain.job["metadata"]["name"]


def test_the_schema_refuses_what_the_runner_would() -> None:
    rejects_by_schema({"upgradeCheck": {"onUnknown": "ignore"}}, "/upgradeCheck/onUnknown", "must be one of")
    rejects_by_schema({"upgradeCheck": {"acknowledge": [{"component": "nfd", "from": "0.17.3"}]}},
                      "/upgradeCheck/acknowledge/0", "missing property 'to'")  # fmt: skip
    rejects_by_schema({"upgradeCheck": {"acknowledge": [{**MOVE, "to": "v 0.18"}]}},
                      "/upgradeCheck/acknowledge/0/to", "does not match pattern")  # fmt: skip
    rejects_by_schema({"upgradeCheck": {"acknowledge": ["nfd:0.17.3:v0.18.2"]}},
                      "/upgradeCheck/acknowledge/0", "got string, want object")  # fmt: skip
    rejects_by_schema({"upgradeCheck": {"force": True}}, "/upgradeCheck", "additional properties 'force'")
