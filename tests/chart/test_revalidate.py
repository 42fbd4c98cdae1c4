"""The scheduled re-validation CronJob (revalidate.*): off by default, the Job's pod told to validate only."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.helm import NAMESPACE, rejects_by_schema, rejects_with, render, renders
from tests.chart.test_job import notes

ON = {"validate": {"enabled": True}, "revalidate": {"schedule": "0 */6 * * *"}}


def cronjob(values: dict[str, Any]) -> dict[str, Any]:
    return renders(values).one("CronJob")


def test_no_schedule_renders_no_cronjob() -> None:
    assert "CronJob" not in renders({"validate": {"enabled": True}}).kinds()


def test_a_schedule_renders_a_forbid_cronjob_whose_pod_is_the_jobs_told_to_validate_only() -> None:
    result = renders(ON)
    cron = result.one("CronJob")
    spec = cron["spec"]
    assert cron["metadata"]["namespace"] == NAMESPACE
    assert spec["schedule"] == "0 */6 * * *"
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["suspend"] is False
    assert "timeZone" not in spec
    assert "startingDeadlineSeconds" not in spec
    assert (spec["successfulJobsHistoryLimit"], spec["failedJobsHistoryLimit"]) == (3, 3)
    job = spec["jobTemplate"]["spec"]
    assert job["activeDeadlineSeconds"] == 3600
    pod = job["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"] == ["validate", "--recipe", "/etc/aicr-runner/recorded-recipe/recipe.yaml"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["recorded-recipe"] == {
        "name": "recorded-recipe",
        "mountPath": "/etc/aicr-runner/recorded-recipe",
        "readOnly": True,
    }
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["recorded-recipe"]["configMap"] == {"name": "aicr-recipe", "optional": True}
    # The same pod as the install Job's, but for its args and the recipe mount.
    install = result.pod
    assert pod["serviceAccountName"] == install["serviceAccountName"]
    assert container["image"] == result.container["image"]
    assert container["env"] == result.container["env"]
    assert container["securityContext"] == result.container["securityContext"]
    assert job["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "revalidate"


def test_every_schedule_value_reaches_the_cronjob() -> None:
    spec = cronjob(
        {
            **ON,
            "revalidate": {
                "schedule": "30 2 * * *",
                "timeZone": "Europe/Berlin",
                "suspend": True,
                "startingDeadlineSeconds": 600,
                "successfulJobsHistoryLimit": 1,
                "failedJobsHistoryLimit": 5,
                "activeDeadlineSeconds": 900,
            },
        }
    )["spec"]
    assert (spec["schedule"], spec["timeZone"], spec["suspend"]) == ("30 2 * * *", "Europe/Berlin", True)
    assert spec["startingDeadlineSeconds"] == 600
    assert (spec["successfulJobsHistoryLimit"], spec["failedJobsHistoryLimit"]) == (1, 5)
    assert spec["jobTemplate"]["spec"]["activeDeadlineSeconds"] == 900


def test_a_schedule_without_validation_or_a_recorded_recipe_is_refused() -> None:
    rejects_with(
        {"revalidate": {"schedule": "@daily"}},
        'revalidate.schedule="@daily" needs validate.enabled=true: '
        "a scheduled re-validation with validation off checks nothing",
    )
    rejects_with(
        {**ON, "recipeConfigMap": ""},
        'revalidate.schedule="0 */6 * * *" needs recipe.configMap: re-validation reads the recipe the install '
        "recorded there (it never resolves the recipe again)",
    )


def test_the_schema_refuses_bad_revalidate_values() -> None:
    rejects_by_schema(
        {**ON, "revalidate": {"schedule": "@daily", "activeDeadlineSeconds": 5}},
        "/revalidate/activeDeadlineSeconds",
        "minimum",
    )
    rejects_by_schema(
        {**ON, "revalidate": {"schedule": "@daily", "timeZone": "Berlin; rm"}}, "/revalidate/timeZone", ""
    )
    rejects_by_schema({**ON, "revalidate": {"schedule": "@daily", "every": "6h"}}, "/revalidate", "every")


def test_the_install_job_is_the_same_with_or_without_a_schedule() -> None:
    """The Job's name hashes its pod template: turning re-validation on must not re-run the install."""
    assert render({"validate": {"enabled": True}}).job == render(ON).job


def test_the_role_reads_the_re_validation_jobs_only_with_a_schedule() -> None:
    def job_rules(values: dict[str, Any]) -> list[dict[str, Any]]:
        rules = renders(values).one("Role")["rules"]
        return [r for r in rules if r["resources"] == ["jobs"] and "resourceNames" not in r]

    assert job_rules({"validate": {"enabled": True}}) == []
    assert job_rules(ON) == [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "patch"]}]


def test_validate_history_limit_reaches_the_runtime_without_a_new_job() -> None:
    default, changed = renders(ON), renders({**ON, "validate": {"enabled": True, "historyLimit": 5}})
    assert changed.env["AICR_RUNNER_VALIDATE__HISTORY_LIMIT"] == "5"
    assert default.env["AICR_RUNNER_VALIDATE__HISTORY_LIMIT"] == "20"
    assert changed.job["metadata"]["name"] == default.job["metadata"]["name"]
    rejects_by_schema({**ON, "validate": {"enabled": True, "historyLimit": 0}}, "/validate/historyLimit", "minimum")


@pytest.mark.one_helm  # see tests.chart.test_job.notes
def test_notes_name_the_cronjob_and_the_command_that_starts_a_revalidation_now() -> None:
    cron = cronjob(ON)["metadata"]["name"]
    assert cron == "t-install-revalidate"
    text = notes("--set", "validate.enabled=true", "--set", "revalidate.schedule=0 */6 * * *")
    assert (
        f'Re-validation: the CronJob {cron} validates again on "0 */6 * * *". To start one now:\n'
        f"  kubectl create job -n {NAMESPACE} --from=cronjob/{cron} {cron}-$(date +%s)\n"
    ) in text
    # The Job it starts is named within 63 characters (the CronJob's name is cut to 52, the suffix is 10 digits).
    suspended = notes(
        "--set", "validate.enabled=true", "--set", "revalidate.schedule=@daily", "--set", "revalidate.suspend=true"
    )  # fmt: skip
    assert f'the CronJob {cron} validates again on "@daily" (suspended: revalidate.suspend=true).' in suspended
    fullname = notes(
        "--set", "validate.enabled=true", "--set", "revalidate.schedule=@daily", "--set", "fullnameOverride=gpu"
    )  # fmt: skip
    assert "--from=cronjob/gpu-install-revalidate gpu-install-revalidate-$(date +%s)" in fullname


@pytest.mark.one_helm  # see tests.chart.test_job.notes
def test_notes_without_a_schedule_say_nothing_of_revalidation() -> None:
    text = notes("--set", "validate.enabled=true")
    assert "Re-validation" not in text
    assert "cronjob" not in text.lower()
