"""Issue 35, "never fail open": whole runs against a misbehaving aicr (the fake's
FAKE_AICR_VALIDATE_REPORT / FAKE_AICR_VALIDATE_EXIT) and damaged state. Each test
names the finding it covers; each failed on the code before the fix (a green
verdict, an exit 70, or an unbounded output)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest

from aicr_runner import wiring
from aicr_runner.cli import main
from aicr_runner.kube.sink import CONFIGMAP_BUDGET_BYTES, payload_size
from tests.fake_aicr import install_fake_aicr
from tests.integration.test_runs import VALIDATE, clean_env
from tests.support.fakes import FakeKubeApi

GATED = {"AICR_RUNNER_VALIDATE__FAIL_ON_ERROR": "true"}
#: A one-line output holds no control character (ESC, CR, newline, NUL...).
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_fake_aicr(tmp_path_factory.mktemp("fake-bin"))


@pytest.fixture(scope="module")
def recorded(fake: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("install")
    env = clean_env(tmp, **VALIDATE, AICR_RUNNER_DEPLOY__ENABLED="false")
    assert main(["run", "--aicr-binary", str(fake), "--results-dir", str(tmp / "results")], environ=env) == 0
    return tmp / "results" / "aicr-recipe" / "recipe.yaml"


def ctrf(*tests: Any, summary: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    """A CTRF report; its summary counted from ``tests`` unless given."""
    rows = [t for t in tests if isinstance(t, dict)]
    counted = {"tests": len(tests)} | {
        s: sum(1 for t in rows if t.get("status") == s) for s in ("passed", "failed", "skipped", "pending", "other")
    }
    return {
        "reportFormat": "CTRF",
        **top,
        "results": {"summary": counted if summary is None else summary, "tests": list(tests)},
    }


def check(name: str, status: str, message: str = "") -> dict[str, Any]:
    return {"name": name, "status": status, "message": message, "suite": ["deployment"]}


def validate(
    fake: Path, recipe: Path, tmp_path: Path, report: bytes | dict[str, Any] | None = None, **extra: str
) -> tuple[int, dict[str, Any], str]:
    env = clean_env(tmp_path, **VALIDATE, **extra)
    tmp_path.mkdir(parents=True, exist_ok=True)
    if report is not None:
        path = tmp_path / "given-ctrf.json"
        path.write_bytes(report if isinstance(report, bytes) else json.dumps(report).encode())
        env["FAKE_AICR_VALIDATE_REPORT"] = str(path)
    argv = ["validate", "--recipe", str(recipe), "--aicr-binary", str(fake), "--results-dir", str(tmp_path / "out")]
    code = main(argv, environ=env)
    status = tmp_path / "out" / "aicr-run-status" / "report.json"
    term = tmp_path / "termination-log"
    return code, json.loads(status.read_text()), term.read_text(encoding="utf-8") if term.exists() else ""


def step(report: dict[str, Any], state: str) -> dict[str, Any]:
    return next(s for s in report["steps"] if s["state"] == state)


# -- finding 5: the summary against the tests -------------------------------------------------------

CONTRADICTIONS = {
    "summary says 3 passed, tests hold a failure": ctrf(
        check("gpu-operator-version", "failed", "too old"), summary={"tests": 3, "passed": 3}
    ),
    "a fractional count": ctrf(check("a", "passed"), summary={"tests": 1, "passed": 1, "failed": 0.5}),
    "a negative count": ctrf(check("a", "passed"), summary={"tests": 1, "passed": 1, "failed": -1}),
    "tests not a list": {"reportFormat": "CTRF", "results": {"summary": {"tests": 1, "passed": 1}, "tests": {}}},
    "string entries": ctrf("operator-health", summary={"tests": 1, "passed": 1}),
    "an entry without a name": ctrf({"status": "passed"}, summary={"tests": 1, "passed": 1}),
    "not CTRF": ctrf(check("a", "passed"), reportFormat="JUnit"),
}


@pytest.mark.parametrize("report", CONTRADICTIONS.values(), ids=CONTRADICTIONS.keys())
def test_finding_5_a_report_that_contradicts_itself_is_unreadable_never_green(
    fake: Path, recorded: Path, tmp_path: Path, report: dict[str, Any]
) -> None:
    code, status, term = validate(fake, recorded, tmp_path / "gated", report, **GATED)
    assert (code, status["phase"]) == (30, "Failed"), status["message"]
    assert "validation unreadable" in status["message"]
    assert term.startswith("Failed (exit 30): Validation UNREADABLE")
    code, status, _ = validate(fake, recorded, tmp_path / "ungated", report)
    assert (code, status["phase"]) == (0, "SucceededWithFailures"), status["message"]
    assert (step(status, "validate")["status"], step(status, "validate")["classification"]) == (
        "warned",
        "validation-unreadable",
    )


def test_finding_5_a_summary_mismatch_names_the_checks(fake: Path, recorded: Path, tmp_path: Path) -> None:
    report = CONTRADICTIONS["summary says 3 passed, tests hold a failure"]
    _, status, _ = validate(fake, recorded, tmp_path, report, **GATED)
    assert (
        "results.summary says 3 passed, 0 failed, but its 1 tests hold 0 passed; 1 failed (gpu-operator-version)"
        in (status["message"])
    )


# -- finding 6: a status outside CTRF's set ---------------------------------------------------------


@pytest.mark.parametrize("odd", ["error", "flaky", "FAILED", None])
def test_finding_6_a_status_outside_ctrf_is_unreadable_and_named(
    fake: Path, recorded: Path, tmp_path: Path, odd: str | None
) -> None:
    odd_check = {"name": "nccl-bandwidth", "suite": ["deployment"], **({"status": odd} if odd else {})}
    report = ctrf(check("operator-health", "passed"), odd_check, summary={"tests": 2, "passed": 1})
    code, status, _ = validate(fake, recorded, tmp_path, report, **GATED)
    assert code == 30
    assert "check nccl-bandwidth has status" in status["message"]


# -- finding 7: a failing aicr exit behind a passing report -----------------------------------------


@pytest.mark.parametrize("exit_code", [1, 2, 137, 143])
def test_finding_7_a_failing_exit_behind_an_all_passed_report_is_not_succeeded(
    fake: Path, recorded: Path, tmp_path: Path, exit_code: int
) -> None:
    code, status, _ = validate(fake, recorded, tmp_path, FAKE_AICR_VALIDATE_EXIT=str(exit_code))
    assert (code, status["phase"]) == (0, "SucceededWithFailures"), status["message"]
    assert f"aicr validate exited {exit_code}" in status["message"]
    assert "checks passed" in status["message"]
    code, status, _ = validate(
        fake, recorded, tmp_path / "gated", None, FAKE_AICR_VALIDATE_EXIT=str(exit_code), **GATED
    )
    assert (code, status["phase"]) == (exit_code, "Failed")


# -- finding 9: crashes (exit 70) -------------------------------------------------------------------

NOT_JSON = {
    "Infinity": b'{"reportFormat": "CTRF", "results": {"summary": {"tests": Infinity}, "tests": []}}',
    "1e400": b'{"reportFormat": "CTRF", "results": {"summary": {"tests": 0, "passed": 1e400}, "tests": []}}',
    "200,000 deep": b"[" * 200_000 + b"]" * 200_000,
}


@pytest.mark.parametrize("raw", NOT_JSON.values(), ids=NOT_JSON.keys())
def test_finding_9_json_beyond_reading_is_unreadable_not_a_crash(
    fake: Path, recorded: Path, tmp_path: Path, raw: bytes
) -> None:
    code, status, _ = validate(fake, recorded, tmp_path, raw, **GATED)
    assert code == 30, status["message"]
    assert "validation unreadable" in status["message"]


def test_finding_9_a_lone_surrogate_in_a_message_is_written_replaced(
    fake: Path, recorded: Path, tmp_path: Path
) -> None:
    raw = json.dumps(ctrf(check("operator-health", "failed", "bad \udc80 byte"))).encode()
    code, status, term = validate(fake, recorded, tmp_path, raw, **GATED)
    assert (code, status["phase"]) == (8, "Failed")
    assert "operator-health (bad \ufffd byte)" in term
    assert term.startswith("Failed (exit 8)")


def _recipes(tmp: Path, recorded: Path) -> dict[str, Path]:
    """Broken recorded recipes by what is wrong with them."""
    made: dict[str, bytes] = {
        "non-UTF-8": b"\xff\xfe\x00kind: RecipeResult",
        "empty": b"",
        "not YAML": b"kind: [unclosed",
        "a list": b"- a\n- b\n",
        "kind Pod": recorded.read_bytes().replace(b"kind: RecipeResult", b"kind: Pod"),
    }
    paths = {"root": Path("/")}
    for name, raw in made.items():
        (tmp / name).mkdir(parents=True)
        (tmp / name / "recipe.yaml").write_bytes(raw)
        paths[name] = tmp / name / "recipe.yaml"
    for name, raw in {
        "corrupt gz": b"\x1f\x8b\x08\x00garbage",
        "gz bomb": gzip.compress(b"\0" * 64 * 1024 * 1024),
    }.items():
        (tmp / name).mkdir()
        (tmp / name / "recipe.yaml.gz").write_bytes(raw)
        paths[name] = tmp / name / "recipe.yaml"
    return paths


def test_finding_9_a_broken_recorded_recipe_is_exit_2_naming_it(fake: Path, recorded: Path, tmp_path: Path) -> None:
    for what, recipe in _recipes(tmp_path / "recipes", recorded).items():
        code, status, _ = validate(fake, recipe, tmp_path / what.replace(" ", "-"))
        assert code == 2, (what, status["message"])
        assert f"--recipe {recipe}" in status["message"], what


def test_finding_9_a_damaged_history_is_kept_aside_and_replaced_the_verdict_kept(
    fake: Path, recorded: Path, tmp_path: Path
) -> None:
    history = tmp_path / "out" / "aicr-validate-result-history"
    history.mkdir(parents=True)
    damaged = json.dumps([{"recipeDigest": "sha256:x", "checks": ["operator-health"]}])
    (history / "history.json").write_text(damaged)
    code, status, _ = validate(fake, recorded, tmp_path)
    assert (code, status["phase"]) == (0, "Succeeded"), status["message"]
    assert (history / "history.damaged.json").read_text() == damaged
    assert len(json.loads((history / "history.json").read_text())) == 1
    assert any("verdict history's entry 0 is damaged" in w for w in status["warnings"])
    assert (tmp_path / "out" / "aicr-validate-result" / "ctrf.json").is_file()


# -- finding 13 --------------------------------------------------------------------------------------


def test_finding_13_an_unreadable_report_never_replaces_the_last_good_one(
    fake: Path, recorded: Path, tmp_path: Path
) -> None:
    validate(fake, recorded, tmp_path)
    good = (tmp_path / "out" / "aicr-validate-result" / "ctrf.json").read_text()
    validate(fake, recorded, tmp_path, b'{"reportFormat": "CTRF", "results": []}')
    assert (tmp_path / "out" / "aicr-validate-result" / "ctrf.json").read_text() == good
    kept = tmp_path / "out" / "aicr-validate-result-history" / "ctrf.unreadable.json"
    assert kept.read_text() == '{"reportFormat": "CTRF", "results": []}'
    assert len(json.loads(kept.with_name("history.json").read_text())) == 1, "no verdict, no entry"


def test_finding_13_duplicate_names_are_said_and_give_no_false_regression(
    fake: Path, recorded: Path, tmp_path: Path
) -> None:
    report = ctrf(check("operator-health", "passed"), check("operator-health", "failed", "x"), check("b", "passed"))
    for _ in range(2):
        _code, status, _ = validate(fake, recorded, tmp_path, report)
    assert "check names reported more than once: operator-health" in step(status, "validate")["message"]
    assert "REGRESSED" not in json.dumps(status), status["warnings"]


def test_finding_13_exit_0_with_a_failed_check_says_what_decided(fake: Path, recorded: Path, tmp_path: Path) -> None:
    report = ctrf(check("operator-health", "failed", "down"))
    code, status, _ = validate(fake, recorded, tmp_path, report, **GATED)
    assert code == 8
    assert "aicr validate exited 0 all the same: the report decides (exit 8)" in status["message"]
    assert "before ~0.18" not in status["message"]


def test_finding_13_pending_checks_are_named_in_a_green_result(fake: Path, recorded: Path, tmp_path: Path) -> None:
    report = ctrf(check("operator-health", "passed"), check("nccl-bandwidth", "pending"))
    code, status, _ = validate(fake, recorded, tmp_path, report, **GATED)
    assert code == 0
    assert "1 pending: nccl-bandwidth" in step(status, "validate")["message"]


def test_finding_13_a_local_run_writes_no_termination_log_outside_its_directories(
    fake: Path, recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside: list[Path] = []
    for method in ("write_text", "write_bytes"):
        original = getattr(Path, method)

        def guarded(self: Path, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if not self.resolve().is_relative_to(tmp_path.resolve()):
                outside.append(self)  # recorded, never written: the host's /dev stays untouched
                return 0
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(Path, method, guarded)
    env = clean_env(tmp_path, **VALIDATE)
    del env["AICR_RUNNER_TERMINATION_MESSAGE_PATH"]
    argv = ["validate", "--recipe", str(recorded), "--aicr-binary", str(fake), "--results-dir", str(tmp_path / "o")]
    assert main(argv, environ=env) == 0
    assert outside == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o", "work"]


# -- findings 8 and 12: bounded, printable outputs, and the final phase always written ---------------


def test_finding_8_a_250_kb_message_still_writes_the_final_phase_within_the_configmap_budget(
    fake: Path, recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against the fake API with the real ConfigMap sink and its 921,600-byte budget."""
    api = FakeKubeApi()
    monkeypatch.setattr(wiring, "_make_api", lambda *_: api)
    report = ctrf(
        check("operator-health", "failed", "x" * 250_000), *[check(f"c{i}", "failed", "y" * 250_000) for i in range(3)]
    )
    code, term = _validate_in_job(fake, recorded, tmp_path, report)
    stored = api.objects[("aicr", "aicr-run-status")]["data"]
    assert isinstance(stored, dict)
    assert stored["phase"] == "Failed"
    assert payload_size(stored) <= CONFIGMAP_BUDGET_BYTES
    assert len(term.encode()) <= 4096
    assert code == 8


def _validate_in_job(fake: Path, recipe: Path, tmp_path: Path, report: dict[str, Any]) -> tuple[int, str]:
    path = tmp_path / "given-ctrf.json"
    path.write_text(json.dumps(report))
    env = clean_env(tmp_path, **VALIDATE, **GATED, AICR_RUNNER_NAMESPACE="aicr", FAKE_AICR_VALIDATE_REPORT=str(path))
    code = main(["validate", "--recipe", str(recipe), "--aicr-binary", str(fake)], environ=env)
    return code, (tmp_path / "termination-log").read_text(encoding="utf-8")


def test_finding_12_control_characters_never_reach_the_one_line_outputs(
    fake: Path, recorded: Path, tmp_path: Path
) -> None:
    hostile = "evil\x1b]0;pwned\x07\x1b[2J\rforged line\nnext"
    report = ctrf(check(hostile, "failed", hostile))
    code, status, term = validate(fake, recorded, tmp_path, report, **GATED)
    assert code == 8
    assert not CONTROL.search(term), term
    assert not CONTROL.search(status["message"])
    summary = (tmp_path / "out" / "aicr-run-status" / "summary.txt").read_text()
    assert "\x1b" not in summary
    assert "\r" not in summary
