"""A credential in the release mirror URL is refused, and shown nowhere.

``AICR_RUNNER_AICR__RELEASE_BASE_URL=http://user:PASS@host/x`` used to put PASS in
log lines, report.json, summary.txt and the termination message. The runner now
refuses a URL with a user or password (exit 2, before anything runs): the one
line that says so masks them, and it points at what to do instead. The chart
has no Secret for a mirror login; a mirror inside the cluster needs none, or the
image's aicr is given with aicrBinary.path.

Every output is checked for the password, in every way the runner can run: the
pod log (stdout and stderr; with terminationMessagePolicy FallbackToLogsOnError
it is also the termination message), the termination-message file, the run
report and summary (results directory or ConfigMaps), Events, the work
directory, and a real process's output.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aicr_runner import wiring
from aicr_runner.cli import main
from tests.integration.test_runs import clean_env
from tests.support.fakes import FakeKubeApi

PASSWORD = "S3cr3t-PASS-x9"
JOB = "nvidia-aicr-0123456789"
URLS = [
    f"http://user:{PASSWORD}@127.0.0.1:9/x",
    f"https://user:{PASSWORD}@mirror.example/releases",
    f"https://:{PASSWORD}@mirror.example/releases",
    f"https://{PASSWORD}@mirror.example/releases",  # a token as the user name
    f"HTTP://user:{PASSWORD}@mirror.example:8443/releases/",
    f"http://user:{PASSWORD}@mirror.example/a b",  # and another problem
    f"http://user:{PASSWORD}@mirror.example:99999/x",
]


def files_holding(root: Path, secret: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def assert_refused_and_masked(code: int, output: str, tmp_path: Path) -> None:
    assert code == 2, output[-2000:]
    assert PASSWORD not in output
    assert "AICR_RUNNER_AICR__RELEASE_BASE_URL='" in output
    assert "***@" in output, "the refusal shows where the credential was, masked"
    assert files_holding(tmp_path, PASSWORD) == [], "no file the run wrote holds it"


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("mode", ["plan", "run --results-dir", "run in a Job"])
def test_a_credential_in_the_mirror_url_is_refused_and_shown_nowhere(
    mode: str,
    url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = FakeKubeApi(job_labels={("aicr", JOB): {"helm.toolkit.fluxcd.io/name": "aicr"}})
    monkeypatch.setattr(wiring, "_make_api", lambda *_: api)
    env = clean_env(
        tmp_path,
        AICR_RUNNER_AICR__RELEASE_BASE_URL=url,
        AICR_RUNNER_NAMESPACE="aicr",
        AICR_RUNNER_LEASE__JOB_NAME=JOB,
        AICR_RUNNER_LEASE__POD_NAME=f"{JOB}-abcde",
    )
    argv = {
        "plan": ["plan", "--output", str(tmp_path / "plan")],
        "run --results-dir": ["run", "--results-dir", str(tmp_path / "results")],
        "run in a Job": ["run"],
    }[mode]
    code = main(argv, environ=env)
    captured = capsys.readouterr()
    assert_refused_and_masked(code, captured.out + captured.err, tmp_path)
    assert "credentials in the URL are refused" in captured.err or "a space at position" in captured.err
    termination = tmp_path / "termination-log"
    assert not termination.exists() or PASSWORD not in termination.read_text()
    assert PASSWORD not in repr(api.objects), "no ConfigMap (run report, summary) holds it"
    assert PASSWORD not in repr(api.events), "no Event holds it"


def test_the_refusal_says_what_to_do_instead(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = clean_env(tmp_path, AICR_RUNNER_AICR__RELEASE_BASE_URL=URLS[1])
    assert main(["plan", "--output", str(tmp_path / "plan")], environ=env) == 2
    assert capsys.readouterr().err == (
        "aicr-runner: invalid setting: AICR_RUNNER_AICR__RELEASE_BASE_URL='https://***@mirror.example/releases': "
        "credentials in the URL are refused (they would show in logs and reports); serve the release mirror "
        "without a login inside the cluster, or give a preinstalled aicr (chart aicr.binary.path, env "
        "AICR_RUNNER_AICR__BINARY, plan --aicr-binary)\n"
    )


def test_a_real_process_prints_no_credential_in_either_log_format(tmp_path: Path) -> None:
    for log_format in ("console", "json"):
        env = clean_env(tmp_path, AICR_RUNNER_AICR__RELEASE_BASE_URL=URLS[0], AICR_RUNNER_LOG_FORMAT=log_format)
        result = subprocess.run(
            [sys.executable, "-m", "aicr_runner", "run", "--results-dir", str(tmp_path / "results")],
            env={**env, "PYTHONPATH": os.pathsep.join(sys.path)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert_refused_and_masked(result.returncode, result.stdout + result.stderr, tmp_path)


def test_a_credential_in_the_pack_or_evidence_reference_is_refused_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in (
        ("AICR_RUNNER_PACK__REF", f"user:{PASSWORD}@reg.example/acme/pack:1.0"),
        ("AICR_RUNNER_VALIDATE__PUBLISH__REF", f"user:{PASSWORD}@reg.example/acme/evidence"),
        ("AICR_RUNNER_AICR__PROVENANCE__ISSUER", f"https://user:{PASSWORD}@issuer.example"),
    ):
        code = main(["plan", "--output", str(tmp_path / "plan")], environ=clean_env(tmp_path, **{name: value}))
        err = capsys.readouterr().err
        assert code == 2, err
        assert PASSWORD not in err
        assert f"{name}='" in err
        assert "***@" in err
        assert "refused" in err
