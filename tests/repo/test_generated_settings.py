"""Every file generated from the settings model is current (scripts/gen-settings.py --check):
the environment table, the values table, the chart's env map (chart/templates/_env.tpl), the
values whose null is refused (chart/templates/_not-null.tpl),
the settings' bounds and choices in the chart's schema, the runtime's copy of it, and each
setting's default and `# --` description in chart/values.yaml."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aicr_runner.settings.model import chart_facts
from aicr_runner.settings.runner import leaves
from tests.chart.helm import load_script

ROOT = Path(__file__).resolve().parents[2]
gen = load_script("gen-settings")


def test_every_generated_settings_file_is_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen-settings.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("target", ["ENV_MAP", "SCHEMA_COPY"])
def test_a_stale_generated_file_fails_the_check_and_is_left_alone(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "stale"
    stale.write_text("edited by hand\n")
    monkeypatch.setattr(gen, target, stale)
    monkeypatch.setattr(sys, "argv", ["gen-settings.py", "--check"])
    assert gen.main() == 1
    assert "stale" in capsys.readouterr().err
    assert stale.read_text() == "edited by hand\n"


@pytest.mark.parametrize(
    ("given", "edited"),
    [
        ("  pullBudgetSeconds: 600\n", "  pullBudgetSeconds: 900\n"),
        ("  attempts: 5\n", "  attempts: 6\n"),
        ("# -- Runtime log format: `console` (readable)", "# -- Runtime log format: `console` (pretty)"),
        ("  # -- Timeout of one download attempt, in seconds.\n", "  # -- Timeout.\n"),
    ],
    ids=["default", "nested default", "description", "nested description"],
)
def test_a_hand_edit_of_a_settings_value_in_values_yaml_fails_the_check(
    given: str,
    edited: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = gen.VALUES.read_text()
    assert text.count(given) == 1
    values = tmp_path / "values.yaml"
    values.write_text(text.replace(given, edited))
    monkeypatch.setattr(gen, "VALUES", values)
    monkeypatch.setattr(sys, "argv", ["gen-settings.py", "--check"])
    assert gen.main() == 1
    assert "values.yaml" in capsys.readouterr().err
    # Without --check the model's default and description are written back, nothing else.
    monkeypatch.setattr(sys, "argv", ["gen-settings.py"])
    assert gen.main() == 0
    assert values.read_text() == text


def test_values_yaml_keeps_a_settings_value_as_the_chart_writes_it() -> None:
    text = gen.VALUES.read_text()
    # Seconds are floats in the model, whole numbers in the chart; block lists stay blocks.
    assert gen.values_file(text) == text
    lines = text.splitlines(keepends=True)
    moved = gen.value_entry(lines, "validate.phases", "Phases.", ["deployment", "performance"])
    assert '  phases: ["deployment", "performance"]\n' in moved
    assert "    - deployment\n" not in moved
    added = gen.value_entry(lines, "recipe.expect.maxComponents", "A cap.", 0)
    at = added.index("    overlays: []\n")
    assert added[at + 1 : at + 3] == ["    # -- A cap.\n", "    maxComponents: 0\n"]


def test_the_env_map_renders_each_setting_from_its_chart_value_by_its_type() -> None:
    lines = gen.env_map().splitlines()
    assert "AICR_RUNNER_CRITERIA__SERVICE: {{ toString $v.criteria.service | quote }}" in lines
    assert 'AICR_RUNNER_DEPLOY__ENABLED: {{ include "nvidia-aicr.bool" $v.deploy.enabled | quote }}' in lines
    assert "AICR_RUNNER_SNAPSHOT__TIMEOUT_SECONDS: {{ int64 $v.snapshot.timeoutSeconds | toString | quote }}" in lines
    assert "AICR_RUNNER_RECIPE__ARGS: {{ toJson (default list $v.recipe.args) | quote }}" in lines
    assert "AICR_RUNNER_KUBE_WRITE_BUDGET_SECONDS: {{ $v.kubeApi.writeBudgetSeconds | toString | quote }}" in lines


def test_the_schema_takes_each_settings_bounds_and_choices_from_the_model() -> None:
    properties = json.loads(gen.schema())["properties"]
    download = properties["aicr"]["properties"]["download"]["properties"]
    assert download["attempts"] | {"description": ""} == {
        "type": "integer",
        "description": "",
        "minimum": 1,
        "maximum": 20,
    }
    assert properties["recipe"]["properties"]["expect"]["properties"]["minComponents"]["maximum"] == 100_000
    assert download["budgetSeconds"]["maximum"] == 7200
    assert properties["log"]["properties"]["format"]["enum"] == ["console", "json"]
    # "" is the node's architecture: the setting takes it, so the schema does.
    assert properties["aicr"]["properties"]["arch"]["enum"] == ["", "amd64", "arm64"]
    assert properties["upgradeCheck"]["properties"]["requireAssessment"]["type"] == "boolean"
    # An earlier name (legacy=) takes its new name's schema, marked deprecated.
    earlier = properties["aicrDownload"]["properties"]["attempts"]
    # null too: Helm dropped an earlier name's default for it, and its new name gets that nil.
    assert earlier | {"description": ""} == download["attempts"] | {"description": "", "type": ["integer", "null"]}
    deprecated = "Deprecated: the earlier name of aicr.download.attempts (still honoured). "
    assert earlier["description"] == deprecated + download["attempts"]["description"]
    assert properties["aicrDownload"]["description"].startswith("Deprecated: the earlier name of aicr.download ")


def test_the_compatibility_layer_lists_each_renamed_value_with_its_chart_default() -> None:
    rows = gen.renamed_map().splitlines()
    assert '- {old: deployFlags, new: deploy.flags, default: "--best-effort --no-wait"}' in rows
    assert "- {old: aicrDownload.budgetSeconds, new: aicr.download.budgetSeconds, default: 600}" in rows
    assert "- {old: recipeArgs, new: recipe.args, default: []}" in rows
    page = gen.renamed_table("a\n<!-- renamed-values:start -->\nold\n<!-- renamed-values:end -->\nb\n")
    assert "| `aicrVersion` | `aicr.version` |" in page.splitlines()
    assert page.startswith("a\n<!-- renamed-values:start -->\n")
    assert page.endswith("<!-- renamed-values:end -->\nb\n")


def test_every_setting_has_a_description_and_every_rendered_one_a_source() -> None:
    for name, field in leaves():
        assert field.description, name
        facts = chart_facts(field)
        if "into" in facts:
            assert facts["into"] in ("pod", "configmap"), name
            assert "chart" in facts or "render" in facts, name


def test_a_chart_only_renamed_value_keeps_the_default_values_yaml_gives_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CHART_ONLY_RENAMED's defaults are the compatibility layer's test of "the new name
    is at its default": one that drifted from values.yaml stops the generator."""
    assert '- {old: rerun, new: job.rerun, default: ""}' in gen.renamed_map()
    values = tmp_path / "values.yaml"
    values.write_text(gen.VALUES.read_text().replace('  rerun: ""\n', '  rerun: "again"\n'))
    monkeypatch.setattr(gen, "VALUES", values)
    with pytest.raises(
        SystemExit, match=r"CHART_ONLY_RENAMED rerun -> job.rerun: default '', but values.yaml has 'again'"
    ):
        gen.renamed_map()
