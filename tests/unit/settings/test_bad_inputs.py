"""Every bad input gets exit 2, one bounded message naming it, and no traceback.

A generated table: for every ``AICR_RUNNER_*`` setting, values no setting takes
(a trailing line break, control characters, bytes that are not UTF-8, a NUL, an
over-long value) and values its kind does not take (a name that is not DNS-1123,
a URL with a password or port 99999, a JSON list nested 5,000 deep, nan seconds,
...); for every command-line flag, places and files that cannot serve (an output
under /dev/null, a values file with byte 0xff or a YAML alias bomb, ...). Each
case runs in-process through ``cli.main`` (fast); a fixed sample also runs as a
real ``aicr-runner`` process, with the bytes in its real environment and argv.

A setting without a kind here fails ``test_every_setting_has_a_kind``: a new
setting joins the suite when it joins the settings.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aicr_runner import cli
from aicr_runner.errors import ConfigError
from aicr_runner.settings import config

P = config.ENV_PREFIX
#: Most a refusal may print (stdout and stderr together).
MAX_OUTPUT_BYTES = 8192

KINDS: dict[str, str] = {
    "CRITERIA__SERVICE": "criterion",
    "CRITERIA__ACCELERATOR": "criterion",
    "CRITERIA__INTENT": "criterion",
    "CRITERIA__OS": "criterion",
    "CRITERIA__PLATFORM": "criterion",
    "PACK__REF": "pack_ref",
    "PACK__CREDENTIALS_FILE": "path",
    "PACK__PLAIN_HTTP": "bool",
    "PACK__INSECURE_TLS": "bool",
    "PACK__PULL_BUDGET_SECONDS": "seconds",
    "AICR__VERSION": "version",
    "AICR__ARCH": "arch",
    "AICR__SHA256__AMD64": "sha256",
    "AICR__SHA256__ARM64": "sha256",
    "AICR__RELEASE_BASE_URL": "url",
    "AICR__RELEASE_REF": "pack_ref",
    "AICR__BINARY": "path",
    "AICR__BINARY_SHA256": "sha256",
    "AICR__DOWNLOAD_ATTEMPTS": "attempts",
    "AICR__DOWNLOAD_TIMEOUT_SECONDS": "seconds",
    "AICR__DOWNLOAD_BUDGET_SECONDS": "seconds",
    "AICR__PROVENANCE__MODE": "provenance_mode",
    "AICR__PROVENANCE__IDENTITY": "text",
    "AICR__PROVENANCE__ISSUER": "issuer",
    "AICR__PROVENANCE__TRUSTED_ROOT": "path",
    "RECIPE__FLAGS": "flags",
    "RECIPE__ARGS": "args",
    "RECIPE__CONFIGMAP": "name",
    "RECIPE__EXPECT__MIN_COMPONENTS": "count",
    "RECIPE__EXPECT__COMPONENTS": "names",
    "RECIPE__EXPECT__OVERLAYS": "names",
    "BUNDLE__FLAGS": "flags",
    "BUNDLE__ARGS": "args",
    "BUNDLE__STORAGE_CLASS": "subdomain",
    "DEPLOY__FLAGS": "flags",
    "DEPLOY__ARGS": "args",
    "DEPLOY__ENABLED": "bool",
    "DEPLOY__FAIL_ON_COMPONENT_FAILURE": "bool",
    "DEPLOY__HELM_APPLY": "helm_apply",
    "ENVIRONMENT__PREINSTALLED_DRIVER": "bool",
    "LEASE__NAME": "subdomain",
    "LEASE__POD_NAME": "subdomain",
    "LEASE__JOB_NAME": "job_name",
    "LEASE__DURATION_SECONDS": "lease_duration",
    "LEASE__WAIT_SECONDS": "seconds_or_zero",
    "VALIDATE__FLAGS": "flags",
    "VALIDATE__ARGS": "args",
    "VALIDATE__ENABLED": "bool",
    "VALIDATE__PHASES": "phases",
    "VALIDATE__FAIL_ON_ERROR": "bool",
    "VALIDATE__EMIT_EVIDENCE": "bool",
    "VALIDATE__RESULT_CONFIGMAP": "name",
    "VALIDATE__HISTORY_LIMIT": "history",
    "VALIDATE__EVIDENCE_CONFIGMAP": "name",
    "VALIDATE__PUBLISH__ENABLED": "bool",
    "VALIDATE__PUBLISH__MODE": "publish_mode",
    "VALIDATE__PUBLISH__REF": "oci_ref",
    "VALIDATE__PUBLISH__FAIL_ON_ERROR": "bool",
    "VALIDATE__PUBLISH__INSECURE_TLS": "bool",
    "VALIDATE__PUBLISH__PLAIN_HTTP": "bool",
    "VALIDATE__PUBLISH__REGISTRY_CONFIG_DIR": "path",
    "VALIDATE__PUBLISH__IDENTITY_TOKEN_FILE": "path",
    "SNAPSHOT__ENABLED": "bool",
    "SNAPSHOT__IMAGE": "image",
    "SNAPSHOT__PRIVILEGED": "bool",
    "SNAPSHOT__NODE_SELECTOR": "node_selectors",
    "SNAPSHOT__TOLERATIONS": "tolerations",
    "SNAPSHOT__TIMEOUT_SECONDS": "snapshot_timeout",
    "SNAPSHOT__NAMESPACE": "namespace",
    "SNAPSHOT__CONFIGMAP": "name",
    "MIRROR__REGISTRY": "mirror_registry",
    "MIRROR__CHART_REPOSITORY": "optional_url",
    "UPGRADE_CHECK__ACKNOWLEDGE": "moves",
    "UPGRADE_CHECK__ON_UNKNOWN": "unknown_policy",
    "UPGRADE_CHECK__REQUIRE_ASSESSMENT": "bool",
    "REPORTS__API": "reports_api",
    "REPORTS__NAME": "subdomain",
    "REPORTS__RELEASE": "job_name",
    "STATUS_CONFIGMAP": "name",
    "NAMESPACE": "namespace",
    "WORK_DIR": "required_path",
    "LOG_FORMAT": "log_format",
    "TERMINATION_MESSAGE_PATH": "path",
    "SHUTDOWN_GRACE_SECONDS": "seconds_or_zero",
    "KUBE_WRITE_BUDGET_SECONDS": "seconds",
}

#: A value each kind takes (the generic cases spoil it).
VALID: dict[str, str] = {
    "criterion": "h100",
    "pack_ref": "reg.example/acme/pack:1.0",
    "path": "/etc/x",
    "required_path": "/tmp/x",
    "bool": "true",
    "seconds": "5",
    "seconds_or_zero": "5",
    "attempts": "5",
    "history": "20",
    "count": "5",
    "lease_duration": "60",
    "version": "v1.2.0",
    "arch": "amd64",
    "sha256": "a" * 64,
    "url": "https://mirror.example/aicr",
    "issuer": "https://issuer.example",
    "text": "release@example.com",
    "provenance_mode": "off",
    "helm_apply": "auto",
    "publish_mode": "unsigned",
    "log_format": "json",
    "reports_api": "wgpolicy",
    "flags": "--a b",
    "args": '["--a"]',
    "names": '["gpu-operator"]',
    "phases": '["deployment"]',
    "name": "aicr-status",
    "namespace": "aicr",
    "subdomain": "fast.ssd",
    "job_name": "nvidia-aicr-install",
    "oci_ref": "ghcr.io/org/evidence",
    "image": "ghcr.io/nvidia/aicr:v0.11.1",
    "node_selectors": '["nvidia.com/gpu.present=true"]',
    "tolerations": '["nvidia.com/gpu=present:NoSchedule", "dedicated:NoExecute"]',
    "snapshot_timeout": "300",
    "mirror_registry": "mirror.example:5000/aicr",
    "optional_url": "https://charts.mirror.example/aicr",
    "moves": '["gpu-operator:v25.10.1:v26.3.3", "nfd:0.17.3:v0.18.2"]',
    "unknown_policy": "warn",
}
LIST_KINDS = {"args", "names", "phases", "node_selectors", "tolerations", "moves"}
#: JSON lists and flags take whitespace (between items, between flags).
WHITESPACE_KINDS = {*LIST_KINDS, "flags"}

_NAME_BAD = ["UPPER", "a_b", "-a", "a-", "a b", "ñame", "a;rm -rf /", "UPPER;rm -rf /"]
_SECONDS_BAD = ["", "nan", "NaN", "inf", "-inf", "-1", "1e-320", "1e999", "abc", "5s", "1,5", "0x10", "1e5"]
_INT_BAD = ["", "1.5", "abc", "1e3", "0x10", "99999999999999", "nan", "5 ", "+-1", "１"]  # noqa: RUF001 - fullwidth digit
_LIST_BAD = [
    "notjson",
    "[",
    "[" * 5000,
    "[" * 60000,
    '"--a"',
    '{"a": 1}',
    "[1]",
    "[null]",
    "[true]",
    '[["a"]]',
    '[{"a": 1}]',
    '["a\\u0000b"]',
    '["\\udcff"]',
    "[" + '"a",' * 600 + '"a"]',
    "true",
    "1",
    "",
    "[,]",
    '["a",]',
]

SPECIFIC: dict[str, list[str]] = {
    "criterion": ["UPPER", "a b", "a/b", "-x", "x-", "x" * 64, "ñ", "h100;rm -rf /", "$(id)", "a\tb"],
    "pack_ref": [
        "oci://reg.example/acme/pack:1",
        "pack",
        "user:pass@reg.example/acme/pack:1",
        "token@reg.example/acme/pack:1",
        "reg.example/Acme/pack:1",
        "reg.example/acme/pack:-t",
        "reg.example/acme/pack@sha256:abc",
        "reg.example:99999/acme/pack:1",
        "reg.example:0/acme/pack:1",
        "reg example/acme/pack:1",
        "reg.example/",
        "/acme/pack:1",
    ],
    "path": ["relative/x", "./x", "~/x", "x", "../etc/passwd"],
    "required_path": ["", "relative/x", "./x", "~", "."],
    "bool": ["maybe", "2", "", "truee", "true ", "y e s", "null", "[true]"],
    "seconds": [*_SECONDS_BAD, "0", "0.0", "0.0001", "7201"],
    "seconds_or_zero": [*_SECONDS_BAD, "-0.5", "99999999", "0.0005"],
    "attempts": [*_INT_BAD, "0", "21", "-1"],
    "history": [*_INT_BAD, "0", "101", "-1"],
    "count": [*_INT_BAD, "-1", "100001"],
    "lease_duration": [*_INT_BAD, "4", "3601", "0"],
    "version": ["latest", "1.2", "v1.2.0.0", "v1.2.0 ", "1.2.x", "vv1.2.0", "v1.2.0+", "", "v01"],
    "arch": ["x86", "x86_64", "AMD64", "aarch64", "amd64 ", "arm"],
    "sha256": ["abc", "g" * 64, "a" * 63, "a" * 65, "sha256:" + "a" * 64, " " + "a" * 64],
    "url": [
        "",
        "ftp://mirror.example/x",
        "http://",
        "https://",
        "mirror.example/x",
        "//mirror.example/x",
        "http://mir ror.example/x",
        "http://mirror.example/a b",
        "http://mirror.example:99999/x",
        "http://mirror.example:0/x",
        "http://mirror.example:abc/x",
        "http://mirror.example:/x",
        "http://user:PASS@mirror.example/x",
        "http://user@mirror.example/x",
        "https://:PASS@mirror.example/x",
        "http://☃.example/x",
        "http://xn--a.example/x",
        "http://a..b/x",
        "http://-a.example/x",
        "http://" + "a" * 64 + ".example/x",
        "http://mirror.example/x?token=1",
        "http://mirror.example/x#frag",
        "http://[::1/x",
        "http://[zz::1]/x",
        "http://999.1.1.1/x",
        "javascript:alert(1)",
    ],
    "issuer": [
        "",
        "http://issuer.example",
        "https://u:p@issuer.example",
        "https://",
        "issuer.example",
        "https://issuer.example:99999",
        "https://iss uer.example",
    ],
    "text": ["x" * 5000],
    "provenance_mode": ["", "required", "OFF", "none", "warn "],
    # Words, not booleans: "true"/"false" would read as server/client to some, auto to others.
    "helm_apply": ["", "Client", "ssa", "true", "false", "server-side", "auto "],
    "publish_mode": ["", "keyless", "SIGNED", "sign"],
    "log_format": ["", "xml", "JSON", "text", "console "],
    "reports_api": ["", "OpenReports", "policyreport", "auto "],
    "flags": ["--a \x0b b", "--a \x0c b"],
    "args": _LIST_BAD,
    "names": [*_LIST_BAD, '["a\\nb"]', '["a\\u001bb"]'],
    "image": ["Ghcr.io/x", "aicr", "ghcr.io/nvidia/aicr:", "ghcr.io/a b:1", "ghcr.io/nvidia/aicr@sha256:abc", "-x/y"],
    "node_selectors": [*_LIST_BAD, '[""]', '["gpu"]', '["=true"]', '["a=b c"]', '["a=b=c"]', '["a/b/c=d"]'],
    "tolerations": [
        *_LIST_BAD,
        '[""]',
        '["gpu"]',
        '["gpu=true"]',
        '["gpu=true:Never"]',
        '["gpu:noschedule"]',
        '[":NoSchedule"]',
        '["a b:NoSchedule"]',
    ],
    "snapshot_timeout": [*_INT_BAD, "9", "3601", "-1"],
    "moves": [
        *_LIST_BAD,
        '[""]',
        '["nfd"]',
        '["nfd:0.17.3"]',
        '["nfd:0.17.3:v0.18.2:x"]',
        '["NFD:0.17.3:v0.18.2"]',
        '["nfd:0.17.3:v 0.18.2"]',
        '["nfd::v0.18.2"]',
        '["nfd:0.17.3:-v"]',
    ],
    "unknown_policy": ["", "STOP", "ignore", "warn "],
    "phases": [*_LIST_BAD, '["bogus"]', '["Deployment"]', '["deployment", "all"]', "deployment", '["deployment\\n"]'],
    "name": [*_NAME_BAD, "a.b", "x" * 254],
    "namespace": [*_NAME_BAD, "a.b", "x" * 64],
    "subdomain": [*_NAME_BAD, "a..b", ".a", "x" * 254],
    "job_name": [*_NAME_BAD, "x" * 64],
    "mirror_registry": [
        "https://mirror.example/x",
        "oci://mirror.example/x",
        "u:p@mirror.example/x",
        "mirror.example:99999",
        "mirror.example:/x",
        "mirror.example/UPPER",
        "mirror.example/a b",
        "mirror.example/-x",
        "☃.example/x",
        "a..b/x",
    ],
    "oci_ref": [
        "x",
        "oci://ghcr.io/org/x",
        "u:p@ghcr.io/org/x",
        "ghcr.io:99999/org/x",
        "ghcr.io/org/x y",
        "ghcr.io/",
        "☃.io/org/x",
    ],
}

SPECIFIC["optional_url"] = [value for value in SPECIFIC["url"] if value]

#: Spoil any value: (label, how). Line breaks are whitespace in a list or flags.
GENERIC: list[tuple[str, Callable[[str], str], bool]] = [
    ("trailing newline", lambda v: v + "\n", False),
    ("trailing carriage return", lambda v: v + "\r", False),
    ("escape sequence", lambda v: v + "\x1b[31m", True),
    ("byte 0xff (not UTF-8)", lambda v: v + "\udcff", True),
    ("NUL", lambda v: "\x00" + v, True),
    ("DEL", lambda v: v + "\x7f", True),
    ("C1 control", lambda v: v + "\x85", True),
    ("70,000 characters", lambda v: "a" * 70_000, True),
]


@dataclass(frozen=True)
class Case:
    """One bad input: environment, arguments, what the message must name."""

    label: str
    env: dict[str, str] = field(default_factory=dict)
    argv: tuple[str, ...] = ()
    names: str = ""
    #: Files the case needs, written under its tmp_path: relative path -> bytes.
    files: tuple[tuple[str, bytes], ...] = ()
    #: Not in a real environment or argv (a NUL cannot be).
    in_process_only: bool = False


def env_cases() -> list[Case]:
    cases: list[Case] = []
    for short, kind in KINDS.items():
        name = P + short
        valid = VALID[kind]
        for label, spoil, everywhere in GENERIC:
            if not everywhere and kind in WHITESPACE_KINDS:
                continue
            value = spoil(valid)
            cases.append(Case(f"{short}: {label}", {name: value}, names=name, in_process_only="\x00" in value))
        for value in SPECIFIC[kind]:
            cases.append(Case(f"{short}={value[:40]!r}", {name: value}, names=name, in_process_only="\x00" in value))
    for name in (
        f"{P}TYPO",
        f"{P}CRITERIA__SERVCE",
        f"{P}VALIDATE_PHASES",
        f"{P}",
        f"{P}X\udcff",
        "aicr_runner_typo",
        f"{P}AICR__SHA256",
        f"{P}AICR",
    ):
        cases.append(Case(f"unknown {name!r}", {name: "x"}, names=name.encode("ascii", "ignore").decode()))
    cases.append(
        Case("set twice", {f"{P}LOG_FORMAT": "json", "aicr_runner_log_format": "json"}, names=f"{P}LOG_FORMAT")
    )
    return cases


ALIAS_BOMB = (
    b"a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    + b"".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n".encode() for i in range(8))
    + b"accelerator: *i\n"
)


def cli_cases() -> list[Case]:
    plan = ("plan", "--aicr-binary", "/nonexistent/aicr")
    out = ("--output", "{tmp}/plan")
    cases = [
        Case("--output /dev/null", argv=(*plan, "--output", "/dev/null"), names="--output"),
        Case("--output under /dev/null", argv=(*plan, "--output", "/dev/null/x"), names="--output"),
        Case("--output in /proc", argv=(*plan, "--output", "/proc/nope"), names="--output"),
        Case("--output is a file", argv=(*plan, "--output", "{tmp}/file"), names="--output", files=(("file", b"x"),)),
        Case(
            "--output under a file", argv=(*plan, "--output", "{tmp}/file/x"), names="--output", files=(("file", b""),)
        ),
        Case("--output not UTF-8", argv=(*plan, "--output", "{tmp}/\udcff"), names="--output"),
        Case("--output with a newline", argv=(*plan, "--output", "{tmp}/a\nb"), names="--output"),
        Case("--results-dir /dev/null", argv=("run", "--results-dir", "/dev/null"), names="--results-dir"),
        Case("--results-dir in /proc", argv=("run", "--results-dir", "/proc/nope/x"), names="--results-dir"),
        Case("--results-dir not UTF-8", argv=("run", "--results-dir", "{tmp}/r\udcfe"), names="--results-dir"),
        Case("--pack-dir missing", argv=(*plan, *out, "--pack-dir", "{tmp}/nope"), names="--pack-dir"),
        Case(
            "--pack-dir is a file",
            argv=(*plan, *out, "--pack-dir", "{tmp}/file"),
            names="--pack-dir",
            files=(("file", b""),),
        ),
        Case("--aicr-binary not UTF-8", argv=("plan", *out, "--aicr-binary", "/x/\udcff"), names="--aicr-binary"),
        Case("--service upper case", argv=(*plan, *out, "--service", "EKS"), names="--service"),
        Case("--accelerator newline", argv=(*plan, *out, "--accelerator", "h100\n"), names="--accelerator"),
        Case("--os not UTF-8", argv=(*plan, *out, "--os", "ubuntu\udcff"), names="--os"),
        Case("--intent space", argv=(*plan, *out, "--intent", "a b"), names="--intent"),
        Case("--platform long", argv=(*plan, *out, "--platform", "x" * 100), names="--platform"),
        Case("unknown flag", argv=("plan", "--bogus"), names="--bogus"),
        Case("flag without its value", argv=("plan", "--output"), names="--output"),
        Case("unknown command", argv=("frobnicate",), names="frobnicate"),
        Case("WORK_DIR is a file", {f"{P}WORK_DIR": "{tmp}/file"}, (*plan, *out), f"{P}WORK_DIR", (("file", b""),)),
        Case("WORK_DIR /dev/null", {f"{P}WORK_DIR": "/dev/null"}, (*plan, *out), f"{P}WORK_DIR"),
        Case("WORK_DIR under /dev/null", {f"{P}WORK_DIR": "/dev/null/x"}, (*plan, *out), f"{P}WORK_DIR"),
        Case("WORK_DIR in /proc", {f"{P}WORK_DIR": "/proc/nope"}, (*plan, *out), f"{P}WORK_DIR"),
    ]
    values: list[tuple[str, bytes, str]] = [
        ("missing", b"", "--values"),
        ("byte 0xff", b"accelerator: h100\n\xff: x\n", "not valid UTF-8"),
        ("not YAML", b"accelerator: [h100\n", "not valid YAML"),
        ("a list", b"- a\n- b\n", "must be a mapping"),
        ("a scalar", b"h100\n", "must be a mapping"),
        ("alias bomb", ALIAS_BOMB, "alias"),
        ("nested 5000 deep", b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n", "--values"),
        ("typo", b"accelerater: h200\n", "additional properties 'accelerater' not allowed"),
        ("scalar for an object", b"accelerator: h100\naicrDownload: fast\n", "/aicrDownload"),
        ("nan", b"accelerator: h100\naicrDownload: {budgetSeconds: .nan}\n", "JSON"),
        ("wrong type", b"accelerator: h100\nrecipeArgs: [--nodes, 4]\n", "/recipeArgs/1"),
        ("trailing newline in a version", b'accelerator: h100\naicrVersion: "v1.2.0\\n"\n', "/aicrVersion"),
        ("over 1 MiB", b"# " + b"x" * (1024 * 1024 + 10) + b"\n", "larger than"),
        ("a long line of typos", b"".join(f"k{i}: 1\n".encode() for i in range(2000)), "additional properties"),
        ("runtime refuses", b"accelerator: h100\nnamespace: x\nlogFormat: xml\n", "/logFormat"),
        ("an integer of 5000 digits", b"accelerator: h100\na: " + b"1" * 5000 + b"\n", "a value cannot be read"),
        ("a number of 400 digits", b"accelerator: h100\nkubeWriteBudgetSeconds: " + b"9" * 400 + b"\n", "digits)"),
        ("a list key", b"accelerator: h100\n? [a, b]\n: c\n", "not valid YAML"),
        ("a timestamp for a string", b"accelerator: h100\naicrVersion: 2024-01-01\n", "/aicrVersion"),
    ]
    for label, body, names in values:
        files = (("values.yaml", body),) if label != "missing" else ()
        cases.append(
            Case(f"--values {label}", argv=(*plan, *out, "--values", "{tmp}/values.yaml"), names=names, files=files)
        )
    cases.append(Case("--values is a directory", argv=(*plan, *out, "--values", "{tmp}"), names="--values"))
    cases.append(Case("--values /dev/zero", argv=(*plan, *out, "--values", "/dev/zero"), names="larger than"))
    return cases


CASES = env_cases() + cli_cases()
#: Every SUBPROCESS_EVERY-th case also runs as a real process.
SUBPROCESS_EVERY = 25


def base_env(tmp: Path) -> dict[str, str]:
    """A plan that would pass: only the case's input is bad. A case that were
    wrongly accepted fails fast: the preinstalled aicr does not exist (exit 27)."""
    return {
        "PATH": os.environ.get("PATH", ""),
        f"{P}CRITERIA__ACCELERATOR": "h100",
        f"{P}AICR__BINARY": "/nonexistent/aicr",
        f"{P}AICR__PROVENANCE__MODE": "off",
        f"{P}WORK_DIR": str(tmp / "work"),
        f"{P}TERMINATION_MESSAGE_PATH": str(tmp / "termination-log"),
    }


def prepared(case: Case, tmp: Path) -> tuple[list[str], dict[str, str]]:
    for relative, body in case.files:
        (tmp / relative).write_bytes(body)
    argv = [arg.replace("{tmp}", str(tmp)) for arg in case.argv] or ["plan", "--output", str(tmp / "plan")]
    env = base_env(tmp)
    env.update({k: v.replace("{tmp}", str(tmp)) for k, v in case.env.items()})
    return argv, env


def check(case: Case, code: int, out: str) -> None:
    assert code == 2, f"{case.label}: exit {code}\n{out[-2000:]}"
    assert "Traceback" not in out, f"{case.label}:\n{out[-3000:]}"
    shown = out.encode("utf-8", "backslashreplace")
    assert len(shown) <= MAX_OUTPUT_BYTES, f"{case.label}: {len(shown)} bytes of output"
    assert case.names in out, f"{case.label}: {case.names!r} is not named in:\n{out[-2000:]}"


def test_every_setting_has_a_kind() -> None:
    assert set(KINDS) == {name.removeprefix(P) for name in config.env_var_names()}


def test_the_suite_tries_at_least_300_distinct_bad_inputs() -> None:
    distinct = {(tuple(sorted(c.env.items())), c.argv, c.files) for c in CASES}
    assert len(distinct) == len(CASES) >= 300


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_in_process(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv, env = prepared(case, tmp_path)
    try:
        code = cli.main(argv, environ=env)
    except SystemExit as exc:  # argparse refuses unknown flags and commands itself
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    check(case, code, captured.out + captured.err)
    assert not (tmp_path / "plan" / "aicr-run-status").exists(), "nothing ran"


SAMPLE = [c for i, c in enumerate(CASES) if i % SUBPROCESS_EVERY == 0 and not c.in_process_only]


@pytest.mark.parametrize("case", SAMPLE, ids=[c.label for c in SAMPLE])
def test_as_a_real_process(case: Case, tmp_path: Path) -> None:
    argv, env = prepared(case, tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "aicr_runner", *[os.fsencode(a) for a in argv]],
        env={os.fsencode(k): os.fsencode(v) for k, v in env.items()},
        capture_output=True,
        timeout=60,
        check=False,
    )
    out = (result.stdout + result.stderr).decode("utf-8", "backslashreplace")
    check(case, result.returncode, out)


#: Characters a fuzzer should try: controls, non-UTF-8 bytes, quotes, separators.
_AWKWARD = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(["\udcff", "\udc80", "\x00", "\n", "\x1b", "[", "]", '"', "\\", "@", ":", "/", " "]),
    ),
    max_size=40,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(KINDS)), _AWKWARD)
def test_any_value_of_any_setting_is_taken_or_refused_by_name(short: str, value: str) -> None:
    """A property over all settings: a value is taken, or refused with a
    ConfigError whose lines name the variable; nothing else ever escapes."""
    name = P + short
    problems = refusal({f"{P}CRITERIA__ACCELERATOR": "h100", name: value})
    if problems is None:
        return
    assert problems
    assert all(line.startswith(P) for line in problems), problems
    assert all(len(line) <= config.MAX_LINE_CHARS for line in problems)
    if not any(line.startswith(f"{P}CRITERIA__*") for line in problems):
        assert any(name in line for line in problems), problems


def refusal(env: dict[str, str]) -> list[str] | None:
    """The problems ``load`` refuses ``env`` with; None when it takes it."""
    try:
        config.load(env)
    except ConfigError as exc:
        return exc.problems
    return None


_YAMLISH = st.lists(
    st.sampled_from([*"ab01:- \n\t[]{},&*!|>'\"#%@`?.~\\e+", "\x00", "\udcff", "é", "1" * 50, "accelerator: "]),
    max_size=60,
).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=200), _YAMLISH.map(lambda text: text.encode("utf-8", "surrogateescape"))))
def test_any_values_file_is_read_or_refused_with_a_bounded_message(body: bytes) -> None:
    """A property over values files: read (a mapping that meets the schema) or
    refused with ConfigError lines of bounded size; nothing else escapes."""
    import tempfile

    from aicr_runner.settings.values_file import load_values_file

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "values.yaml"
        path.write_bytes(body)
        problems = values_refusal(load_values_file, path)
        if problems is not None:
            assert sum(len(line) for line in problems) <= MAX_OUTPUT_BYTES
            assert problems[0].startswith(f"--values {path}")


def values_refusal(read: Callable[[Path], dict[str, object]], path: Path) -> list[str] | None:
    """The problems a values file is refused with; None when it is read (as a mapping)."""
    try:
        document = read(path)
    except ConfigError as exc:
        return exc.problems
    assert isinstance(document, dict)
    return None
