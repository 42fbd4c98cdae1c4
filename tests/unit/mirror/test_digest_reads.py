"""``mirror --to``'s digests read in the runner's process (``OrasCopier`` on
``mirror.digest_reads``) against a tiny registry on loopback
(``tests/support/oci_registry.py``), with a stand-in oras whose every call is
counted: an item the target holds by digest costs no process, one it holds under
another digest is copied, the final check names what the target holds; each fault
is the failure (and exit code) it was when oras read the digests.

The real oras against real registries: tests/integration/test_mirror_copy.py."""

from __future__ import annotations

import base64
import datetime as dt
import json
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aicr_runner.errors import InterruptedRun
from aicr_runner.mirror.copy import copy_all, target_of
from aicr_runner.mirror.errors import CopyError, MirrorExit
from aicr_runner.mirror.items import Item, Kind
from aicr_runner.mirror.oras_copier import LAYOUT, OrasCopier
from tests.support.oci_registry import Registry, digest_of, fake_oras, manifest, serve


@pytest.fixture
def registry() -> Iterator[tuple[Registry, str]]:
    """One registry, both upstream and target (the mirror's prefix keeps them apart): it and its host."""
    state = Registry()
    server = serve(state)
    try:
        yield state, f"127.0.0.1:{server.server_address[1]}"
    finally:
        state.released.set()
        server.stop()


def _copier(tmp_path: Path, host: str, **options: object) -> tuple[OrasCopier, Path]:
    oras, calls = fake_oras(tmp_path)
    config = tmp_path / "config.json"
    if not config.exists():
        config.write_text("{}")
    copier = OrasCopier(str(oras), registry_config=config, plain_http=frozenset({host}), **options)  # type: ignore[arg-type]
    return copier, calls


def _calls(calls: Path) -> list[str]:
    return calls.read_text().splitlines() if calls.exists() else []


def test_an_item_the_target_holds_by_digest_costs_no_oras_process(
    registry: tuple[Registry, str], tmp_path: Path
) -> None:
    state, host = registry
    item = Item(Kind.IMAGE, f"{host}/nvidia/driver:580")
    body = manifest("driver")
    state.put("nvidia/driver", "580", body)
    target = target_of(item, f"oci://{host}/m")
    state.put(target.split("/", 1)[1].rsplit(":", 1)[0], "580", body)
    copier, calls = _copier(tmp_path, host)
    report = copy_all([item], f"oci://{host}/m", copier)
    assert (report.sent, report.copied[0].digest) == (0, digest_of(body))
    assert _calls(calls) == []
    # The source's, the target's, the final check's: each one HEAD, no manifest fetched.
    assert [r.split(" ")[0] for r in state.requests if "/manifests/" in r] == ["HEAD"] * 3


def test_a_target_holding_another_digest_under_the_tag_is_copied(
    registry: tuple[Registry, str], tmp_path: Path
) -> None:
    state, host = registry
    item = Item(Kind.IMAGE, f"{host}/nvidia/driver:580")
    source_digest = state.put("nvidia/driver", "580", manifest("new"))
    target = target_of(item, f"oci://{host}/m")
    repository = target.split("/", 1)[1].rsplit(":", 1)[0]
    state.put(repository, "580", manifest("old"))
    copier, calls = _copier(tmp_path, host)
    report = copy_all([item], f"oci://{host}/m", copier)
    assert (report.sent, report.copied[0].digest) == (1, source_digest)
    (call,) = _calls(calls)
    assert call.startswith("cp ")
    assert call.endswith(f" {item.reference} {target}")
    assert digest_of(state.manifests[(repository, "580")]) == source_digest
    assert copy_all([item], f"oci://{host}/m", copier).sent == 0
    assert len(_calls(calls)) == 1


def test_the_final_check_names_a_target_that_holds_another_digest(
    registry: tuple[Registry, str], tmp_path: Path
) -> None:
    state, host = registry
    item = Item(Kind.IMAGE, f"{host}/nvidia/driver:580")
    source_digest = state.put("nvidia/driver", "580", manifest("source"))
    state.stores_instead = manifest("something else")  # oras says it copied the source; the target holds this
    copier, _ = _copier(tmp_path, host)
    with pytest.raises(CopyError) as caught:
        copy_all([item], f"oci://{host}/m", copier)
    target = target_of(item, f"oci://{host}/m")
    assert caught.value.exit_code == MirrorExit.DIGEST_MISMATCH
    assert caught.value.message == (
        f"digest mismatch: {target}: the target has {digest_of(manifest('something else'))}, expected {source_digest}"
    )


def test_a_registry_that_sends_no_digest_has_the_manifest_hashed(
    registry: tuple[Registry, str], tmp_path: Path
) -> None:
    state, host = registry
    state.send_digest = False
    body = manifest("no header")
    state.put("packs/site", "1", body)
    copier, _ = _copier(tmp_path, host)
    assert copier.digest(f"{host}/packs/site:1", source_side=True) == digest_of(body)
    assert [r.split(" ")[0] for r in state.requests] == ["HEAD", "GET"]


def test_an_item_missing_at_its_source_is_not_found_and_may_be_allowed(
    registry: tuple[Registry, str], tmp_path: Path
) -> None:
    _, host = registry
    item = Item(Kind.IMAGE, f"{host}/nvidia/nvidia-fs:2.26.6")
    copier, calls = _copier(tmp_path, host)
    with pytest.raises(CopyError) as caught:
        copy_all([item], f"oci://{host}/m", copier)
    assert (caught.value.exit_code, caught.value.message) == (
        MirrorExit.NOT_FOUND,
        f"not found at its source: {item.reference}: no such manifest",
    )
    report = copy_all([item], f"oci://{host}/m", copier, allow_missing=frozenset({item.reference}))
    assert [i for i, _ in report.not_copied] == [item]
    assert _calls(calls) == []


def _config(path: Path, host: str, login: str) -> Path:
    path.write_text(json.dumps({"auths": {host: {"auth": base64.b64encode(login.encode()).decode()}}}))
    return path


def test_the_credential_of_the_docker_config_is_sent_and_a_refusal_named(
    registry: tuple[Registry, str], tmp_path: Path
) -> None:
    state, host = registry
    state.login = "mirror:right-password"
    body = manifest("private")
    state.put("private/image", "1", body)
    _config(tmp_path / "config.json", host, state.login)
    copier, _ = _copier(tmp_path, host)
    assert copier.digest(f"{host}/private/image:1", source_side=True) == digest_of(body)
    _config(tmp_path / "config.json", host, "mirror:wrong-password")
    refused, _ = _copier(tmp_path, host)
    with pytest.raises(CopyError) as caught:
        refused.digest(f"{host}/private/image:1", source_side=True)
    assert caught.value.exit_code == MirrorExit.AUTH_REFUSED
    assert caught.value.message.startswith(f"credentials refused: {host}/private/image:1: ")
    assert "HTTP 401" in caught.value.message
    assert "wrong-password" not in caught.value.message
    (tmp_path / "config.json").write_text(json.dumps({"auths": {host: {"auth": "not base64!"}}}))
    unreadable, _ = _copier(tmp_path, host)
    with pytest.raises(CopyError) as caught:
        unreadable.digest(f"{host}/private/image:1", source_side=True)
    assert caught.value.exit_code == MirrorExit.AUTH_REFUSED
    assert "is not base64" in caught.value.message
    (tmp_path / "config.json").write_text("{}")  # no credential for it: anonymous, as oras goes
    anonymous, _ = _copier(tmp_path, host)
    with pytest.raises(CopyError) as caught:
        anonymous.digest(f"{host}/private/image:1", source_side=False)
    assert caught.value.exit_code == MirrorExit.AUTH_REFUSED


def test_a_token_service_is_asked_for_a_token_with_the_credential(
    registry: tuple[Registry, str], tmp_path: Path
) -> None:
    """The distribution spec's token auth (nvcr.io, ghcr.io): a HEAD refused with a Bearer
    challenge (no length: a HEAD has no body), a token asked of the realm, the HEAD again."""
    state, host = registry
    state.bearer, state.login = True, "mirror:right-password"
    body = manifest("behind a token")
    state.put("nvidia/driver", "580", body)
    _config(tmp_path / "config.json", host, state.login)
    copier, _ = _copier(tmp_path, host)
    assert copier.digest(f"{host}/nvidia/driver:580", source_side=True) == digest_of(body)
    assert state.tokens == ["t0"]
    assert [r.split("?")[0] for r in state.requests] == [
        "HEAD /v2/nvidia/driver/manifests/580",
        "GET /token",
        "HEAD /v2/nvidia/driver/manifests/580",
    ]
    _config(tmp_path / "config.json", host, "mirror:wrong-password")
    refused, _ = _copier(tmp_path, host)
    with pytest.raises(CopyError) as caught:
        refused.digest(f"{host}/nvidia/driver:580", source_side=False)
    assert caught.value.exit_code == MirrorExit.AUTH_REFUSED
    assert "wrong-password" not in caught.value.message


def test_a_resolve_rule_reaches_a_plain_http_name_at_the_address(registry: tuple[Registry, str]) -> None:
    """As the real GPU Operator's e2e copies: nvcr.io on plain HTTP, port 80, served on loopback."""
    state, host = registry
    body = manifest("nvcr.io on loopback")
    state.put("nvidia/gpu-operator", "v25.10.1", body)
    copier = OrasCopier(
        registry_config=Path("/nonexistent/config.json"),
        plain_http=frozenset({"nvcr.io"}),
        resolve=(f"nvcr.io:80:{host}",),
    )
    assert copier.digest("nvcr.io/nvidia/gpu-operator:v25.10.1", source_side=True) == digest_of(body)
    assert state.hosts == ["nvcr.io"]


def test_a_registry_only_a_credential_helper_logs_in_to_is_read_by_oras(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auths": {"b.example": {"auth": "dTpw"}}, "credHelpers": {"nvcr.io": "ngc"}}))
    copier = OrasCopier(registry_config=config)
    assert not copier.reads.serves("nvcr.io/nvidia/driver:580")
    assert copier.reads.serves("b.example/x:1")
    assert copier.reads.serves("ghcr.io/nvidia/x:1")  # no entry, no helper: anonymous, read here
    config.write_text(json.dumps({"auths": {"b.example": {}}, "credsStore": "desktop"}))
    every = OrasCopier(registry_config=config)
    assert not every.reads.serves("ghcr.io/nvidia/x:1")
    assert every.reads.serves(f"{LAYOUT}{tmp_path}:item0001")


def test_an_unreachable_registry_is_named_by_its_side(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        gone = f"127.0.0.1:{probe.getsockname()[1]}"
    copier = OrasCopier(plain_http=frozenset({gone}), registry_config=tmp_path / "none.json")
    for source_side, reason, said in (
        (True, MirrorExit.SOURCE_UNAVAILABLE, "source unreachable"),
        (False, MirrorExit.TARGET_UNAVAILABLE, "target unreachable or refused the copy"),
    ):
        with pytest.raises(CopyError) as caught:
            copier.digest(f"{gone}/nvidia/driver:580", source_side=source_side)
        assert caught.value.exit_code == reason
        assert caught.value.message.startswith(f"{said}: {gone}/nvidia/driver:580: ")


def test_an_oci_layout_is_read_from_its_index(tmp_path: Path) -> None:
    body = manifest("archived")
    digest = digest_of(body)
    (tmp_path / "blobs" / "sha256").mkdir(parents=True)
    (tmp_path / "blobs" / "sha256" / digest.split(":")[1]).write_bytes(body)
    entry = {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": digest, "size": len(body)}
    index = {
        "schemaVersion": 2,
        "manifests": [{**entry, "annotations": {"org.opencontainers.image.ref.name": "item0001"}}],
    }
    (tmp_path / "index.json").write_text(json.dumps(index))
    copier = OrasCopier("no-oras-here")  # no process, no HTTP
    assert copier.digest(f"{LAYOUT}{tmp_path}:item0001", source_side=True) == digest
    assert copier.digest(f"{LAYOUT}{tmp_path}:item0002", source_side=True) is None
    assert copier.reads.manifest(f"{LAYOUT}{tmp_path}:item0001", source_side=True) == json.loads(body)
    assert copier.digest(f"{LAYOUT}{tmp_path / 'empty'}:item0001", source_side=False) is None


def test_a_shutdown_stops_a_read_the_registry_never_answers(registry: tuple[Registry, str], tmp_path: Path) -> None:
    state, host = registry
    state.stalls = True
    copier, _ = _copier(tmp_path, host, interrupted=state.arrived.is_set)  # the signal comes once it waits
    started = time.monotonic()
    with pytest.raises(InterruptedRun) as caught:
        copier.digest(f"{host}/nvidia/driver:580", source_side=True)
    assert time.monotonic() - started < 10
    assert caught.value.message == (
        f"interrupted during the digest read of {host}/nvidia/driver:580: run the same command again to resume "
        "(what the target holds is not sent again)"
    )
    with pytest.raises(InterruptedRun):  # nothing starts after it
        copier.digest(f"{host}/nvidia/other:1", source_side=True)
    assert not any("other" in r for r in state.requests)


def test_a_read_the_registry_never_answers_ends_by_the_deadline(registry: tuple[Registry, str], tmp_path: Path) -> None:
    state, host = registry
    state.stalls = True
    copier, _ = _copier(tmp_path, host, timeout_seconds=1.0)
    with pytest.raises(CopyError) as caught:
        copier.digest(f"{host}/nvidia/driver:580", source_side=False)
    assert caught.value.exit_code == MirrorExit.TARGET_UNAVAILABLE
    assert caught.value.message == f"target unreachable or refused the copy: {host}/nvidia/driver:580: no answer in 1s"


def _certificate(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for ``name`` (a DNS name, not the address it is served at)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert, private = directory / "cert.pem", directory / "key.pem"
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert, private


def test_a_resolve_rule_reaches_the_name_at_the_address_and_tls_checks_the_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """oras' ``--resolve``: mirror.test is served at 127.0.0.1; the certificate is
    mirror.test's, trusted through SSL_CERT_FILE (as oras trusts it)."""
    cert, key = _certificate(tmp_path, "mirror.test")
    state = Registry()
    body = manifest("over tls")
    state.put("nvidia/driver", "580", body)
    server = serve(state)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    port = server.server_address[1]
    rule = f"mirror.test:443:127.0.0.1:{port}"
    try:
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        copier = OrasCopier(registry_config=tmp_path / "none.json", resolve=(rule,))
        assert copier.digest("mirror.test/nvidia/driver:580", source_side=True) == digest_of(body)
        assert state.hosts == ["mirror.test"]  # the name, not the address
        monkeypatch.delenv("SSL_CERT_FILE")  # the system's store does not know this certificate
        untrusted = OrasCopier(registry_config=tmp_path / "none.json", resolve=(rule,))
        with pytest.raises(CopyError) as caught:
            untrusted.digest("mirror.test/nvidia/driver:580", source_side=True)
        assert caught.value.exit_code == MirrorExit.SOURCE_UNAVAILABLE
        assert "TLS failure" in caught.value.message
    finally:
        state.released.set()
        server.stop()
