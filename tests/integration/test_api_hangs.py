"""``aicr-runner run`` and ``validate`` as a Job runs them (results to the API),
against API servers that never give a usable answer: one that accepts and never
answers, one that drips its body a byte at a time, one that answers 500 to
everything. The run always ends within its budget, says its status was not
written (exit 26, never a green "Succeeded"), and SIGTERM ends it (143) while a
request hangs. Each run is a process of its own: the signal is real.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.fake_aicr import install_fake_aicr
from tests.integration.test_runs import VALIDATE, clean_env
from tests.support.hostile_server import HostileKubeApi

#: A run that ends at all ends well before (the pending-release check's helm query
#: alone may take its 30 s against a hung API); one that hangs never does.
_NEVER = 300
_BUDGET = "1"


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_fake_aicr(tmp_path_factory.mktemp("fake-bin"))


@pytest.fixture(scope="module")
def recorded(fake: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recipe an install recorded, for ``validate``."""
    tmp = tmp_path_factory.mktemp("install")
    env = clean_env(tmp, **VALIDATE, AICR_RUNNER_DEPLOY__ENABLED="false")
    argv = [sys.executable, "-m", "aicr_runner", "run", "--aicr-binary", str(fake), "--results-dir", str(tmp / "r")]
    subprocess.run(argv, env=env, check=True, capture_output=True, timeout=_NEVER)
    return tmp / "r" / "aicr-recipe" / "recipe.yaml"


@pytest.fixture(params=["hang", "drip", "500"])
def hostile(request: pytest.FixtureRequest) -> Iterator[HostileKubeApi]:
    with HostileKubeApi(request.param) as api:
        yield api


def kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    cluster = {"name": "c", "cluster": {"server": server}}
    user = {"name": "u", "user": {"token": "hostile-test-token"}}
    context = {"name": "c", "context": {"cluster": "c", "user": "u"}}
    config = {"clusters": [cluster], "users": [user], "contexts": [context], "current-context": "c"}
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", **config}))
    return path


@dataclass
class Ended:
    code: int
    termination: str
    log: list[dict[str, object]]


def start(
    command: str, fake: Path, tmp_path: Path, server: str, *extra: str, budget: str = _BUDGET
) -> subprocess.Popen[bytes]:
    env = clean_env(
        tmp_path,
        **VALIDATE,
        KUBECONFIG=str(kubeconfig(tmp_path, server)),
        AICR_RUNNER_NAMESPACE="aicr",
        AICR_RUNNER_KUBE_WRITE_BUDGET_SECONDS=budget,
    )
    env.pop("KUBERNETES_SERVICE_HOST", None)
    argv = [sys.executable, "-m", "aicr_runner", command, "--aicr-binary", str(fake), *extra]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def ended(process: subprocess.Popen[bytes], tmp_path: Path) -> Ended:
    try:
        _, err = process.communicate(timeout=_NEVER)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        last = "\n".join(err.decode(errors="replace").splitlines()[-15:])
        pytest.fail(f"the run did not end within {_NEVER}s: it hangs on the API; its last lines:\n{last}")
    log = [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]
    term = tmp_path / "termination-log"
    return Ended(process.returncode, term.read_text() if term.exists() else "", log)


def test_a_run_against_an_api_that_never_answers_usefully_ends_and_its_last_line_says_no_status(
    fake: Path, tmp_path: Path, hostile: HostileKubeApi
) -> None:
    run = ended(start("run", fake, tmp_path, hostile.url), tmp_path)
    assert run.code == 26, run.termination
    assert run.termination.startswith("Failed (exit 26): "), run.termination
    last = next(e for e in reversed(run.log) if "status" in e)
    assert last["status"] == "not written"
    assert hostile.requests >= 1


def test_validate_against_an_api_that_never_answers_usefully_ends(
    fake: Path, recorded: Path, tmp_path: Path, hostile: HostileKubeApi
) -> None:
    run = ended(start("validate", fake, tmp_path, hostile.url, "--recipe", str(recorded)), tmp_path)
    assert run.code == 26, run.termination
    last = next(e for e in reversed(run.log) if "status" in e)
    assert last["status"] == "not written"
    assert hostile.requests >= 1


@pytest.mark.parametrize("mode", ["hang", "drip"])
def test_sigterm_ends_a_run_whose_api_request_hangs(fake: Path, tmp_path: Path, mode: str) -> None:
    with HostileKubeApi(mode) as api:
        # A budget far beyond the test's patience: only the signal can end the request.
        process = start("run", fake, tmp_path, api.url, budget="3600")
        assert api.requested.wait(_NEVER), "the run never called the API"
        process.send_signal(signal.SIGTERM)
        run = ended(process, tmp_path)
    assert run.code == 143, run.termination
    assert run.termination.startswith("Interrupted") or "(exit 143)" in run.termination, run.termination


def test_a_run_whose_final_status_is_not_written_does_not_claim_success(
    fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 3: every write of the status ConfigMap fails (the rest land): the run
    did its work, but its product, the final status, is missing; exit 26, and its
    last line says the status was not written instead of naming it."""
    from tests.integration.test_failure_event_run import run_in_job
    from tests.support.fakes import FakeKubeApi

    api = FakeKubeApi(fail_names={"aicr-run-status"})
    code, termination = run_in_job(fake, tmp_path, monkeypatch, api)
    assert code == 26, termination
    assert termination.startswith("Failed (exit 26): AICR Job complete; but the run report"), termination
    assert "configmap aicr/aicr-run-status) was not written" in termination
    last = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert (last["exit_code"], last["status"]) == (26, "not written")
    assert ("aicr", "aicr-recipe") in api.objects, "the other results were written"
