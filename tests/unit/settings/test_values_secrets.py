"""Issue 35 finding 11 (settings): ``plan --values`` names the secret-bearing key and
what is wrong with it, never its value, whatever the value's type."""

from __future__ import annotations

from pathlib import Path

import pytest

from aicr_runner.errors import ConfigError
from aicr_runner.settings.values_file import load_values_file

TOKEN = "c2VjcmV0LXRva2VuLXh5eg"  # what must never be printed
DOCKERCONFIG = '{"auths":{"nvcr.io":{"auth":"' + TOKEN + '=="}}}'

CASES = {
    "dockerconfigjson pasted unquoted": (
        f"dataPack: reg.example/acme/pack:1.0\ndataPackAuth:\n  dockerconfigjson: {DOCKERCONFIG}\n",
        "/dataPackAuth/dockerconfigjson",
    ),
    "extraEnv as a map": (f"job:\n  extraEnv:\n    TOKEN: {TOKEN}\n", "/job/extraEnv"),
    "a token as identityTokenSecret": (
        f"validate:\n  publish:\n    identityTokenSecret: {TOKEN}.eyJ\n",
        "/validate/publish/identityTokenSecret",
    ),
    "a dockerconfigjson as dataPackSecret": (f"dataPackSecret: {DOCKERCONFIG}\n", "/dataPackSecret"),
    "a token as dataPackSecret": (f'dataPackSecret: "{TOKEN}"\n', "/dataPackSecret"),
    "dockerconfigjson pasted unquoted, the grouped name": (
        f"pack:\n  ref: reg.example/acme/pack:1.0\n  auth:\n    dockerconfigjson: {DOCKERCONFIG}\n",
        "/pack/auth/dockerconfigjson",
    ),
    "a token as pack.secret": (f'pack:\n  secret: "{TOKEN}"\n', "/pack/secret"),
    "a dockerconfigjson as registrySecret": (
        f"validate:\n  publish:\n    registrySecret: {DOCKERCONFIG}\n",
        "/validate/publish/registrySecret",
    ),
    "a token as registrySecret": (
        f'validate:\n  publish:\n    registrySecret: "{TOKEN}"\n',
        "/validate/publish/registrySecret",
    ),
}


@pytest.mark.parametrize(("text", "key"), CASES.values(), ids=CASES.keys())
def test_a_secret_bearing_value_is_never_quoted(tmp_path: Path, text: str, key: str) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("accelerator: h100\n" + text)
    with pytest.raises(ConfigError) as refused:
        load_values_file(values)
    said = "\n".join(refused.value.problems)
    assert f"at '{key}'" in said
    assert "value not shown: a secret-bearing setting" in said
    assert TOKEN not in said
    assert TOKEN[:8] not in said


def test_the_two_names_of_the_pack_credential_set_apart_are_refused_without_either_value(tmp_path: Path) -> None:
    """C-18 on the chart-created pack Secret's content: both names given, neither shown."""
    other = DOCKERCONFIG.replace(TOKEN, "b3RoZXItdG9rZW4")
    values = tmp_path / "values.yaml"
    values.write_text(
        f"pack:\n  ref: reg.example/acme/pack:1.0\n  auth:\n    dockerconfigjson: '{other}'\n"
        f"dataPackAuth:\n  dockerconfigjson: '{DOCKERCONFIG}'\n"
    )
    with pytest.raises(ConfigError) as refused:
        load_values_file(values)
    said = "\n".join(refused.value.problems)
    assert "dataPackAuth.dockerconfigjson=(value not shown: a secret-bearing setting) and" in said
    assert "pack.auth.dockerconfigjson=(value not shown: a secret-bearing setting) are both set" in said
    assert TOKEN[:8] not in said
    assert "b3RoZXIt" not in said
