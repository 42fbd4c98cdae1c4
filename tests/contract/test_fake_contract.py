"""The fake aicr in 0.11 mode (FAKE_AICR_VERSION=0.11.1) against the real aicr v0.11.1.

Other tests trust the fake's 0.11 mode in place of a 0.11 aicr; here the same
inputs go through both and must give the same exit codes, the same log and
output shapes (the completion line, the failure record, verify's report), the
same bundle layout (files, modes, checksums.txt order), the same verify and
deploy.sh behaviour and the same validate verdicts (CTRF report or none, exit
code). The fake's embedded overlays are v1.2.0's, so component
lists differ; everything is compared relative to each one's own recipe (validate
reads one recipe, the real aicr's, in both). A drift fails here.

Found and fixed in the fake when this was written (the real binary disagreed):
`evidence publish ... --push` exits 1 (a root-level flag-parse error), not 3;
usage errors print Go's log line, not a JSON record; unknown criteria values and
"no criteria" exit 8 (INVALID_REQUEST wrapped in INTERNAL), with 0.11's hard-coded
values; thin criteria resolve instead of being refused; recipes are
`aicr.nvidia.com/v1alpha1`; bundles have 0.11's flat layout (`<component>/`,
`undeploy.sh`, checksums.txt in deployment order without recipe.yaml); verify's
text has no `↳` line and a checksum mismatch names both digests; validate takes
`--data`; `--help` lists the flags and criteria values. Later, for validate: a
crashed check exits 0 in 0.11 (the fake failed it), an all-skipped phase is
`passed`, and `--no-cluster` skips every catalog check of the phase, not only
the recipe's.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from aicr_runner.aicr.capabilities import FEATURES, HelpProbe
from aicr_runner.aicr.classify import CtrfVerdict, DeployMarkers, Outcome, classify_ctrf, classify_validate
from aicr_runner.aicr.progress import ComponentTable
from tests.fake_aicr import install_fake_aicr
from tests.support.real_aicr import RealAicr
from tests.support.validator_cluster import Validators, validator_cluster

LEAF = ["--service", "eks", "--accelerator", "h100", "--intent", "training", "--os", "ubuntu"]
_STAMP = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d ")


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_fake_aicr(tmp_path_factory.mktemp("fake-bin"))


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str
    cwd: Path

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stderr.splitlines() if line.startswith("{")]

    def failure(self) -> str:
        """The error of the last ``command failed`` record (JSON or Go's log line)."""
        for line in reversed(self.stderr.splitlines()):
            if line.startswith("{") and json.loads(line).get("msg") == "command failed":
                return str(json.loads(line)["error"])
            if (match := re.search(r'ERROR command failed error="(.*)" exitCode=\d+$', line)) is not None:
                return match.group(1)
        return ""


@dataclass(frozen=True)
class Pair:
    fake: Result
    real: Result


def call(binary: Path, cwd: Path, args: Sequence[str], env: Mapping[str, str]) -> Result:
    cwd.mkdir(parents=True, exist_ok=True)
    base = {"PATH": os.environ["PATH"], "HOME": str(cwd / "home")}
    proc = subprocess.run(
        [str(binary), *args], capture_output=True, text=True, cwd=cwd, env={**base, **env}, check=False, timeout=120
    )
    return Result(proc.returncode, proc.stdout, proc.stderr, cwd)


def both(fake: Path, real: RealAicr, tmp_path: Path, *args: str) -> Pair:
    """The same arguments through the fake (0.11 mode) and the real v0.11.1, each in its own directory."""
    return Pair(
        call(fake, tmp_path / "fake", args, {"FAKE_AICR_VERSION": "0.11.1"}),
        call(real.binary, tmp_path / "real", args, {}),
    )


def shape(text: str) -> list[str]:
    """Lines with what may differ (timestamps, counts, paths, digests) blanked."""
    out = []
    for line in text.splitlines():
        blanked = _STAMP.sub("<time> ", line)
        blanked = re.sub(r"[0-9a-f]{64}", "<sha256>", blanked)
        out.append(re.sub(r"\d+ files", "N files", blanked))
    return out


# -- global, recipe --------------------------------------------------------------------------------


def test_version_line(fake: Path, real_aicr: RealAicr, tmp_path: Path) -> None:
    pair = both(fake, real_aicr, tmp_path, "--version")
    pattern = r"aicr version 0\.11\.1 \(commit: \S+, date: \S+\)\n"
    assert (pair.fake.code, pair.real.code) == (0, 0)
    assert re.fullmatch(pattern, pair.fake.stdout), pair.fake.stdout
    assert re.fullmatch(pattern, pair.real.stdout), pair.real.stdout


def test_help_shows_the_same_capabilities_and_criteria_values(fake: Path, real_aicr: RealAicr, tmp_path: Path) -> None:
    probes = []
    for binary, env in ((fake, {"FAKE_AICR_VERSION": "0.11.1"}), (real_aicr.binary, {})):
        texts = {sub: call(binary, tmp_path, [sub, "--help"], env).stdout for sub in HelpProbe.SUBCOMMANDS}
        probes.append(HelpProbe.read(call(binary, tmp_path, ["--help"], env).stdout, texts))
    fake_probe, real_probe = probes
    assert [fake_probe.has(f.probe) for f in FEATURES] == [real_probe.has(f.probe) for f in FEATURES]
    assert dict(fake_probe.values) == dict(real_probe.values)
    assert {"recipe", "bundle", "verify", "validate"} <= fake_probe.commands <= real_probe.commands
    assert "data" in fake_probe.flags["validate"]
    assert "data" in real_probe.flags["validate"]


def test_recipe_completion_line_and_document_shape(fake: Path, real_aicr: RealAicr, tmp_path: Path) -> None:
    pair = both(fake, real_aicr, tmp_path, "--log-json", "recipe", *LEAF, "--output", "r.yaml")
    assert (pair.fake.code, pair.real.code) == (0, 0)
    completions = [
        next(r for r in result.records() if r["msg"] == "recipe generation completed")
        for result in pair.__dict__.values()
    ]
    assert (
        set(completions[0])
        == set(completions[1])
        == {
            "time",
            "level",
            "msg",
            "module",
            "version",
            "output",
            "components",
            "overlays",
        }
    ), "no componentNames in 0.11"
    assert all(isinstance(c["components"], int) and isinstance(c["overlays"], int) for c in completions)
    docs = [yaml.safe_load((r.cwd / "r.yaml").read_text()) for r in (pair.fake, pair.real)]
    for key in ("kind", "apiVersion"):
        assert docs[0][key] == docs[1][key]
    assert docs[0]["metadata"]["version"] == docs[1]["metadata"]["version"] == "0.11.1"
    assert list(docs[0]["criteria"]) == list(docs[1]["criteria"])
    assert set(docs[0]) == set(docs[1])


def test_thin_criteria_resolve_without_the_dropped_value(fake: Path, real_aicr: RealAicr, tmp_path: Path) -> None:
    thin = ["--service", "eks", "--accelerator", "h100", "--intent", "training", "--os", "rhel"]
    pair = both(fake, real_aicr, tmp_path, "recipe", *thin, "--output", "r.yaml")
    assert (pair.fake.code, pair.real.code) == (0, 0)
    for result in (pair.fake, pair.real):
        doc = yaml.safe_load((result.cwd / "r.yaml").read_text())
        assert doc["criteria"]["os"] == "rhel", "echoed back"
        assert not any("rhel" in name for name in doc["metadata"]["appliedOverlays"])


@pytest.mark.parametrize(
    "args",
    [
        ["--service", "lke", "--accelerator", "h100"],
        ["--accelerator", "h200"],
        ["--service", "eks", "--os", "ol"],
        ["--service", "eks", "--platform", "nim"],
        ["--accelerator", "any"],
    ],
    ids=["service", "accelerator", "os", "platform", "no-criteria"],
)
def test_refused_criteria_exit_8_with_the_same_error(
    fake: Path, real_aicr: RealAicr, tmp_path: Path, args: list[str]
) -> None:
    pair = both(fake, real_aicr, tmp_path, "--log-json", "recipe", *args, "--output", "r.yaml")
    assert (pair.fake.code, pair.real.code) == (8, 8)
    assert pair.fake.failure() == pair.real.failure()
    assert pair.real.failure().startswith("[INTERNAL] error building recipe: [INVALID_REQUEST] ")


def test_a_service_alias_means_any(fake: Path, real_aicr: RealAicr, tmp_path: Path) -> None:
    pair = both(
        fake, real_aicr, tmp_path, "recipe", "--service", "self-managed", "--accelerator", "h100", "-o", "r.yaml"
    )
    assert (pair.fake.code, pair.real.code) == (0, 0)
    for result in (pair.fake, pair.real):
        assert yaml.safe_load((result.cwd / "r.yaml").read_text())["criteria"]["service"] == "any"


# -- bundle, verify -------------------------------------------------------------------------------------


@pytest.fixture
def bundles(fake: Path, real_aicr: RealAicr, tmp_path: Path) -> Pair:
    assert both(fake, real_aicr, tmp_path, "recipe", *LEAF, "--output", "r.yaml").real.code == 0
    pair = both(fake, real_aicr, tmp_path, "--log-json", "bundle", "--recipe", "r.yaml", "--output", "b")
    assert (pair.fake.code, pair.real.code) == (0, 0), pair.fake.stderr + pair.real.stderr
    return pair


def layout(bundle: Path, order: list[str]) -> dict[str, Any]:
    """The bundle's shape relative to its own deployment order: one folder per
    component holding values.yaml and README.md (and manifests/ where the recipe
    names manifest files), checksums.txt listing them in deployment order, then the
    scripts and README, recipe.yaml unlisted."""
    top = sorted(p.name for p in bundle.iterdir() if p.is_file())
    folders = sorted(p.name for p in bundle.iterdir() if p.is_dir())
    contents = [{f.name for f in (bundle / d).iterdir()} for d in folders]
    listed = [line.split("  ", 1)[1] for line in (bundle / "checksums.txt").read_text().splitlines()]
    expected: list[str] = []
    for component in order:
        manifests = bundle / component / "manifests"
        expected += [f"{component}/values.yaml", f"{component}/README.md"]
        expected += sorted(p.relative_to(bundle).as_posix() for p in manifests.iterdir()) if manifests.is_dir() else []
    modes = {p.relative_to(bundle).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in bundle.rglob("*")}
    return {
        "top": top,
        "folders are the components": folders == sorted(order),
        "each folder": all(
            {"values.yaml", "README.md"} <= c <= {"values.yaml", "README.md", "manifests"} for c in contents
        ),
        "listing": listed == [*expected, "README.md", "deploy.sh", "undeploy.sh"],
        "file modes": sorted({oct(m) for n, m in modes.items() if (bundle / n).is_file() and not n.endswith(".sh")}),
        "script modes": sorted({oct(m) for n, m in modes.items() if n.endswith(".sh")}),
        "directory modes": sorted({oct(m) for n, m in modes.items() if (bundle / n).is_dir()}),
    }


def test_bundle_layout(bundles: Pair) -> None:
    shapes = []
    for result in (bundles.fake, bundles.real):
        order = yaml.safe_load((result.cwd / "r.yaml").read_text())["deploymentOrder"]
        shapes.append(layout(result.cwd / "b", order))
        files = sum(1 for p in (result.cwd / "b").rglob("*") if p.is_file())
        assert f"Files generated: {files}\n" in result.stdout, "checksums.txt and recipe.yaml counted"
        assert "Helm per-component bundle generated successfully!" in result.stdout
    assert shapes[0] == shapes[1]
    assert shapes[1] == {
        "top": ["README.md", "checksums.txt", "deploy.sh", "recipe.yaml", "undeploy.sh"],
        "folders are the components": True,
        "each folder": True,
        "listing": True,
        "file modes": ["0o600"],
        "script modes": ["0o755"],
        "directory modes": ["0o755"],
    }
    # Component-specific notes (skyhook selectors) aside, the same start and end records.
    framing = ("generating bundle", "bundle generated")
    fake_msgs = [r["msg"] for r in bundles.fake.records() if r["msg"] in framing]
    assert fake_msgs == [r["msg"] for r in bundles.real.records() if r["msg"] in framing] == list(framing)


@pytest.mark.parametrize(
    ("tamper", "code"),
    [("nothing", 0), ("add a file", 0), ("change a listed file", 4), ("remove a listed file", 4)],
)
def test_verify(fake: Path, real_aicr: RealAicr, bundles: Pair, tamper: str, code: int) -> None:
    for result in (bundles.fake, bundles.real):
        bundle = result.cwd / "b"
        first = (bundle / "checksums.txt").read_text().splitlines()[0].split("  ", 1)[1]
        if tamper == "add a file":
            (bundle / "added-later.yaml").write_text("kind: Surprise\n")
        elif tamper == "change a listed file":
            with (bundle / first).open("a") as handle:
                handle.write("# changed\n")
        elif tamper == "remove a listed file":
            (bundle / first).unlink()
    pair = Pair(
        call(fake, bundles.fake.cwd, ["--log-json", "verify", "b"], {"FAKE_AICR_VERSION": "0.11.1"}),
        call(real_aicr.binary, bundles.real.cwd, ["--log-json", "verify", "b"], {}),
    )
    assert (pair.fake.code, pair.real.code) == (code, code)
    # The same report; the failing file's name differs (different recipes), its wording does not.
    fake_report = [re.sub(r"\S*/\S*", "<file>", line) for line in shape(pair.fake.stdout)]
    real_report = [re.sub(r"\S*/\S*", "<file>", line) for line in shape(pair.real.stdout)]
    assert fake_report == real_report
    if code:
        assert (
            pair.fake.failure().split(":")[0]
            == pair.real.failure().split(":")[0]
            == ("[UNAUTHORIZED] bundle verification failed")
        )


# -- flags and commands 0.11 does not have -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["bundle", "--recipe", "r.yaml", "--output", "b", "--storage-class", "gp3"], 1),
        (["validate", "--recipe", "r.yaml", "--emit-attestation", "ev", "--output", "c.json"], 1),
        (["evidence", "publish", "ev", "--push", "reg.example/acme/evidence", "--yes"], 1),
        (["evidence", "publish", "ev"], 3),
        (["upgrade-check", "--from", "a.yaml", "--to", "b.yaml", "--deployer", "helm", "-t", "json"], 1),
        (["upgrade-check"], 3),
    ],
    ids=[
        "bundle --storage-class",
        "validate --emit-attestation",
        "evidence publish --push",
        "evidence publish",
        "upgrade-check --from",
        "upgrade-check",
    ],
)
def test_what_0_11_lacks(fake: Path, real_aicr: RealAicr, tmp_path: Path, args: list[str], code: int) -> None:
    pair = both(fake, real_aicr, tmp_path, "--log-json", *args)
    assert (pair.fake.code, pair.real.code) == (code, code)
    assert shape(pair.fake.stderr) == shape(pair.real.stderr)
    assert bool(pair.fake.stdout.strip()) == bool(pair.real.stdout.strip()), "root usage printed by both or neither"


# -- validate ---------------------------------------------------------------------------------------------------

#: Snapshots as aicr reads them (``--snapshot``): the recipe's readiness constraints
#: are checked against these readings before any check runs.
SNAPSHOT = {"measurements": [{"type": "K8s", "subtypes": [{"subtype": "server", "data": {"version": "v1.34.1"}}]}]}
DEBIAN = {
    "measurements": [
        *SNAPSHOT["measurements"],
        {"type": "OS", "subtypes": [{"subtype": "release", "data": {"ID": "debian", "VERSION_ID": "12"}}]},
    ]
}


def validate_inputs(real: RealAicr, tmp_path: Path, criteria: list[str], snapshot: dict[str, Any]) -> None:
    """One recipe (the real aicr's, so both read the same checks and constraints)
    and the snapshot, copied into the fake's and the real's working directories."""
    _, recipe = real.recipe(dict(zip(criteria[::2], criteria[1::2], strict=True)))
    for side in ("fake", "real"):
        (tmp_path / side).mkdir(parents=True, exist_ok=True)
        (tmp_path / side / "r.yaml").write_bytes(recipe.read_bytes())
        (tmp_path / side / "snap.yaml").write_text(yaml.safe_dump(snapshot))


def ctrf_of(result: Result) -> dict[str, Any] | None:
    path = result.cwd / "c.json"
    return json.loads(path.read_text()) if path.is_file() else None


def phase_results(result: Result) -> list[tuple[str, str]]:
    return [(r["phase"], r["status"]) for r in result.records() if r["msg"] == "phase result"]


@pytest.mark.parametrize("phases", [["--phase", "deployment"], []], ids=["deployment", "all phases"])
def test_validate_no_cluster_skips_every_catalog_check_and_exits_0(
    fake: Path, real_aicr: RealAicr, tmp_path: Path, phases: list[str]
) -> None:
    """``--no-cluster``: every validator of the catalog's phase is skipped (not only
    the recipe's; the kind recipe lists no deployment check), exit 0: no check ran."""
    validate_inputs(real_aicr, tmp_path, ["service", "kind", "accelerator", "h100", "intent", "training"], SNAPSHOT)
    args = ["--log-json", "validate", "--recipe", "r.yaml", *phases, "--no-cluster", "-s", "snap.yaml", "-o", "c.json"]
    pair = both(fake, real_aicr, tmp_path, *args)
    assert (pair.fake.code, pair.real.code) == (0, 0), (pair.fake.stderr, pair.real.stderr)
    fake_report, real_report = ctrf_of(pair.fake), ctrf_of(pair.real)
    assert fake_report is not None
    assert real_report is not None
    reports = [fake_report, real_report]
    summaries = [{k: v for k, v in r["results"]["summary"].items() if k not in ("start", "stop")} for r in reports]
    assert summaries[0] == summaries[1]
    assert summaries[1]["skipped"] == summaries[1]["tests"] == (4 if phases else 16)
    rows = [[(t["name"], t["status"], t["message"], t["suite"]) for t in r["results"]["tests"]] for r in reports]
    assert rows[0] == rows[1]
    assert phase_results(pair.fake) == phase_results(pair.real)
    assert {status for _, status in phase_results(pair.real)} == {"skipped"}
    verdicts = [classify_ctrf(0, CtrfVerdict.parse(json.dumps(r)), phases=["deployment"]) for r in reports]
    assert [v.outcome for v in verdicts] == [Outcome.INCONCLUSIVE] * 2, "green on exit 0 would be wrong"
    assert verdicts[0].reason == verdicts[1].reason


def test_validate_failed_preflight_exits_8_and_writes_no_ctrf(fake: Path, real_aicr: RealAicr, tmp_path: Path) -> None:
    """A readiness constraint the snapshot breaks: exit 8 (0.11 wraps INVALID_REQUEST
    in INTERNAL), the same error, and no CTRF report: the exit code is the verdict."""
    leaf = ["service", "eks", "accelerator", "h100", "intent", "training", "os", "ubuntu"]
    validate_inputs(real_aicr, tmp_path, leaf, DEBIAN)
    args = ["--log-json", "validate", "--recipe", "r.yaml", "--phase", "deployment", "--no-cluster", "-s", "snap.yaml"]
    pair = both(fake, real_aicr, tmp_path, *args, "-o", "c.json")
    assert (pair.fake.code, pair.real.code) == (8, 8)
    expected = (
        "[INTERNAL] validation failed: [INVALID_REQUEST] readiness check failed: OS.release.ID expected ubuntu, "
        "got debian"
    )
    assert pair.fake.failure() == pair.real.failure() == expected
    assert ctrf_of(pair.fake) is None
    assert ctrf_of(pair.real) is None
    verdict = classify_validate(8, error=pair.real.failure())
    assert verdict.reason.startswith("the readiness pre-flight failed, so no validator ran")


#: The fake's words for what a validator did (tests/fake_aicr/validate.py), given to
#: the stand-in cluster as each validator's termination message.
MESSAGES = {0: "check passed", 2: "no GPU nodes found in the cluster", 137: "validator crashed"}


@pytest.mark.parametrize(
    ("outcome", "validators", "statuses", "phase"),
    [
        ("other", Validators({"operator-health": 137}), ["other", "passed", "passed", "passed"], "other"),
        ("skip", Validators(default=2), ["skipped"] * 4, "passed"),
    ],
    ids=["a crashed check", "every check skipped"],
)
def test_validate_on_a_cluster_exits_0_when_a_check_crashed_or_every_check_skipped(  # noqa: PLR0917 - a table row
    fake: Path,
    real_aicr: RealAicr,
    tmp_path: Path,
    outcome: str,
    validators: Validators,
    statuses: list[str],
    phase: str,
) -> None:
    """0.11 fails a run only on ``failed``: a crashed check (exit 137, status
    ``other``) exits 0, and a phase whose checks all skipped is reported
    ``passed``. The real aicr runs its validator Jobs against a stand-in API
    server (tests/support/validator_cluster.py) that reports each validator's exit code."""
    leaf = ["service", "eks", "accelerator", "h100", "intent", "training", "os", "ubuntu"]
    validate_inputs(real_aicr, tmp_path, leaf, SNAPSHOT)
    args = ["--log-json", "validate", "--recipe", "r.yaml", "--phase", "deployment", "-s", "snap.yaml", "-o", "c.json"]
    validators.messages = MESSAGES
    with validator_cluster(validators, tmp_path / "cluster") as kubeconfig:
        real = call(real_aicr.binary, tmp_path / "real", args, {"KUBECONFIG": str(kubeconfig)})
    fake_run = call(
        fake, tmp_path / "fake", args, {"FAKE_AICR_VERSION": "0.11.1", "FAKE_AICR_VALIDATE_RESULT": outcome}
    )
    assert (fake_run.code, real.code) == (0, 0), (fake_run.stderr[-2000:], real.stderr[-2000:])
    assert sum(r.startswith("PATCH /apis/batch/v1/") for r in validators.requests) == 4, "one Job per check"
    fake_report, real_report = ctrf_of(fake_run), ctrf_of(real)
    assert fake_report is not None
    assert real_report is not None
    for report in (fake_report, real_report):
        results = report["results"]
        assert [t["status"] for t in results["tests"]] == statuses
        counted = {k: v for k, v in results["summary"].items() if k not in ("start", "stop")}
        assert counted == {"tests": 4} | {
            s: statuses.count(s) for s in ("passed", "failed", "skipped", "pending", "other")
        }
    names = [[t["name"] for t in r["results"]["tests"]] for r in (fake_report, real_report)]
    assert names[0] == names[1]
    assert [t["message"] for t in fake_report["results"]["tests"]] == [
        t["message"] for t in real_report["results"]["tests"]
    ], "the CTRF message is the validator's termination message"
    assert phase_results(fake_run) == phase_results(real) == [("deployment", phase)]
    verdict = classify_ctrf(0, CtrfVerdict.parse(json.dumps(real_report)), phases=["deployment"])
    assert verdict.outcome is (Outcome.FAILED if outcome == "other" else Outcome.INCONCLUSIVE), verdict.reason


# -- deploy.sh -------------------------------------------------------------------------------------------------

_MARKERS = (
    (re.compile(r"^Running pre-flight checks\.\.\.$"), None),
    (re.compile(r"^Pre-flight checks passed\.$"), None),
    (re.compile(r"^Deploying Cloud Native Stack components\.\.\.$"), None),
    (re.compile(r"^Installing \S+ \([^)]*\)\.\.\.$"), "Installing <c> (<ns>)..."),
    (re.compile(r"^ERROR: \S+ helm install failed after \d+ attempts$"), "ERROR: <c> helm install failed after N"),
    (re.compile(r"^WARNING: \S+ install failed, continuing \(--best-effort\)$"), "WARNING: <c> continuing"),
    (re.compile(r"^WARNING: the following components failed: \S+$"), "WARNING: the following components failed"),
    (re.compile(r"^Deployment complete\.$"), None),
)


def markers(output: str) -> list[str]:
    """deploy.sh's marker lines, names blanked, repeated installs counted once."""
    found: list[str] = []
    for line in output.splitlines():
        for pattern, as_seen in _MARKERS:
            if pattern.match(line):
                seen = as_seen or line
                if not (found and found[-1] == seen == "Installing <c> (<ns>)..."):
                    found.append(seen)
    return found


def progress(output: str, exit_code: int, order: list[str]) -> list[str]:
    """Each component's status as the runner reads deploy.sh's lines (0.11: no
    per-component result lines), checked to be in the recipe's deployment order."""
    read = DeployMarkers(results_reported=False, components=ComponentTable(total=len(order)))
    for line in output.splitlines():
        read.feed(line)
    read.components.finish(exit_code=exit_code)
    rows = read.components.snapshot()["components"]
    assert [row["name"] for row in rows] == order[: len(rows)]
    return [row["status"] for row in rows]


@pytest.mark.parametrize("best_effort", [True, False], ids=["best-effort", "fail-fast"])
def test_deploy_sh_prints_the_same_markers_and_exits_alike(bundles: Pair, tmp_path: Path, best_effort: bool) -> None:
    """Both bundles' deploy.sh, with a stub helm that fails the first component
    and a kubectl that finds nothing; --retries 0 (no back-off)."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "helm").write_text('#!/bin/sh\n[ "$3" = "$FAIL_RELEASE" ] && exit 1\necho "helm $*"\n')
    (stubs / "kubectl").write_text("#!/bin/sh\nexit 0\n")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    outputs = []
    for result, extra in (
        (bundles.fake, {"FAKE_AICR_VERSION": "0.11.1", "FAKE_AICR_DEPLOY_REAL": "1"}),
        (bundles.real, {}),
    ):
        first = yaml.safe_load((result.cwd / "r.yaml").read_text())["deploymentOrder"][0]
        args = ["--retries", "0", *(["--best-effort"] if best_effort else [])]
        proc = subprocess.run(
            ["bash", str(result.cwd / "b" / "deploy.sh"), *args],
            capture_output=True,
            text=True,
            env={"PATH": f"{stubs}:/usr/bin:/bin", "HOME": str(tmp_path), "FAIL_RELEASE": first, **extra},
            check=False,
            timeout=120,
        )
        outputs.append((proc.returncode, markers(proc.stdout)))
        # The runner's reading of both: the first component failed, the others (under
        # --best-effort) installed, though 0.11 prints no success line.
        order = yaml.safe_load((result.cwd / "r.yaml").read_text())["deploymentOrder"]
        statuses = progress(proc.stdout, proc.returncode, order)
        assert statuses == (["failed"] + ["installed"] * (len(order) - 1) if best_effort else ["failed"]), extra
    assert outputs[0] == outputs[1]
    code, seen = outputs[1]
    assert code == (0 if best_effort else 1)
    assert seen[:5] == [
        "Running pre-flight checks...",
        "Pre-flight checks passed.",
        "Deploying Cloud Native Stack components...",
        "Installing <c> (<ns>)...",
        "ERROR: <c> helm install failed after N",
    ]
