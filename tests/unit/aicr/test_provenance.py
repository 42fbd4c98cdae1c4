"""aicr provenance verification with real public-good Sigstore material and the real cosign.

The material is the npm registry's SLSA provenance bundle for ``sigstore@3.1.0``
(tests/data/sigstore, DSSE in-toto SLSA v1, GitHub Actions keyless, Rekor
``intoto`` 0.0.2 entry, sha512 subject) and the npm tarball it attests. cosign is
the pinned build from tools/versions.env. Every run is offline: the proxy
variables point at a closed port, so any network call cosign tried would fail.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from aicr_runner.aicr.provenance import (
    SLSA_PROVENANCE_V1,
    TRUSTED_ROOT_SOURCE,
    Attestation,
    CosignVerifier,
    check_provenance,
    default_trusted_root,
    explain_cosign_failure,
    read_attestation,
)
from aicr_runner.children.process import SubprocessRunner
from aicr_runner.errors import ExitCode, ProvenanceError, ToolError
from aicr_runner.settings.config import AicrSettings, ProvenanceMode, ProvenanceSettings, load
from e2e.tools import npm_tarball, tool

ROOT = Path(__file__).resolve().parents[3]
BUNDLE = ROOT / "tests" / "data" / "sigstore" / "sigstore-3.1.0.sigstore.json"
SIGSTORE_JS = "https://github.com/sigstore/sigstore-js/.github/workflows/release.yml@refs/heads/main"
GITHUB = "https://token.actions.githubusercontent.com"
SHA512 = (
    "669cd60051c816ac85139e9d5ea817fc3903459773fab45c8e8224fd1414e085"
    "f4c220afd65f12ed9ad70c770273eb9a7feea8ef0de1da5de0e86606e5328df5"
)
NVIDIA_AT_V120 = "https://github.com/NVIDIA/aicr/.github/workflows/on-tag.yaml@refs/tags/v1.2.0"


def offline_environ(home: Path) -> dict[str, str]:
    dead = "http://127.0.0.1:9"
    return {
        "PATH": f"{tool('cosign').parent}:/usr/bin:/bin",
        "HOME": str(home),
        "HTTPS_PROXY": dead,
        "HTTP_PROXY": dead,
        "https_proxy": dead,
        "http_proxy": dead,
    }


def settings(**provenance: Any) -> AicrSettings:
    return AicrSettings(version="v1.2.0", provenance=ProvenanceSettings(**provenance))


@pytest.fixture
def material(tmp_path: Path) -> tuple[Path, Path]:
    """A writable copy of the tarball and its bundle, side by side."""
    tarball = tmp_path / "sigstore-3.1.0.tgz"
    shutil.copyfile(npm_tarball(), tarball)
    bundle = tmp_path / "bundle.sigstore.json"
    shutil.copyfile(BUNDLE, bundle)
    return tarball, bundle


@pytest.fixture
def cosign(tmp_path: Path) -> CosignVerifier:
    home = tmp_path / "home"
    home.mkdir()
    return CosignVerifier(SubprocessRunner(), offline_environ(home))


def run_check(tarball: Path, bundle: Path, verifier: CosignVerifier, work: Path, **provenance: Any) -> tuple[Any, str]:
    """check_provenance in require mode; (result, "") or (None, the refusal)."""
    provenance = {"identity": SIGSTORE_JS, **provenance}
    refusal: ProvenanceError | None = None
    try:
        return check_provenance(tarball, bundle, settings(**provenance), verifier, work), ""
    except ProvenanceError as exc:
        refusal = exc
    assert refusal.exit_code == ExitCode.PROVENANCE_FAILED
    assert int(ExitCode.PROVENANCE_FAILED) == 29
    return None, refusal.message


# -- the material is what its README says ------------------------------------------------------


def test_the_material_is_the_real_published_provenance() -> None:
    assert hashlib.sha256(BUNDLE.read_bytes()).hexdigest() == (
        "ec47e8d5a9804173596eafcbead2f248ae0442f8ab4aa66b51c88bd85f5fd4a1"
    )
    assert hashlib.sha512(npm_tarball().read_bytes()).hexdigest() == SHA512
    claims = read_attestation(BUNDLE)
    assert claims.predicate_type == SLSA_PROVENANCE_V1
    assert claims.subjects == (("pkg:npm/sigstore@3.1.0", {"sha512": SHA512}),)
    [entry] = claims.log_entries
    assert (entry.log_index, entry.integrated_time, entry.kind) == (168704762, 1738701347, "intoto 0.0.2")


def test_the_shipped_trusted_root_is_the_recorded_public_good_root() -> None:
    root = default_trusted_root()
    assert hashlib.sha256(root.read_bytes()).hexdigest() == TRUSTED_ROOT_SOURCE["sha256"]
    doc = json.loads(root.read_text())
    assert doc["mediaType"] == "application/vnd.dev.sigstore.trustedroot+json;version=0.1"
    assert "https://rekor.sigstore.dev" in {t["baseUrl"] for t in doc["tlogs"]}
    assert "https://fulcio.sigstore.dev" in {c["uri"] for c in doc["certificateAuthorities"]}
    # Rekor v2 entries are timed by the timestamp authority: the root must carry one.
    assert doc["timestampAuthorities"]


# -- the real bundle verifies, offline ---------------------------------------------------------


def test_the_real_bundle_verifies_offline_with_the_sigstore_js_identity(
    material: tuple[Path, Path], cosign: CosignVerifier, tmp_path: Path
) -> None:
    tarball, bundle = material
    check, refusal = run_check(tarball, bundle, cosign, tmp_path)
    assert refusal == ""
    verified = check.verified
    assert verified is not None
    assert verified.identity == SIGSTORE_JS
    assert verified.issuer == GITHUB
    assert verified.subject_digest == f"sha512:{SHA512}"
    assert verified.log_index == 168704762
    assert verified.integrated_at == "2025-02-04T20:35:47Z"
    summary = verified.summary()
    assert f"signed by {SIGSTORE_JS}" in summary
    assert "Rekor log index 168704762, integrated 2025-02-04T20:35:47Z" in summary
    assert check.to_dict()["status"] == "verified"
    assert "Verified OK" in (tmp_path / "logs" / "provenance.log").read_text()


def test_sigstore_environment_overrides_do_not_reach_cosign(material: tuple[Path, Path], tmp_path: Path) -> None:
    tarball, bundle = material
    recorded: dict[str, str] = {}

    class Recording(SubprocessRunner):
        def run(self, argv: Any, *, env: Any, **kw: Any) -> Any:
            recorded.update(env)
            return super().run(argv, env=env, **kw)

    home = tmp_path / "home"
    home.mkdir()
    environ = {
        **offline_environ(home),
        "SIGSTORE_ROOT_FILE": str(tmp_path / "evil.pem"),
        "SIGSTORE_REKOR_PUBLIC_KEY": str(tmp_path / "evil.pub"),
        "TUF_ROOT": str(tmp_path),
        "COSIGN_EXPERIMENTAL": "1",
    }
    check, refusal = run_check(tarball, bundle, CosignVerifier(Recording(), environ), tmp_path)
    assert refusal == ""
    assert check.verified is not None
    assert not {k for k in recorded if k.startswith(("SIGSTORE_", "TUF_", "COSIGN_"))}
    assert recorded["HTTPS_PROXY"] == "http://127.0.0.1:9"


def test_cosign_gets_the_offline_argv(cosign: CosignVerifier, tmp_path: Path) -> None:
    argv = cosign.argv(
        bundle=tmp_path / "b.json", artifact=tmp_path / "aicr", identity="id", issuer="iss", trusted_root=Path("r")
    )
    assert argv[1:] == [
        "verify-blob-attestation",
        "--bundle",
        str(tmp_path / "b.json"),
        "--trusted-root",
        "r",
        "--certificate-identity",
        "id",
        "--certificate-oidc-issuer",
        "iss",
        "--type",
        "slsaprovenance1",
        str(tmp_path / "aicr"),
    ]


# -- tampering: each case refused with its own message ------------------------------------------


def _bundle(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def _write(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(json.dumps(doc))


def flip_signature(doc: dict[str, Any]) -> None:
    signature = doc["dsseEnvelope"]["signatures"][0]
    raw = bytearray(base64.b64decode(signature["sig"]))
    raw[10] ^= 0x01
    signature["sig"] = base64.b64encode(bytes(raw)).decode()


def swap_certificate(doc: dict[str, Any]) -> None:
    """Another certificate for the same identity: self-made, so no CA vouches for it."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sigstore")])
    start = dt.datetime(2025, 2, 4, tzinfo=dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(minutes=10))
        .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(SIGSTORE_JS)]), critical=True)
        .sign(key, hashes.SHA256())
    )
    der = cert.public_bytes(serialization.Encoding.DER)
    doc["verificationMaterial"]["x509CertificateChain"]["certificates"][0]["rawBytes"] = base64.b64encode(der).decode()


def remove_log_entry(doc: dict[str, Any]) -> None:
    doc["verificationMaterial"]["tlogEntries"] = []


def change_predicate_type(doc: dict[str, Any]) -> None:
    statement = json.loads(base64.b64decode(doc["dsseEnvelope"]["payload"]))
    statement["predicateType"] = "https://slsa.dev/provenance/v0.2"
    doc["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()


def flip_tarball_byte(tarball: Path) -> None:
    data = bytearray(tarball.read_bytes())
    data[len(data) // 2] ^= 0x01
    tarball.write_bytes(bytes(data))


BundleEdit = Callable[[dict[str, Any]], None]
TAMPERING: dict[str, tuple[dict[str, str], BundleEdit | None, bool, str]] = {
    # case: (settings, bundle edit, flip a tarball byte, the message's own words)
    "wrong identity": (
        {"identity": NVIDIA_AT_V120},
        None,
        False,
        f"signer identity mismatch: the certificate was issued to {SIGSTORE_JS}, expected {NVIDIA_AT_V120} "
        "(AICR_RUNNER_AICR__PROVENANCE__IDENTITY)",
    ),
    "wrong issuer": (
        {"issuer": "https://accounts.google.com"},
        None,
        False,
        f"OIDC issuer mismatch: the certificate's issuer is {GITHUB}, expected https://accounts.google.com "
        "(AICR_RUNNER_AICR__PROVENANCE__ISSUER)",
    ),
    "flipped byte in the tarball": (
        {},
        None,
        True,
        "subject digest does not match the binary: ",
    ),
    "flipped byte in the signature": (
        {},
        flip_signature,
        False,
        "the DSSE signature is not the one recorded in the transparency log: the signature was altered",
    ),
    "swapped certificate": (
        {},
        swap_certificate,
        False,
        "the signing certificate is not the one recorded in the transparency log: the certificate was swapped",
    ),
    "removed log entry": (
        {},
        remove_log_entry,
        False,
        "carries no transparency-log entry: nothing proves the signature was logged publicly",
    ),
    "different predicate type": (
        {},
        change_predicate_type,
        False,
        "predicate type is 'https://slsa.dev/provenance/v0.2', expected SLSA provenance v1 "
        "(https://slsa.dev/provenance/v1)",
    ),
}


def tamper(case: str, tarball: Path, bundle: Path) -> dict[str, str]:
    overrides, edit, flip, _ = TAMPERING[case]
    if edit is not None:
        doc = _bundle(bundle)
        edit(doc)
        _write(bundle, doc)
    if flip:
        flip_tarball_byte(tarball)
    return overrides


@pytest.mark.parametrize("case", list(TAMPERING))
def test_each_tampering_is_refused_with_its_own_message(
    case: str, material: tuple[Path, Path], cosign: CosignVerifier, tmp_path: Path
) -> None:
    tarball, bundle = material
    overrides = tamper(case, tarball, bundle)
    check, refusal = run_check(tarball, bundle, cosign, tmp_path, **overrides)
    assert check is None, f"{case} was accepted"
    assert refusal.startswith("aicr provenance bundle.sigstore.json: "), refusal
    expected = TAMPERING[case][3]
    assert expected in refusal, refusal
    # No other case's words: each failure says what went wrong, not a generic "failed".
    for other, (_, _, _, words) in TAMPERING.items():
        if other != case:
            assert words not in refusal, f"{case} reads like {other}: {refusal}"


def test_a_flipped_tarball_byte_names_both_digests(
    material: tuple[Path, Path], cosign: CosignVerifier, tmp_path: Path
) -> None:
    tarball, bundle = material
    flip_tarball_byte(tarball)
    _, refusal = run_check(tarball, bundle, cosign, tmp_path)
    actual = hashlib.sha512(tarball.read_bytes()).hexdigest()
    assert f"{tarball} is sha512:{actual}, the statement names sha512:{SHA512}" in refusal


@pytest.mark.parametrize(
    ("edit", "flip", "meaning"),
    [
        (remove_log_entry, False, "no transparency-log entry verifies against the trusted root's Rekor keys"),
        (change_predicate_type, False, "the signed statement is not the one recorded in the transparency log"),
        (None, True, "subject digest does not match the binary (reported by cosign)"),
    ],
    ids=["removed log entry", "different predicate type", "flipped tarball byte"],
)
def test_cosign_alone_refuses_what_the_pre_checks_refuse(
    edit: BundleEdit | None, flip: bool, meaning: str, material: tuple[Path, Path], cosign: CosignVerifier
) -> None:
    """The reads before cosign only refuse early with a clearer message; cosign is
    not relying on them."""
    tarball, bundle = material
    if edit is not None:
        doc = _bundle(bundle)
        edit(doc)
        _write(bundle, doc)
    if flip:
        flip_tarball_byte(tarball)
    with pytest.raises(ProvenanceError, match=r"^aicr provenance ") as raised:
        cosign.verify(
            bundle=bundle,
            artifact=tarball,
            identity=SIGSTORE_JS,
            issuer=GITHUB,
            trusted_root=default_trusted_root(),
            work=tarball.parent,
        )
    assert meaning in raised.value.message


def test_another_trusted_root_is_used_when_set(
    material: tuple[Path, Path], cosign: CosignVerifier, tmp_path: Path
) -> None:
    """A root without the public-good Rekor key cannot verify the public-good entry."""
    tarball, bundle = material
    root = json.loads(default_trusted_root().read_text())
    root["tlogs"] = [t for t in root["tlogs"] if t["baseUrl"] != "https://rekor.sigstore.dev"]
    private = tmp_path / "private-root.json"
    private.write_text(json.dumps(root))
    _, refusal = run_check(tarball, bundle, cosign, tmp_path, trusted_root=str(private))
    assert "no transparency-log entry verifies against the trusted root's Rekor keys" in refusal, refusal
    _, missing = run_check(tarball, bundle, cosign, tmp_path, trusted_root=str(tmp_path / "nope.json"))
    assert (
        f"trusted root {tmp_path / 'nope.json'} does not exist (AICR_RUNNER_AICR__PROVENANCE__TRUSTED_ROOT)" in missing
    )


# -- modes -------------------------------------------------------------------------------------


def test_warn_mode_reports_instead_of_refusing(
    material: tuple[Path, Path], cosign: CosignVerifier, tmp_path: Path
) -> None:
    tarball, bundle = material
    check = check_provenance(tarball, bundle, settings(mode=ProvenanceMode.WARN), cosign, tmp_path)
    assert check.verified is None
    assert "signer identity mismatch" in check.warning
    assert check.warning.endswith("(not enforced: AICR_RUNNER_AICR__PROVENANCE__MODE=warn)")
    assert check.to_dict()["status"] == "not verified"


def test_off_mode_reads_nothing(tmp_path: Path) -> None:
    class Exploding:
        def verify(self, **_: Any) -> None:
            raise AssertionError("off must not verify")

    garbage = tmp_path / "attestation.json"
    garbage.write_text("not json")
    check = check_provenance(tmp_path / "aicr", garbage, settings(mode=ProvenanceMode.OFF), Exploding(), tmp_path)
    assert (check.verified, check.warning, check.to_dict()["status"]) == (None, "", "off")


@pytest.mark.parametrize("mode", [ProvenanceMode.REQUIRE, ProvenanceMode.WARN])
def test_a_binary_without_an_attestation_needs_warn_or_off(
    mode: ProvenanceMode, material: tuple[Path, Path], cosign: CosignVerifier, tmp_path: Path
) -> None:
    tarball, _ = material
    words = "no aicr-attestation.sigstore.json beside"
    if mode is ProvenanceMode.REQUIRE:
        with pytest.raises(ProvenanceError, match=words) as raised:
            check_provenance(tarball, None, settings(mode=mode), cosign, tmp_path)
        assert "set AICR_RUNNER_AICR__PROVENANCE__MODE=warn or off explicitly" in raised.value.message
    else:
        assert words in check_provenance(tarball, None, settings(mode=mode), cosign, tmp_path).warning


def test_without_cosign_require_fails_and_warn_warns(material: tuple[Path, Path], tmp_path: Path) -> None:
    tarball, bundle = material
    verifier = CosignVerifier(SubprocessRunner(), {"PATH": str(tmp_path)})
    with pytest.raises(ToolError, match="cosign is not on PATH"):
        check_provenance(tarball, bundle, settings(identity=SIGSTORE_JS), verifier, tmp_path)
    warned = check_provenance(tarball, bundle, settings(mode=ProvenanceMode.WARN), verifier, tmp_path)
    assert "cosign is not on PATH" in warned.warning


# -- reading the bundle ------------------------------------------------------------------------


def test_sha256_subjects_are_matched_too(tmp_path: Path) -> None:
    """aicr's statement names its binary by sha256 (npm's by sha512)."""
    from aicr_runner.aicr.provenance import _matching_subject

    binary = tmp_path / "aicr"
    binary.write_bytes(b"aicr binary")
    digest = hashlib.sha256(b"aicr binary").hexdigest()
    claims = Attestation(tmp_path / "a.json", SLSA_PROVENANCE_V1, (("aicr", {"sha256": digest}),), ())
    assert _matching_subject(claims, binary) == f"sha256:{digest}"
    other = Attestation(tmp_path / "a.json", SLSA_PROVENANCE_V1, (("aicr", {"sha256": "0" * 64}),), ())
    with pytest.raises(ProvenanceError, match=f"is sha256:{digest}, the statement names sha256:{'0' * 64}"):
        _matching_subject(other, binary)
    unsupported = Attestation(tmp_path / "a.json", SLSA_PROVENANCE_V1, (("aicr", {"md5": "00"}),), ())
    with pytest.raises(ProvenanceError, match=r"no subject has a sha256 or sha512 digest \(found: md5\)"):
        _matching_subject(unsupported, binary)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"not json", "is not JSON"),
        (b'{"mediaType": "application/json"}', "is not a Sigstore bundle"),
        (b'{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}', "holds no DSSE envelope"),
    ],
)
def test_malformed_bundles_are_refused(content: bytes, words: str, tmp_path: Path) -> None:
    path = tmp_path / "aicr-attestation.sigstore.json"
    path.write_bytes(content)
    with pytest.raises(ProvenanceError, match=words):
        read_attestation(path)


def test_unknown_cosign_output_is_kept_verbatim() -> None:
    assert explain_cosign_failure("Error: something new\nerror during command execution: x") == (
        "cosign refused the attestation (cosign: something new)"
    )


# -- settings ------------------------------------------------------------------------------------


def test_defaults_come_from_aicrs_install_script() -> None:
    s = load({"AICR_RUNNER_CRITERIA__ACCELERATOR": "h100", "AICR_RUNNER_AICR__VERSION": "1.3.0"})
    assert s.aicr.provenance.mode is ProvenanceMode.REQUIRE
    assert s.aicr.provenance.issuer == GITHUB
    assert s.aicr.expected_identity == "https://github.com/NVIDIA/aicr/.github/workflows/on-tag.yaml@refs/tags/v1.3.0"
    custom = load(
        {
            "AICR_RUNNER_CRITERIA__ACCELERATOR": "h100",
            "AICR_RUNNER_AICR__PROVENANCE__IDENTITY": "https://github.com/acme/aicr/.github/workflows/r.yaml@refs/tags/{version}",
        }
    )
    assert custom.aicr.expected_identity == "https://github.com/acme/aicr/.github/workflows/r.yaml@refs/tags/v1.2.0"


def test_bad_provenance_settings_are_named() -> None:
    from aicr_runner.errors import ConfigError

    with pytest.raises(ConfigError) as raised:
        load(
            {
                "AICR_RUNNER_CRITERIA__ACCELERATOR": "h100",
                "AICR_RUNNER_AICR__PROVENANCE__MODE": "maybe",
                "AICR_RUNNER_AICR__PROVENANCE__ISSUER": "token.actions.githubusercontent.com",
            }
        )
    text = str(raised.value)
    assert "AICR_RUNNER_AICR__PROVENANCE__MODE='maybe': allowed: 'require', 'warn' or 'off'" in text
    assert "AICR_RUNNER_AICR__PROVENANCE__ISSUER='token.actions.githubusercontent.com': must be an https://" in text


def test_tampering_cases_cover_the_issue_list() -> None:
    assert set(TAMPERING) == {
        "wrong identity",
        "wrong issuer",
        "flipped byte in the tarball",
        "flipped byte in the signature",
        "swapped certificate",
        "removed log entry",
        "different predicate type",
    }
