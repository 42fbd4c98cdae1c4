"""Verify aicr's Sigstore provenance before the binary runs (fail closed).

Every aicr release archive carries ``aicr-attestation.sigstore.json``: a Sigstore
bundle holding a DSSE-signed in-toto statement (SLSA provenance v1) over the
``aicr`` binary, signed keylessly by NVIDIA's release workflow. The checksums file
proves the archive arrived intact; this proves who built it.

What is checked, in this order (each failure has its own message):

1. the bundle is a Sigstore bundle with a DSSE in-toto envelope and at least one
   transparency-log entry;
2. the statement's predicate type is SLSA provenance v1;
3. a subject's digest (sha256 or sha512, whichever the statement carries) equals
   the digest of the binary that will run;
4. cosign: the DSSE signature, the certificate chain to the Fulcio CA of the
   trusted root, the SCT, the transparency-log inclusion (Rekor v1 inclusion
   proof and signed entry timestamp, or Rekor v2 with the trusted root's
   timestamp authority), the certificate identity and issuer, and again the
   predicate type and subject digest. Offline: only the trusted root file is
   consulted, never TUF or Rekor over the network.

Steps 1-3 read the bundle without trusting it; they only ever refuse. Nothing is
accepted until cosign has verified the signature over the very payload read here.

Why cosign (a subprocess) and not a Python library: sigstore-python 4.5.1, the
newest, refuses bundles whose log entry is ``intoto`` 0.0.2 ("Integrated time
only supported for dsse/hashedrekord 0.0.1 types"; 3.6.7 refuses them too), and
aicr's attestation may carry that entry type or a Rekor v2 entry, depending on
the cosign that signed it. cosign v3 (built from its Go module, shipped in the
image) verifies both offline against a trusted_root.json. No cryptography is
written here.

The shipped trusted root (``data/sigstore-trusted-root.json``) is the Sigstore
public-good production root as distributed by the Sigstore TUF repository
(tuf-repo-cdn.sigstore.dev), taken unchanged from the sigstore-python 4.5.1 wheel
on PyPI; ``TRUSTED_ROOT_SOURCE`` records where from and its sha256 (a test
checks it). Point ``AICR_RUNNER_AICR__PROVENANCE__TRUSTED_ROOT`` at another
trusted_root.json for a private Sigstore or a refreshed root.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from aicr_runner.children.process import ProcessRunner, child_env
from aicr_runner.errors import ProvenanceError, ToolError
from aicr_runner.net.digests import binary_digest
from aicr_runner.settings.config import AicrSettings, ProvenanceMode, ProvenanceSettings

__all__ = [
    "SLSA_PROVENANCE_V1",
    "TRUSTED_ROOT_SOURCE",
    "Attestation",
    "CosignVerifier",
    "Provenance",
    "ProvenanceCheck",
    "SignatureVerifier",
    "check_provenance",
    "default_trusted_root",
    "read_attestation",
]

SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"
IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
#: Subject digest algorithms, strongest first: aicr's statement uses sha256, npm's sha512.
SUPPORTED_DIGESTS = ("sha512", "sha256")
TRUSTED_ROOT_SOURCE = {
    "what": "Sigstore public-good production trusted root (tuf-repo-cdn.sigstore.dev)",
    "from": "PyPI sigstore 4.5.1 wheel, sigstore/_store/https%3A%2F%2Ftuf-repo-cdn.sigstore.dev/trusted_root.json",
    "wheel_sha256": "02e000197b34980f1d382741d6f83c2fecbcef7debf7304f36a5253f3c892cd9",
    "sha256": "6494e21ea73fa7ee769f85f57d5a3e6a08725eae1e38c755fc3517c9e6bc0b66",
}
_MAX_BUNDLE_BYTES = 1024 * 1024
_ENV_PREFIX = "AICR_RUNNER_AICR__PROVENANCE__"
_COSIGN_OVERRIDES = ("SIGSTORE_", "TUF_", "COSIGN_")


def default_trusted_root() -> Path:
    """The public-good trusted root shipped inside the package."""
    from importlib import resources  # only when provenance is verified: it costs imports

    return Path(str(resources.files("aicr_runner") / "data" / "sigstore-trusted-root.json"))


@dataclass(frozen=True)
class LogEntry:
    log_index: int
    #: Rekor v1 records when the entry was integrated; Rekor v2 entries carry none
    #: (their time comes from the timestamp authority's signed timestamp).
    integrated_time: int
    kind: str


@dataclass(frozen=True)
class Attestation:
    """What a bundle claims, read without trusting it."""

    path: Path
    predicate_type: str
    #: subject name -> {algorithm: hex digest}
    subjects: tuple[tuple[str, Mapping[str, str]], ...]
    log_entries: tuple[LogEntry, ...]


@dataclass(frozen=True)
class Provenance:
    """A verified attestation: what the fetch step's reason and the status record."""

    identity: str
    issuer: str
    predicate_type: str
    subject_digest: str  # "sha256:<hex>"
    log_index: int
    integrated_time: int  # 0 for a Rekor v2 entry

    @property
    def integrated_at(self) -> str:
        if not self.integrated_time:
            return "none (Rekor v2: time from the signed timestamp)"
        return datetime.fromtimestamp(self.integrated_time, UTC).isoformat().replace("+00:00", "Z")

    def summary(self) -> str:
        return (
            f"provenance verified: signed by {self.identity} (issuer {self.issuer}), "
            f"Rekor log index {self.log_index}, integrated {self.integrated_at}, subject {self.subject_digest}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "identity": self.identity,
            "issuer": self.issuer,
            "predicateType": self.predicate_type,
            "subjectDigest": self.subject_digest,
            "logIndex": self.log_index,
            "integratedTime": self.integrated_at,
        }


@dataclass(frozen=True)
class ProvenanceCheck:
    """The outcome the fetch step reports: verified, warned (mode warn) or off."""

    mode: ProvenanceMode
    verified: Provenance | None = None
    warning: str = ""

    def to_dict(self) -> dict[str, Any]:
        status = "verified" if self.verified else ("off" if self.mode is ProvenanceMode.OFF else "not verified")
        return {"mode": self.mode.value, "status": status, "warning": self.warning} | (
            self.verified.to_dict() if self.verified else {}
        )


class SignatureVerifier(Protocol):
    """Verifies a Sigstore bundle's signature, chain, log inclusion and signer."""

    def verify(
        self, *, bundle: Path, artifact: Path, identity: str, issuer: str, trusted_root: Path, work: Path
    ) -> None:
        """Return when everything verifies; raise ``ProvenanceError`` otherwise."""
        ...


# -- reading the bundle (untrusted) -------------------------------------------------------


def _refuse(path: Path, why: str) -> ProvenanceError:
    return ProvenanceError(f"aicr provenance {path.name}: {why}")


def read_attestation(path: Path) -> Attestation:
    """Parse a Sigstore bundle's DSSE statement and log entries (no trust implied)."""
    try:
        raw = path.read_bytes()[: _MAX_BUNDLE_BYTES + 1]
    except OSError as exc:
        raise _refuse(path, f"cannot be read ({exc.strerror or exc})") from exc
    if len(raw) > _MAX_BUNDLE_BYTES:
        raise _refuse(path, f"is larger than {_MAX_BUNDLE_BYTES} bytes; not a Sigstore bundle")
    try:
        bundle = json.loads(raw)
    except ValueError as exc:
        raise _refuse(path, f"is not JSON ({exc})") from exc
    if not isinstance(bundle, dict) or not str(bundle.get("mediaType", "")).startswith(
        "application/vnd.dev.sigstore.bundle"
    ):
        raise _refuse(path, "is not a Sigstore bundle (mediaType application/vnd.dev.sigstore.bundle...)")
    envelope = bundle.get("dsseEnvelope")
    if not isinstance(envelope, dict) or envelope.get("payloadType") != IN_TOTO_PAYLOAD_TYPE:
        raise _refuse(path, f"holds no DSSE envelope with an in-toto statement (payloadType {IN_TOTO_PAYLOAD_TYPE})")
    try:
        statement = json.loads(base64.b64decode(str(envelope.get("payload", "")), validate=True))
    except (ValueError, binascii.Error) as exc:
        raise _refuse(path, f"the DSSE payload is not a base64 JSON statement ({exc})") from exc
    if not isinstance(statement, dict):
        raise _refuse(path, "the DSSE payload is not an in-toto statement")
    entries = _log_entries(path, bundle)
    subjects = tuple(
        (str(s.get("name", "")), {str(k): str(v).lower() for k, v in dict(s.get("digest") or {}).items()})
        for s in statement.get("subject") or []
        if isinstance(s, dict)
    )
    return Attestation(
        path=path,
        predicate_type=str(statement.get("predicateType", "")),
        subjects=subjects,
        log_entries=entries,
    )


def _log_entries(path: Path, bundle: Mapping[str, Any]) -> tuple[LogEntry, ...]:
    material = bundle.get("verificationMaterial")
    raw_entries = material.get("tlogEntries") if isinstance(material, dict) else None
    if not raw_entries:
        raise _refuse(
            path,
            "carries no transparency-log entry: nothing proves the signature was logged publicly "
            "(removed or never uploaded to Rekor)",
        )
    entries = []
    for item in raw_entries:
        try:
            kind = item.get("kindVersion") or {}
            entries.append(
                LogEntry(
                    log_index=int(item.get("logIndex", 0)),
                    integrated_time=int(item.get("integratedTime") or 0),
                    kind=f"{kind.get('kind', '?')} {kind.get('version', '?')}",
                )
            )
        except (AttributeError, TypeError, ValueError) as exc:
            raise _refuse(path, f"has a malformed transparency-log entry ({exc})") from exc
    return tuple(entries)


def _matching_subject(attestation: Attestation, binary: Path) -> str:
    """``alg:hex`` of the subject digest equal to the binary's, or a refusal."""
    computed: dict[str, str] = {}
    claimed: list[str] = []
    for _name, digests in attestation.subjects:
        for algorithm in SUPPORTED_DIGESTS:
            if algorithm not in digests:
                continue
            if algorithm not in computed:
                computed[algorithm] = binary_digest(binary, algorithm)
            if digests[algorithm] == computed[algorithm]:
                return f"{algorithm}:{computed[algorithm]}"
            claimed.append(f"{algorithm}:{digests[algorithm]}")
    if not claimed:
        found = sorted({alg for _, digests in attestation.subjects for alg in digests}) or ["none"]
        raise _refuse(
            attestation.path,
            f"no subject has a sha256 or sha512 digest (found: {', '.join(found)}); cannot tie it to {binary.name}",
        )
    mine = ", ".join(f"{alg}:{hexdigest}" for alg, hexdigest in computed.items())
    raise _refuse(
        attestation.path,
        f"subject digest does not match the binary: {binary} is {mine}, the statement names {', '.join(claimed)} "
        "(the binary was altered or the attestation belongs to another artifact)",
    )


# -- cosign ---------------------------------------------------------------------------------

#: cosign's error text -> what it means, most specific first. ``{0}`` etc. are
#: the pattern's groups. Patterns are compiled on first use (``re``'s cache), not
#: at import: a run whose provenance is off or verified never compiles them.
_COSIGN_FAILURES: tuple[tuple[str, re.RegexFlag, str], ...] = (
    (
        r'expected SAN value "([^"]*)", got "([^"]*)"',
        re.NOFLAG,
        f"signer identity mismatch: the certificate was issued to {{1}}, expected {{0}} ({_ENV_PREFIX}IDENTITY)",
    ),
    (
        r'expected issuer value "([^"]*)", got "([^"]*)"',
        re.NOFLAG,
        f"OIDC issuer mismatch: the certificate's issuer is {{1}}, expected {{0}} ({_ENV_PREFIX}ISSUER)",
    ),
    (
        r"transparency log signature does not match",
        re.NOFLAG,
        "the DSSE signature is not the one recorded in the transparency log: the signature was altered",
    ),
    (
        r"transparency log certificate does not match",
        re.NOFLAG,
        "the signing certificate is not the one recorded in the transparency log: the certificate was swapped",
    ),
    (
        r"entry payload hash \S+ does not match envelope payload hash",
        re.NOFLAG,
        "the signed statement is not the one recorded in the transparency log: the statement was altered",
    ),
    (
        r"not enough verified log entries from transparency log",
        re.NOFLAG,
        "no transparency-log entry verifies against the trusted root's Rekor keys",
    ),
    (
        r"inclusion proof|checkpoint|signed entry timestamp|verifying tlog entry",
        re.I,
        "the transparency-log inclusion proof does not verify against the trusted root",
    ),
    (
        r"provided artifact digests do not match",
        re.NOFLAG,
        "subject digest does not match the binary (reported by cosign)",
    ),
    (
        r"invalid predicate type, expected \S+ got (\S+)",
        re.NOFLAG,
        "predicate type is {0}, expected SLSA provenance v1 (" + SLSA_PROVENANCE_V1 + ")",
    ),
    (
        r"certificate signed by unknown authority|certificate chain|x509",
        re.I,
        "the signing certificate does not chain to a Fulcio CA of the trusted root",
    ),
    (
        r"SCT|certificate transparency",
        re.I,
        "the signing certificate's SCT does not verify against the trusted root's CT logs",
    ),
    (
        r"signature",
        re.I,
        "the DSSE signature does not verify with the signing certificate's key",
    ),
    (
        r"trusted root|trusted material",
        re.I,
        "the trusted root cannot be used",
    ),
)


def explain_cosign_failure(output: str) -> str:
    """One clear line for cosign's error output (its own text kept after it)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line.removeprefix("Error:").strip() for line in lines if line.startswith("Error:")]
    detail = errors[-1] if errors else (lines[-1] if lines else "no output")
    for pattern, flags, meaning in _COSIGN_FAILURES:
        match = re.search(pattern, detail, flags)
        if match:
            return f"{meaning.format(*match.groups())} (cosign: {detail})"
    return f"cosign refused the attestation (cosign: {detail})"


class CosignVerifier:
    """``cosign verify-blob-attestation`` through the runner's ProcessRunner.

    cosign >= v3.0.1 is needed for Rekor v2 entries; the image ships v3.1.3.
    A Sigstore bundle plus ``--trusted-root`` makes cosign verify offline: it
    reads no TUF metadata and calls no Rekor.
    """

    def __init__(self, processes: ProcessRunner, environ: Mapping[str, str], *, cosign: str = "cosign") -> None:
        self._processes = processes
        self._environ = environ
        self._cosign = cosign

    def _program(self) -> str:
        found = shutil.which(self._cosign, path=self._environ.get("PATH"))
        if found is None:
            raise ToolError(
                f"cannot verify aicr's provenance: {self._cosign} is not on PATH (the aicr-runner image ships it); "
                f"install cosign >= v3.0.1 or set {_ENV_PREFIX}MODE=warn or off"
            )
        return found

    def argv(self, *, bundle: Path, artifact: Path, identity: str, issuer: str, trusted_root: Path) -> list[str]:
        return [
            self._program(),
            "verify-blob-attestation",
            "--bundle",
            str(bundle),
            "--trusted-root",
            str(trusted_root),
            "--certificate-identity",
            identity,
            "--certificate-oidc-issuer",
            issuer,
            "--type",
            "slsaprovenance1",
            str(artifact),
        ]

    def verify(
        self, *, bundle: Path, artifact: Path, identity: str, issuer: str, trusted_root: Path, work: Path
    ) -> None:
        argv = self.argv(bundle=bundle, artifact=artifact, identity=identity, issuer=issuer, trusted_root=trusted_root)
        lines: list[str] = []
        log_path = work / "logs" / "provenance.log"
        # Only the trusted root given here decides what is trusted: cosign's own
        # SIGSTORE_*/TUF_* overrides (other roots, keys, CT logs) never reach it.
        env = {k: v for k, v in child_env(self._environ).items() if not k.upper().startswith(_COSIGN_OVERRIDES)}
        # cosign keeps a cache under HOME; a bare environment must not send it to "/".
        env.setdefault("HOME", str(work))
        result = self._processes.run(argv, env=env, cwd=work, log_path=log_path, on_line=lines.append)
        if result.exit_code != 0:
            raise _refuse(bundle, explain_cosign_failure("\n".join(lines)))
        if not any("Verified OK" in line for line in lines):
            raise _refuse(bundle, f"cosign exited 0 without 'Verified OK'; refusing ({' '.join(lines)[-300:]})")


# -- the check the fetch step runs ---------------------------------------------------------


def check_provenance(
    binary: Path,
    attestation: Path | None,
    settings: AicrSettings,
    verifier: SignatureVerifier,
    work: Path,
) -> ProvenanceCheck:
    """Verify ``attestation`` against ``binary`` as ``settings.provenance.mode`` says.

    require: any failure raises ``ProvenanceError`` (exit 29) or ``ToolError``.
    warn: the failure becomes the check's warning. off: nothing is read.
    """
    provenance = settings.provenance
    mode = provenance.mode
    if mode is ProvenanceMode.OFF:
        return ProvenanceCheck(mode)
    try:
        verified = _verify(binary, attestation, settings, verifier, work)
    except (ProvenanceError, ToolError) as exc:
        if mode is ProvenanceMode.REQUIRE:
            _disarm(binary, work)
            raise
        return ProvenanceCheck(mode, warning=f"{exc.message} (not enforced: {_ENV_PREFIX}MODE=warn)")
    return ProvenanceCheck(mode, verified=verified)


def _disarm(binary: Path, work: Path) -> None:
    """A refused aicr the run downloaded stays in the work directory for a look,
    but no longer runs (its execute bits are cleared). A preinstalled binary
    elsewhere is the operator's and is left alone."""
    try:
        if binary.resolve().is_relative_to(work.resolve()):
            binary.chmod(binary.stat().st_mode & ~0o111)
    except OSError:
        return


def _verify(
    binary: Path, attestation: Path | None, settings: AicrSettings, verifier: SignatureVerifier, work: Path
) -> Provenance:
    provenance = settings.provenance
    attestation = _present_attestation(binary, attestation)
    trusted_root = _present_trusted_root(provenance)
    claims = read_attestation(attestation)
    if claims.predicate_type != SLSA_PROVENANCE_V1:
        raise _refuse(
            attestation,
            f"predicate type is {claims.predicate_type or 'missing'!r}, expected SLSA provenance v1 "
            f"({SLSA_PROVENANCE_V1})",
        )
    subject = _matching_subject(claims, binary)
    identity = settings.expected_identity
    verifier.verify(
        bundle=attestation,
        artifact=binary,
        identity=identity,
        issuer=provenance.issuer,
        trusted_root=trusted_root,
        work=work,
    )
    entry = claims.log_entries[0]
    return Provenance(
        identity=identity,
        issuer=provenance.issuer,
        predicate_type=claims.predicate_type,
        subject_digest=subject,
        log_index=entry.log_index,
        integrated_time=entry.integrated_time,
    )


def _present_attestation(binary: Path, attestation: Path | None) -> Path:
    if attestation is None or not attestation.is_file():
        raise ProvenanceError(
            f"aicr provenance: no aicr-attestation.sigstore.json beside {binary}; every aicr release archive "
            "carries one (a mirror must serve the archive unmodified). To run an aicr without NVIDIA's "
            "attestation anyway (a preinstalled binary, a release not built by NVIDIA's release workflow), "
            f"set {_ENV_PREFIX}MODE=warn or off explicitly (chart: aicr.provenance.mode)"
        )
    return attestation


def _present_trusted_root(provenance: ProvenanceSettings) -> Path:
    trusted_root = Path(provenance.trusted_root) if provenance.trusted_root else default_trusted_root()
    if not trusted_root.is_file():
        raise ProvenanceError(
            f"aicr provenance: trusted root {trusted_root} does not exist ({_ENV_PREFIX}TRUSTED_ROOT); "
            "give a Sigstore trusted_root.json or leave it empty for the shipped public-good root"
        )
    return trusted_root
