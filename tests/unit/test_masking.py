"""No user or password of a URL or registry reference is ever printed or written.

A password can hold any character, ``/ ? # @ : %`` included: a mask that
stops at the first ``/`` shows the rest, and a check that reads a part of the
password as a port quotes it (``port 'pa' must be a number``). Here: the
masking on its own (a property over any userinfo), the refusals of issue 26
one by one, and a property over every URL and reference setting, each way it
can be given (environment, ``plan --values``, flags, ``plan`` and ``run``): the
secret is in none of stdout, stderr, the termination message, the ConfigMaps
and Events, and the files the run wrote.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from aicr_runner import cli, wiring
from aicr_runner.masking import MARKER, has_userinfo, mask_userinfo

P = "AICR_RUNNER_"
#: What the properties look for: letters and digits only, so no escaping or
#: percent-encoding of the characters around it can change it.
CANARY = "Zq7CanaryXk9"
DIGEST = "sha256:" + "ab" * 32
JOB = "nvidia-aicr-0123456789"

#: Any character: controls, separators, '@', quotes, '%', bytes that were not UTF-8 (PEP 383).
ANY_CHARS = st.lists(
    st.one_of(
        st.characters(),
        st.sampled_from([*"/?#@:%[]'\"\\ \t\n=~", "%40", "%2F", "@sha256:", "://", "\udcff", "\x00"]),
    ),
    max_size=12,
).map("".join)
#: The same, as a values file can hold them (YAML has no lone surrogates, no NUL in a plain file).
YAML_CHARS = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=12)


def userinfo(chars: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """``user:password`` (or a token alone) with the canary in the password, percent-encoded or not."""

    def build(user: str, before: str, after: str, colon: bool, encoded: bool) -> str:
        password = f"{before}{CANARY}{after}"
        if encoded:
            # As a URL carries it: UTF-8 bytes percent-encoded (a byte that was not UTF-8 as that byte).
            user, password = (
                urllib.parse.quote(part.encode("utf-8", "surrogatepass"), safe="") for part in (user, password)
            )
        return f"{user}:{password}" if colon else password

    return st.builds(build, chars, chars, chars, st.booleans(), st.booleans())


# -- the mask on its own ------------------------------------------------------------------------

SCHEMES = ["https://", "http://", "HTTPS://", "oci://", "ftp://", ""]
HOSTS = ["mirror.example", "127.0.0.1:5000", "[::1]:8443", "reg.example:99999", "h"]
PATHS = ["", "/r", "/org/pack:1.0", f"/org/pack@{DIGEST}", "/a b", "/x?y#z", ":abc"]


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(SCHEMES), userinfo(ANY_CHARS), st.sampled_from(HOSTS), st.sampled_from(PATHS))
@example("https://", "user:pa/ss", "mirror.example", "/r")
@example("https://", "user:pa#ss", "mirror.example", "/r")
@example("", "user:pk/S3cret", "registry.example", "/org/pack:1.0")
@example("", f"ab://{CANARY}", "h", "")  # a user name and password that read like a scheme
def test_the_mask_leaves_no_character_of_the_userinfo_whatever_it_holds(
    scheme: str, info: str, host: str, path: str
) -> None:
    url = f"{scheme}{info}@{host}{path}"
    masked = mask_userinfo(url)
    assert has_userinfo(url)
    assert CANARY not in masked
    # Exactly the userinfo goes: what follows the last '@' stays (a path without '@', or a digest),
    # and a known scheme in front (which the userinfo may spell: a user 'https', a password '//...').
    kept = next((url[: len(s)] for s in ("https://", "http://", "oci://") if url.lower().startswith(s)), "")
    assert masked == f"{kept}{MARKER}@{host}{path}"


@pytest.mark.parametrize(
    ("value", "masked"),
    [
        ("https://mirror.example/r", "https://mirror.example/r"),
        (f"reg.example/org/pack@{DIGEST}", f"reg.example/org/pack@{DIGEST}"),
        (f"u:p@reg.example/org/pack@{DIGEST}", f"***@reg.example/org/pack@{DIGEST}"),
        ("https://u:p@h/a@b", "https://***@b"),  # an '@' in the path: masked further, never less
        ("release@example.com", "***@example.com"),
        ("/plain/path", "/plain/path"),
    ],
)
def test_what_the_mask_keeps(value: str, masked: str) -> None:
    assert mask_userinfo(value) == masked


# -- issue 26, item 1: the cases one by one ---------------------------------------------------------


@dataclass
class Outcome:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


def base_env(tmp: Path) -> dict[str, str]:
    """A plan that would pass but for the case's input; a value wrongly taken fails
    fast (the preinstalled aicr does not exist: exit 27)."""
    return {
        "PATH": os.environ.get("PATH", ""),
        f"{P}CRITERIA__ACCELERATOR": "h100",
        f"{P}AICR__BINARY": "/nonexistent/aicr",
        f"{P}AICR__PROVENANCE__MODE": "off",
        f"{P}WORK_DIR": str(tmp / "work"),
        f"{P}TERMINATION_MESSAGE_PATH": str(tmp / "termination-log"),
    }


def run_main(argv: list[str], env: dict[str, str]) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv, environ=env)
    return Outcome(code, out.getvalue(), err.getvalue())


def plan_with_values(tmp: Path, values: dict[str, object]) -> Outcome:
    (tmp / "values.yaml").write_text(yaml.safe_dump({"accelerator": "h100", **values}, allow_unicode=True))
    argv = ["plan", "--output", str(tmp / "plan"), "--values", str(tmp / "values.yaml")]
    return run_main(argv, base_env(tmp))


ISSUE_ENV_CASES = [
    (
        f"{P}AICR__RELEASE_BASE_URL",
        "https://user:pa/ss@mirror.example/r",
        ["pa/ss", "'pa'"],
        "https://***@mirror.example/r",
    ),
    (
        f"{P}AICR__RELEASE_BASE_URL",
        "https://user:pa#ss@mirror.example/r",
        ["pa#ss", "'pa'"],
        "https://***@mirror.example/r",
    ),
    (
        f"{P}PACK__REF",
        "user:pk/S3cret@registry.example/org/pack:1.0",
        ["S3cret", "pk/", "'pk'"],
        "***@registry.example/org/pack:1.0",
    ),
    (
        f"{P}AICR__PROVENANCE__ISSUER",
        "https://user:pa?ss@issuer.example",
        ["pa?ss", "'pa'"],
        "https://***@issuer.example",
    ),
    (
        f"{P}VALIDATE__PUBLISH__REF",
        "user:pk/S3cret@registry.example/org/evidence",
        ["S3cret", "pk/"],
        "***@registry.example/org/evidence",
    ),
]


@pytest.mark.parametrize(("name", "value", "secrets", "masked"), ISSUE_ENV_CASES)
def test_a_password_holding_a_slash_query_or_fragment_mark_is_masked_in_the_refusal(
    name: str, value: str, secrets: list[str], masked: str, tmp_path: Path
) -> None:
    result = run_main(["plan", "--output", str(tmp_path / "plan")], {**base_env(tmp_path), name: value})
    assert result.code == 2, result.text
    for secret in secrets:
        assert secret not in result.text
    assert f"{name}='{masked}': " in result.err
    assert "credentials in the" in result.err
    assert "are refused" in result.err
    assert len(result.err.splitlines()) == 1


ISSUE_VALUES_CASES = [
    ({"aicrReleaseBaseUrl": "user:password@mirror.example/r"}, "/aicrReleaseBaseUrl", "'***@mirror.example/r'"),
    ({"aicrReleaseBaseUrl": "ftp://user:password@mirror.example/r"}, "/aicrReleaseBaseUrl", "'***@mirror.example/r'"),
    ({"dataPack": "user:password@registry.example/org/pack:1.0"}, "/dataPack", "'***@registry.example/org/pack:1.0'"),
    ({"aicrProvenance": {"issuer": "http://user:password@issuer.example"}}, "/aicrProvenance/issuer", "'http://***@"),
    ({"validate": {"publish": {"ref": "user:password@reg.example/org/x"}}}, "/validate/publish/ref", "'***@reg.ex"),
    ({"aicrReleaseBaseUrl": ["https://user:password@mirror.example/r"]}, "/aicrReleaseBaseUrl", "got array ***@mirror"),
]


@pytest.mark.parametrize(("values", "where", "masked"), ISSUE_VALUES_CASES)
def test_a_schema_error_in_a_values_file_masks_the_value_it_quotes(
    values: dict[str, object], where: str, masked: str, tmp_path: Path
) -> None:
    result = plan_with_values(tmp_path, values)
    assert result.code == 2, result.text
    assert "password" not in result.text
    assert "values don't meet the specifications of the schema" in result.err
    assert f"- at '{where}': {masked}" in result.err


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"aicr": {"releaseBaseUrl": "https://user:pa/ss@mirror.example/r"}}, "aicr.releaseBaseUrl"),
        # An earlier name is read under its new one (docs/configuration.md "Renamed values").
        ({"aicrReleaseBaseUrl": "https://user:pa/ss@mirror.example/r"}, "aicr.releaseBaseUrl"),
        ({"pack": {"ref": "pa/ss@reg.example/org/p:1"}}, "pack.ref"),
        ({"dataPack": "pa/ss@reg.example/org/p:1"}, "pack.ref"),
    ],
)
def test_a_value_the_schema_takes_is_masked_when_the_settings_refuse_it(
    values: dict[str, object], key: str, tmp_path: Path
) -> None:
    result = plan_with_values(tmp_path, values)
    assert result.code == 2, result.text
    assert "pa/ss" not in result.text
    assert "'pa'" not in result.text
    assert f"(from --values key {key})" in result.err
    assert "***@" in result.err


def test_a_yaml_error_does_not_quote_the_line_it_found_it_on(tmp_path: Path) -> None:
    """PyYAML's message carries a snippet of the document: the line may hold a password."""
    (tmp_path / "values.yaml").write_text(
        'accelerator: h100\naicrReleaseBaseUrl: "https://user:password@mirror.example/r"\ndataPack: [x\n'
    )
    argv = ["plan", "--output", str(tmp_path / "plan"), "--values", str(tmp_path / "values.yaml")]
    result = run_main(argv, base_env(tmp_path))
    assert result.code == 2, result.text
    assert "password" not in result.text
    assert "not valid YAML (" in result.err
    assert "at line 4, column 1" in result.err


def test_a_yaml_tag_holding_a_password_is_masked(tmp_path: Path) -> None:
    (tmp_path / "values.yaml").write_text("accelerator: h100\ndataPack: !<tag:user:pa/ss@h> x\n")
    argv = ["plan", "--output", str(tmp_path / "plan"), "--values", str(tmp_path / "values.yaml")]
    result = run_main(argv, base_env(tmp_path))
    assert result.code == 2, result.text
    assert "pa/ss" not in result.text
    assert "'***@h'" in result.err


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["plan", "--bogus=https://user:pa/ss@h/x"], "--bogus=https://***@h/x"),
        (["plan", "user:pa/ss@reg.example/x"], "***@reg.example/x"),
        (["user:pa/ss@reg.example/x"], "invalid choice: '***@reg.example/x'"),
    ],
)
def test_an_argument_the_command_line_refuses_is_masked(argv: list[str], shown: str, tmp_path: Path) -> None:
    result = run_main(argv, base_env(tmp_path))
    assert result.code == 2, result.text
    assert "pa/ss" not in result.text
    assert shown in result.err
    assert result.err.startswith("usage: aicr-runner")


def test_a_flag_value_and_the_values_path_are_masked(tmp_path: Path) -> None:
    result = run_main(
        ["plan", "--output", str(tmp_path / "plan"), "--service", "https://user:pa/ss@h"], base_env(tmp_path)
    )
    assert result.code == 2
    assert "pa/ss" not in result.text
    assert f"{P}CRITERIA__SERVICE='https://***@h'" in result.err
    assert "(from --service)" in result.err
    values = str(tmp_path / "user:pa" / "ss@h" / "v.yaml")
    result = run_main(["plan", "--output", str(tmp_path / "plan"), "--values", values], base_env(tmp_path))
    assert result.code == 2
    assert "pa/ss" not in result.text
    assert "--values ***@h/v.yaml" in result.err


# -- the property: every URL and reference setting, every way in, every output ------------------------

#: Every setting that holds a URL or a registry reference: its value key, and how a value is built.
URL_SETTINGS = {
    "AICR__RELEASE_BASE_URL": ("aicrReleaseBaseUrl", ["https://", "http://", "ftp://", ""], "mirror.example/r"),
    "AICR__PROVENANCE__ISSUER": ("aicrProvenance.issuer", ["https://", "http://", ""], "issuer.example"),
    "PACK__REF": ("dataPack", ["", "oci://"], "reg.example:5000/org/pack:1.0"),
    "VALIDATE__PUBLISH__REF": ("validate.publish.ref", ["", "oci://"], "reg.example/org/evidence"),
}
MODES = ["plan", "run --results-dir", "run in a Job"]


def nested(dotted: str, value: str) -> dict[str, object]:
    head, _, rest = dotted.partition(".")
    return {head: nested(rest, value) if rest else value}


@dataclass
class Everything:
    """Every place a run can leave text: its output and what it wrote."""

    outcome: Outcome
    files: dict[str, bytes]
    kube: str

    def holding(self, secret: str) -> list[str]:
        found = [name for name, body in self.files.items() if secret.encode() in body]
        found += [where for where, text in (("output", self.outcome.text), ("kube", self.kube)) if secret in text]
        return found


def run_everywhere(tmp: Path, mode: str, env: dict[str, str], argv_extra: list[str]) -> Everything:
    from tests.support.fakes import FakeKubeApi

    api = FakeKubeApi(job_labels={("aicr", JOB): {"helm.toolkit.fluxcd.io/name": "aicr"}})
    env = {**base_env(tmp), f"{P}NAMESPACE": "aicr", f"{P}LEASE__JOB_NAME": JOB, **env}
    argv = {
        "plan": ["plan", "--output", str(tmp / "plan")],
        "run --results-dir": ["run", "--results-dir", str(tmp / "results")],
        "run in a Job": ["run"],
    }[mode]
    with mock.patch.object(wiring, "_make_api", return_value=api):
        outcome = run_main([*argv, *argv_extra], env)
    files = {str(p): p.read_bytes() for p in tmp.rglob("*") if p.is_file() and p.name != "values.yaml"}
    return Everything(outcome, files, repr(api.objects) + repr(api.events))


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(URL_SETTINGS)),
    st.sampled_from(MODES),
    st.data(),
)
def test_no_userinfo_of_any_url_or_reference_setting_reaches_any_output(
    short: str, mode: str, data: st.DataObject
) -> None:
    key, schemes, rest = URL_SETTINGS[short]
    via_values = mode == "plan" and data.draw(st.booleans(), label="via --values")
    info = data.draw(userinfo(YAML_CHARS if via_values else ANY_CHARS), label="userinfo")
    value = f"{data.draw(st.sampled_from(schemes), label='scheme')}{info}@{rest}"
    with scratch() as tmp:
        if via_values:
            (tmp / "values.yaml").write_text(yaml.safe_dump(nested(key, value), allow_unicode=True))
            found = run_everywhere(tmp, mode, {}, ["--values", str(tmp / "values.yaml")])
        else:
            found = run_everywhere(tmp, mode, {P + short: value}, [])
    assert found.outcome.code == 2, found.outcome.text
    assert found.holding(CANARY) == [], found.outcome.text
    assert "***@" in found.outcome.err, found.outcome.err


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["--service", "--accelerator", "--os", "--intent", "--platform", "--bogus"]), st.data())
def test_no_userinfo_given_as_a_flag_reaches_any_output(flag: str, data: st.DataObject) -> None:
    value = f"{data.draw(st.sampled_from(SCHEMES))}{data.draw(userinfo(ANY_CHARS))}@h/x"
    with scratch() as tmp:
        found = run_everywhere(tmp, "plan", {}, [f"{flag}={value}"])
    assert found.outcome.code == 2, found.outcome.text
    assert found.holding(CANARY) == [], found.outcome.text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["--aicr-binary", "--output", "--pack-dir", "--values"]),
    st.sampled_from(["https://", "http://", "oci://", "ftp://"]),
    st.data(),
)
def test_a_url_given_as_a_path_flag_is_refused_and_masked(flag: str, scheme: str, data: st.DataObject) -> None:
    """Taken as a path, a URL would be printed whole by every message naming the path."""
    value = f"{scheme}{data.draw(userinfo(ANY_CHARS))}@h/x"
    with scratch() as tmp:
        found = run_everywhere(tmp, "plan", {}, [f"{flag}={value}"])
    assert found.outcome.code == 2, found.outcome.text
    assert found.holding(CANARY) == [], found.outcome.text
    assert f"invalid setting: {flag}='" in found.outcome.err
    assert "a URL, not a path" in found.outcome.err


def test_a_url_given_as_the_results_directory_of_a_run_is_refused(tmp_path: Path) -> None:
    result = run_main(["run", "--results-dir", "https://user:pa/ss@h/results"], base_env(tmp_path))
    assert result.code == 2, result.text
    assert "pa/ss" not in result.text
    assert result.err == (
        "aicr-runner: invalid setting: --results-dir='***@h/results': a URL, not a path; give a local file or "
        "directory (download an aicr release or a pack first)\n"
    )


def test_a_reference_parsed_outside_the_settings_refuses_userinfo_before_quoting_a_part() -> None:
    from aicr_runner.net.reference import InvalidReference, PackReference

    with pytest.raises(InvalidReference) as caught:
        PackReference.parse("user:pk/S3cret@registry.example/org/pack:1.0")
    assert "S3cret" not in str(caught.value)
    assert "pk" not in str(caught.value)
    assert "a user or password (refused" in str(caught.value)


def test_a_real_process_masks_a_password_with_a_slash_and_a_byte_that_is_not_utf8(tmp_path: Path) -> None:
    """The same through a real environment (bytes) and a real stderr."""
    import subprocess
    import sys

    env = {os.fsencode(k): os.fsencode(v) for k, v in base_env(tmp_path).items()}
    env[b"PYTHONPATH"] = os.fsencode(os.pathsep.join(sys.path))
    env[f"{P}AICR__RELEASE_BASE_URL".encode()] = b"https://user:pa/\xff" + CANARY.encode() + b"#x@mirror.example/r"
    result = subprocess.run(
        [sys.executable, "-m", "aicr_runner", "plan", "--output", str(tmp_path / "plan")],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert CANARY.encode() not in result.stdout + result.stderr
    assert b"AICR_RUNNER_AICR__RELEASE_BASE_URL='https://***@mirror.example/r': " in result.stderr
    assert [p for p in tmp_path.rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()] == []
