"""``mirror``'s own flags: refused before any step runs, one line naming the flag, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from aicr_runner.cli import main


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    env = {"HOME": str(tmp_path), "PATH": "/nonexistent"}  # no aicr, helm or oras: nothing may start
    code = main(["mirror", "--accelerator", "h100", "--work-dir", str(tmp_path / "w"), *flags], environ=env)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (
            ["--to", "https://m.example/air"],
            "aicr-runner: invalid setting: --to='https://m.example/air': must be oci://<registry>[/<prefix>], "
            "like oci://mirror.example.com:5000/aicr",
        ),
        (
            ["--to", "oci://"],
            "aicr-runner: invalid setting: --to='oci://': must be oci://<registry>[/<prefix>], "
            "like oci://mirror.example.com:5000/aicr",
        ),
        (
            ["--to", "oci://m.example:99999/air"],
            "aicr-runner: invalid setting: --to='oci://m.example:99999/air': port '99999' must be a number "
            "from 1 to 65535",
        ),
        (
            ["--to", "oci://m.example/Air"],
            "aicr-runner: invalid setting: --to='oci://m.example/Air': the path 'Air' must be lowercase "
            "repository path components (a-z, 0-9, '.', '_', '-')",
        ),
    ],
)
def test_a_bad_target_is_refused_by_name(
    flags: list[str], line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _run(tmp_path, capsys, *flags)
    assert (code, err.strip()) == (2, line)


def test_a_missing_registry_config_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.json"
    code, err = _run(tmp_path, capsys, "--to", "oci://m.example", "--registry-config", str(missing))
    assert (code, err.strip()) == (2, f"aicr-runner: invalid setting: --registry-config='{missing}': no such file")


def test_list_or_to_one_of_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(tmp_path, capsys, "--list", "--to", "oci://m.example")
    assert code == 2
    assert "not allowed with argument" in err
    code, err = _run(tmp_path, capsys)
    assert code == 2
    assert "one of the arguments --list --to --to-archive is required" in err


def test_hosts_toml_needs_a_mirror(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(tmp_path, capsys, "--list", "--hosts-toml", str(tmp_path / "h"))
    assert (code, err.strip()) == (
        2,
        f"aicr-runner: invalid setting: --hosts-toml='{tmp_path / 'h'}': needs --to (the mirror it names)",
    )


def test_from_archive_needs_a_file_and_a_mirror(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "a.tar"
    code, err = _run(tmp_path, capsys, "--to", "oci://m.example", "--from-archive", str(missing))
    assert (code, err.strip()) == (2, f"aicr-runner: invalid setting: --from-archive='{missing}': no such file")
    missing.write_bytes(b"")
    code, err = _run(tmp_path, capsys, "--list", "--from-archive", str(missing))
    assert (code, err.strip()) == (
        2,
        f"aicr-runner: invalid setting: --from-archive='{missing}': needs --to (where it goes)",
    )


def test_a_url_for_a_path_flag_is_refused_under_the_flags_own_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"HOME": str(tmp_path), "PATH": "/nonexistent"}
    code = main(["mirror", "--list", "--accelerator", "h100", "--work-dir", "https://u:pw@h.example/w"], environ=env)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("aicr-runner: invalid setting: --work-dir=")
    assert "pw" not in err


@pytest.mark.parametrize(
    "rule", ["nvcr.io:443", "nvcr.io:443:mirror.example", "nvcr.io:0:10.0.0.5", "nvcr.io:443:10.0.0.5:70000"]
)
def test_a_bad_resolve_rule_is_refused_by_name(rule: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(tmp_path, capsys, "--to", "oci://m.example", "--resolve", rule)
    assert (code, err.strip()) == (
        2,
        f"aicr-runner: invalid setting: --resolve='{rule}': must be HOST:PORT:ADDRESS[:PORT], like "
        "nvcr.io:443:10.0.0.5 or nvcr.io:443:10.0.0.5:8443",
    )


def test_resolve_rules_reach_every_oras_call_on_either_side() -> None:
    """The rules go to oras for source and target references alike (oras applies a
    rule only to the host it names); never to an OCI layout, which has no host."""
    import argparse

    from aicr_runner.mirror.arguments import add_options, request_from
    from aicr_runner.mirror.command import _copier

    parser = argparse.ArgumentParser()
    add_options(parser)
    rules = ["nvcr.io:80:127.0.0.1:5000", "quay.io:443:10.0.0.5"]
    args = parser.parse_args(["--to", "oci://m.example", *(w for r in rules for w in ("--resolve", r))])
    request = request_from(args, {})
    assert request.resolve == tuple(rules)
    copier = _copier(request, lambda: False)
    resolve = ["--from-resolve", rules[0], "--from-resolve", rules[1]]
    assert copier._flags("nvcr.io/nvidia/gpu-operator:v25.10.1", "from-") == resolve
    assert copier._flags("m.example/nvcr.io/nvidia/gpu-operator:v25.10.1") == [w.replace("from-", "") for w in resolve]
    assert copier._flags("oci-layout:/tmp/l:t", "from-") == ["--from-oci-layout"]
