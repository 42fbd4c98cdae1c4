"""``aicr validate`` (CTRF, readiness pre-flight, --emit-attestation) and
``aicr evidence publish`` (contract sections 10 and 11).

No cluster is touched: the outcome comes from FAKE_AICR_VALIDATE_RESULT
(pass | fail | other | skip | readiness-fail | timeout). The CTRF report is
written before the exit code is decided; evidence is emitted even when checks
fail. A failed pre-flight writes no report. As 0.11 (aicr-snapshot-validate
2.4, 2.6): a check with status ``other`` (crashed, never started) does not fail
the run (exit 0), a phase whose checks all skipped is reported passed, and
``--no-cluster`` reports every catalog validator of a phase skipped, not only
the recipe's checks.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from .bundle import load_recipe, sha256_file
from .log import VERSION, AicrError, Flag, Logger, legacy, parse_flags, skips_output

PHASES = ("deployment", "performance", "conformance")
PREDICATE_TYPE = "https://aicr.nvidia.com/recipe-evidence/v1"
EVIDENCE_ARTIFACT_TYPE = "application/vnd.nvidia.aicr.evidence.v1+json"
SIGSTORE_ARTIFACT_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
CLUSTER_K8S_VERSION = "v1.33.2"
RESULTS = ("pass", "fail", "other", "skip", "readiness-fail", "timeout")
#: aicr v0.11.1's embedded validator catalog, per phase in catalog order
#: (recipes/validators/catalog.yaml): what its --no-cluster reports skipped.
LEGACY_CATALOG = {
    "deployment": ("operator-health", "expected-resources", "gpu-operator-version", "check-nvidia-smi"),
    "performance": ("nccl-all-reduce-bw",),
    "conformance": (
        "dra-support",
        "gang-scheduling",
        "accelerator-metrics",
        "ai-service-metrics",
        "inference-gateway",
        "pod-autoscaling",
        "cluster-autoscaling",
        "robust-controller",
        "secure-accelerator-access",
        "gpu-operator-health",
        "platform-health",
    ),
}
#: What a skipping validator said (check-nvidia-smi's words on a cluster without GPUs).
SKIP_MESSAGE = "no GPU nodes found in the cluster"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


VALIDATE_FLAGS = [
    Flag(("recipe", "r")),
    Flag(("phase",), "list"),
    Flag(("data",)),
    Flag(("emit-attestation",)),
    Flag(("output", "o")),
    Flag(("fail-on-error",), "bool", default=True),
    Flag(("fail-fast",), "bool", default=False),
    Flag(("snapshot", "s")),
    Flag(("no-cluster",), "bool", default=False),
    Flag(("namespace", "n"), default="aicr-validation"),
    Flag(("image-pull-secret",), "list"),
    Flag(("node-selector",), "list"),
    Flag(("toleration",), "list"),
    Flag(("timeout",), default="5m"),
    Flag(("no-cleanup",), "bool", default=False),
    Flag(("require-gpu",), "bool", default=False),
    Flag(("kubeconfig", "k")),
    Flag(("image",)),
    Flag(("full",), "bool", default=False),
    Flag(("bom",), "bool", default=False),
    Flag(("skip-check",), "list"),
    Flag(("push",)),
    Flag(("no-sign",), "bool", default=False),
    Flag(("plain-http",), "bool", default=False),
    Flag(("insecure-tls",), "bool", default=False),
    Flag(("identity-token",)),
    Flag(("yes", "assume-yes"), "bool", default=False),
]


def _phases(requested: list[str]) -> list[str]:
    if not requested or "all" in requested:
        return list(PHASES)
    for phase in requested:
        if phase not in PHASES:
            raise AicrError("INVALID_REQUEST", f'invalid phase "{phase}": valid phases are {", ".join(PHASES)}, all')
    return [phase for phase in PHASES if phase in requested]


def _snapshot_readings(snapshot: str | None) -> dict[str, str]:
    """``Type.subtype.key`` -> value from a ``--snapshot`` file; without one, the
    simulated cluster's server version only (a ``cm://`` snapshot is not read)."""
    if not snapshot or snapshot.startswith("cm://"):
        return {"K8s.server.version": CLUSTER_K8S_VERSION}
    document = yaml.safe_load(Path(snapshot).read_text(encoding="utf-8")) or {}
    return {
        f"{measurement.get('type')}.{subtype.get('subtype')}.{key}": str(value)
        for measurement in document.get("measurements") or []
        for subtype in measurement.get("subtypes") or []
        for key, value in (subtype.get("data") or {}).items()
    }


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.strip().lstrip("v").split("-")[0].split(".") if part.isdigit())


def _meets(expected: str, actual: str) -> bool:
    if expected.startswith(">="):
        return _version(actual) >= _version(expected[2:])
    return actual == expected


def _readiness(recipe: dict[str, Any], result: str, snapshot: str | None, log: Logger) -> None:
    """The readiness pre-flight: the recipe's constraints against the snapshot's
    readings (a constraint without a reading is skipped). A failure ends validate
    before any check, and before the CTRF report is written."""
    constraints = recipe.get("constraints") or []
    readings = _snapshot_readings(snapshot)
    log.info("readiness pre-flight", constraints=len(constraints))
    for constraint in constraints:
        name, expected = str(constraint.get("name")), str(constraint.get("value"))
        actual = readings.get(name)
        if actual is None:
            log.warn("readiness constraint skipped", name=name, error="value not found in snapshot")
            continue
        if result == "readiness-fail" and name == "K8s.server.version":
            actual = "v1.20.0"
        if not _meets(expected, actual):
            failed = AicrError("INVALID_REQUEST", f"readiness check failed: {name} expected {expected}, got {actual}")
            # 0.11.1 wraps it: exit 8 (1.x keeps INVALID_REQUEST: exit 2).
            raise AicrError("INTERNAL", "validation failed", failed) if legacy() else failed
        log.info("readiness constraint passed", name=name, expected=expected, actual=actual)


def _run_checks(recipe: dict[str, Any], phases: list[str], result: str, no_cluster: bool) -> list[dict[str, Any]]:
    validation = recipe.get("validation") or {}
    tests: list[dict[str, Any]] = []
    # The injected failure hits the first check that runs; the rest pass.
    pending_failure = result in ("fail", "other") and not no_cluster
    for phase in phases:
        checks = (validation.get(phase) or {}).get("checks") or []
        if no_cluster and legacy():
            checks = list(LEGACY_CATALOG[phase])
        for check in checks:
            status, message = "passed", "check passed"
            if no_cluster:
                status, message = "skipped", "skipped - no-cluster mode"
            elif result == "skip":
                status, message = "skipped", SKIP_MESSAGE
            elif pending_failure:
                pending_failure = False
                status = "failed" if result == "fail" else "other"
                message = "check failed (FAKE_AICR_VALIDATE_RESULT)" if result == "fail" else "validator crashed"
            tests.append(
                {
                    "name": check,
                    "status": status,
                    "duration": 0 if status == "skipped" else 1200,
                    "suite": [phase],
                    "message": message,
                    "stdout": [f"{check}: {status}"],
                }
            )
    return tests


def _phase_status(tests: list[dict[str, Any]], *, no_cluster: bool) -> str:
    statuses = {test["status"] for test in tests}
    if "failed" in statuses:
        return "failed"
    if "other" in statuses:
        return "other"
    if not statuses or no_cluster or (statuses == {"skipped"} and not legacy()):
        return "skipped"
    # 0.11 reports a phase that ran checks, all of them skipped, as passed.
    return "passed"


def _ctrf(tests: list[dict[str, Any]], start_ms: int) -> dict[str, Any]:
    summary = {"tests": len(tests)} | {
        key: sum(1 for test in tests if test["status"] == key)
        for key in ("passed", "failed", "skipped", "pending", "other")
    }
    summary |= {"start": start_ms, "stop": int(time.time() * 1000)}
    return {
        "reportFormat": "CTRF",
        "specVersion": "0.0.1",
        "timestamp": _now(),
        "generatedBy": "aicr",
        "results": {"tool": {"name": "aicr", "version": VERSION}, "summary": summary, "tests": tests},
    }


def _check_options(parsed: Any) -> str:
    """Option errors are invalid input (exit 2); returns the simulated outcome."""
    if not parsed.get("recipe"):
        raise AicrError("INVALID_REQUEST", "--recipe is required")
    if parsed.get("no-cluster") and not parsed.get("snapshot"):
        raise AicrError("INVALID_REQUEST", "--no-cluster requires --snapshot")
    if parsed.get("no-cluster") and (parsed.get("emit-attestation") or parsed.get("push")):
        raise AicrError("INVALID_REQUEST", "--no-cluster cannot be combined with --emit-attestation or --push")
    result = os.environ.get("FAKE_AICR_VALIDATE_RESULT", "pass").strip() or "pass"
    if result not in RESULTS:
        raise AicrError("INTERNAL", f"FAKE_AICR_VALIDATE_RESULT must be one of {', '.join(RESULTS)}")
    return result


#: validate flags 0.11.1 does not have (contract section 10: 1.x only; the real
#: v0.11.1's --help lists --data, so a 0.11 validate takes it).
LEGACY_MISSING_VALIDATE_FLAGS = (
    "emit-attestation",
    "push",
    "no-sign",
    "identity-token",
    "fail-fast",
    "full",
    "bom",
    "skip-check",
    "plain-http",
    "insecure-tls",
    "yes",
)


def validate_flags() -> list[Flag]:
    return [f for f in VALIDATE_FLAGS if not (legacy() and f.names[0] in LEGACY_MISSING_VALIDATE_FLAGS)]


def cmd_validate(args: list[str], log: Logger) -> int:
    parsed = parse_flags(args, validate_flags())
    result = _check_options(parsed)
    phases = _phases(parsed.get("phase"))
    no_cluster = bool(parsed.get("no-cluster"))
    recipe = load_recipe(str(parsed.get("recipe")))
    if no_cluster:
        log.info("validating in --no-cluster mode — no validator Jobs; every check is reported skipped")
    else:
        log.info(
            "validating against the live cluster — validator Jobs will be deployed",
            namespace=parsed.get("namespace"),
        )
    if result == "timeout":
        raise AicrError("TIMEOUT", "timed out waiting for the snapshot agent", "context deadline exceeded")
    _readiness(recipe, result, parsed.get("snapshot"), log)
    sleep = float(os.environ.get("FAKE_AICR_VALIDATE_SLEEP") or 0)
    if sleep:
        time.sleep(sleep)
    start_ms = int(time.time() * 1000)
    log.info("running validation phases", runID=uuid.uuid4().hex[:12], phases="[" + " ".join(phases) + "]")
    tests = _run_checks(recipe, phases, result, no_cluster)
    for phase in phases:
        phase_tests = [test for test in tests if test["suite"][0] == phase]
        log.info(
            "phase result",
            phase=phase,
            status=_phase_status(phase_tests, no_cluster=no_cluster),
            duration=f"{sum(t['duration'] for t in phase_tests) / 1000:.1f}s",
            skipped=sum(1 for t in phase_tests if t["status"] == "skipped"),
        )
    report = _ctrf(tests, start_ms)
    # A misbehaving aicr (tests of the runner failing closed): the report's bytes as given.
    given = os.environ.get("FAKE_AICR_VALIDATE_REPORT")
    text = Path(given).read_bytes() if given else (json.dumps(report, indent=2) + "\n").encode()
    if parsed.get("output") and not skips_output("validate"):
        Path(str(parsed.get("output"))).write_bytes(text)
    else:
        sys.stdout.buffer.write(text)
    if parsed.get("emit-attestation"):
        evidence = Path(str(parsed.get("emit-attestation")))
        _emit_evidence(
            evidence,
            recipe=recipe,
            recipe_path=Path(str(parsed.get("recipe"))),
            phases=phases,
            tests=tests,
            log=log,
        )
        if parsed.get("push"):
            _publish(evidence, parsed, log)
    # 0.11 fails the run only on "failed": a crashed check ("other") exits 0.
    failing = ("failed",) if legacy() else ("failed", "other")
    failed = any(test["status"] in failing for test in tests)
    if failed and parsed.get("fail-on-error"):
        log.error("validation failed: one or more phases did not pass")
        raise AicrError("INTERNAL", "validation failed: one or more phases did not pass")
    log.info("validation completed", tests=len(tests), failed=failed)
    # A misbehaving aicr: a failing exit whatever its report says.
    return int(os.environ.get("FAKE_AICR_VALIDATE_EXIT") or 0)


# ---------------------------------------------------------------------------
# evidence
# ---------------------------------------------------------------------------


def _recipe_name(recipe: dict[str, Any]) -> str:
    overlays = (recipe.get("metadata") or {}).get("appliedOverlays") or []
    if overlays and overlays[-1] != "base":
        return str(overlays[-1])
    criteria = recipe.get("criteria") or {}
    parts = [str(criteria.get(key)) for key in ("accelerator", "service", "os", "intent") if criteria.get(key)]
    return "-".join(part for part in parts if part != "any") or "recipe"


def _emit_evidence(
    root: Path,
    *,
    recipe: dict[str, Any],
    recipe_path: Path,
    phases: list[str],
    tests: list[dict[str, Any]],
    log: Logger,
) -> None:
    summary = root / "summary-bundle"
    if summary.exists():
        shutil.rmtree(summary)
    (summary / "ctrf").mkdir(parents=True)
    shutil.copyfile(recipe_path, summary / "recipe.yaml")
    for phase in phases:
        phase_tests = [test for test in tests if test["suite"][0] == phase]
        report = _ctrf(phase_tests, int(time.time() * 1000))
        (summary / "ctrf" / f"{phase}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    padding = int(os.environ.get("FAKE_AICR_EVIDENCE_BYTES") or 0)
    if padding > 0:
        # Random, so compression cannot shrink it below a size guard.
        with (summary / "padding.bin").open("wb") as handle:
            remaining = padding
            while remaining:
                chunk = min(remaining, 1 << 20)
                handle.write(os.urandom(chunk))
                remaining -= chunk
    files = sorted(p.relative_to(summary).as_posix() for p in summary.rglob("*") if p.is_file())
    manifest = {
        "schemaVersion": "1.0.0",
        "files": [
            {"path": rel, "sha256": sha256_file(summary / rel), "size": (summary / rel).stat().st_size} for rel in files
        ],
    }
    (summary / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    subject = sha256_file(summary / "manifest.json")
    phase_summary = {
        phase: {
            "passed": sum(1 for t in tests if t["suite"][0] == phase and t["status"] == "passed"),
            "failed": sum(1 for t in tests if t["suite"][0] == phase and t["status"] in ("failed", "other")),
        }
        for phase in phases
    }
    name = _recipe_name(recipe)
    criteria = recipe.get("criteria") or {}
    statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "summary-bundle", "digest": {"sha256": subject}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "recipe": {"name": name, "digest": sha256_file(summary / "recipe.yaml")},
            "criteria": criteria,
            "phaseSummary": phase_summary,
            "aicrVersion": f"v{VERSION}",
        },
    }
    (summary / "statement.intoto.json").write_text(json.dumps(statement, indent=2) + "\n", encoding="utf-8")
    log.info("evidence bundle built", summaryDir=str(summary), recipe=name, subjectDigest=f"sha256:{subject}")
    pointer = {
        "schemaVersion": "1.0.0",
        "recipe": name,
        "attestations": [
            {
                "bundle": {"oci": "", "digest": "", "predicateType": PREDICATE_TYPE},
                "signer": {},
                "attestedAt": _now(),
                "fingerprint": {
                    "service": criteria.get("service", "any"),
                    "accelerator": criteria.get("accelerator", "any"),
                    "os": criteria.get("os", "any"),
                    "k8sVersion": CLUSTER_K8S_VERSION,
                },
                "criteriaMatch": {"matched": True},
                "phaseSummary": phase_summary,
            }
        ],
    }
    _write_pointer(root / "pointer.yaml", pointer, name, subject, log)


def _write_pointer(path: Path, pointer: dict[str, Any], name: str, subject: str, log: Logger) -> None:
    path.write_text(yaml.safe_dump(pointer, sort_keys=False), encoding="utf-8")
    log.info(
        "evidence pointer written",
        path=str(path),
        copyTo=f"recipes/evidence/{name}/in-cluster/{subject[:12]}.yaml",
    )


def cmd_evidence(args: list[str], log: Logger) -> int:
    if not args:
        raise AicrError("INVALID_REQUEST", "evidence needs a subcommand: publish, sign, verify")
    if args[0] != "publish":
        raise AicrError("INTERNAL", f"evidence {args[0]} is not implemented by the fake aicr")
    parsed = parse_flags(
        args[1:],
        [
            Flag(("push",)),
            Flag(("no-sign",), "bool", default=False),
            Flag(("identity-token",)),
            Flag(("oidc-device-flow",), "bool", default=False),
            Flag(("yes", "assume-yes"), "bool", default=False),
            Flag(("plain-http",), "bool", default=False),
            Flag(("insecure-tls",), "bool", default=False),
        ],
    )
    if not parsed.positionals:
        raise AicrError("INVALID_REQUEST", "evidence publish needs <bundle-dir>")
    if not parsed.get("push"):
        raise AicrError("INVALID_REQUEST", "--push is required")
    _publish(Path(parsed.positionals[0]), parsed, log)
    return 0


def _jwt_identity(token: str) -> tuple[str, str]:
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return str(claims.get("email") or claims.get("sub") or "unknown"), str(claims.get("iss") or "unknown")
    except (IndexError, ValueError, binascii.Error):
        return "unknown", "unknown"


def _split_ref(ref: str) -> tuple[str, str | None]:
    """(repository, tag or None); a host:port colon is not a tag."""
    if "@" in ref:
        raise AicrError("INVALID_REQUEST", f"--push {ref}: a digest reference cannot be pushed to; give a tag")
    head, _, last = ref.rpartition("/")
    if ":" in last:
        name, tag = last.split(":", 1)
        return f"{head}/{name}" if head else name, tag
    return ref, None


def _publish(root: Path, parsed: Any, log: Logger) -> None:
    if (root / "summary-bundle").is_dir():
        summary = root / "summary-bundle"
    elif (root / "manifest.json").is_file():
        summary = root
    else:
        raise AicrError("NOT_FOUND", f"no evidence summary bundle in {root}")
    unsigned = bool(parsed.get("no-sign"))
    signer: dict[str, Any] = {}
    if not unsigned:
        token = parsed.get("identity-token") or os.environ.get("COSIGN_IDENTITY_TOKEN")
        if not token:
            raise AicrError(
                "SERVICE_UNAVAILABLE",
                "keyless signing failed: no OIDC identity token (set --identity-token or "
                "COSIGN_IDENTITY_TOKEN, or publish with --no-sign and sign later)",
            )
        identity, issuer = _jwt_identity(str(token))
        sys.stderr.write(
            f"Signing evidence: the identity {identity} (issuer {issuer}) will be recorded "
            "in the public Rekor transparency log.\n"
        )
        signer = {"identity": identity, "issuer": issuer, "rekorLogIndex": 0}
    pointer_path = root / "pointer.yaml"
    pointer = yaml.safe_load(pointer_path.read_text(encoding="utf-8")) if pointer_path.is_file() else None
    name = str((pointer or {}).get("recipe") or "recipe")
    subject = sha256_file(summary / "manifest.json")
    repository, tag = _split_ref(str(parsed.get("push")))
    reference = f"{repository}:{tag or f'{name}-{subject[:12]}'}"
    digest = _push(summary, reference, parsed, log)
    if signer:
        signer["rekorLogIndex"] = int(digest[7:15], 16)
        _attach_signature(reference, digest, signer, parsed)
    log.info("evidence bundle pushed", reference=reference, digest=digest)
    if pointer is None:
        pointer = {"schemaVersion": "1.0.0", "recipe": name, "attestations": [{}]}
    attestation = pointer["attestations"][0]
    attestation["bundle"] = {"oci": reference, "digest": digest, "predicateType": PREDICATE_TYPE}
    attestation["signer"] = signer
    _write_pointer(pointer_path, pointer, name, subject, log)


def _oras_transport(parsed: Any) -> list[str]:
    flags: list[str] = []
    config = Path(os.environ.get("DOCKER_CONFIG", "")) / "config.json"
    if os.environ.get("DOCKER_CONFIG") and config.is_file():
        flags += ["--registry-config", str(config)]
    if parsed.get("plain-http"):
        flags.append("--plain-http")
    if parsed.get("insecure-tls"):
        flags.append("--insecure")
    return flags


def _push_failure(reference: str, detail: str, *, classify: str = "") -> AicrError:
    lowered = (classify or detail).lower()
    if any(word in lowered for word in ("401", "403", "unauthorized", "denied", "forbidden", "credential")):
        return AicrError("UNAUTHORIZED", f"failed to push evidence bundle to {reference}", detail)
    return AicrError("SERVICE_UNAVAILABLE", f"failed to push evidence bundle to {reference}", detail)


def _push(summary: Path, reference: str, parsed: Any, log: Logger) -> str:
    simulated_failure = os.environ.get("FAKE_AICR_PUBLISH_FAIL", "").strip()
    if simulated_failure == "unauthorized":
        raise _push_failure(reference, "unexpected status 401 Unauthorized")
    if simulated_failure:
        raise _push_failure(reference, "dial tcp: connect: connection refused")
    oras = os.environ.get("FAKE_AICR_ORAS")
    if not oras:
        return "sha256:" + hashlib.sha256((summary / "manifest.json").read_bytes() + reference.encode()).hexdigest()
    files = sorted(p.relative_to(summary).as_posix() for p in summary.rglob("*") if p.is_file())
    command = [oras, "push", reference, "--artifact-type", EVIDENCE_ARTIFACT_TYPE, "--format", "json"]
    command += _oras_transport(parsed) + files
    log.debug("pushing evidence with oras", command=" ".join(command))
    completed = subprocess.run(command, cwd=summary, capture_output=True, text=True, check=False, timeout=300)
    if completed.returncode != 0:
        output = (completed.stderr + completed.stdout).strip()
        lines = output.splitlines()
        detail = next((line for line in lines if line.startswith("Error")), lines[-1] if lines else "")
        raise _push_failure(reference, detail or f"oras exited {completed.returncode}", classify=output)
    return str(json.loads(completed.stdout)["digest"])


def _attach_signature(reference: str, digest: str, signer: dict[str, Any], parsed: Any) -> None:
    oras = os.environ.get("FAKE_AICR_ORAS")
    if not oras:
        return
    repository, _ = _split_ref(reference)
    with tempfile.TemporaryDirectory() as scratch:
        bundle = Path(scratch) / "sigstore-bundle.json"
        bundle.write_text(json.dumps({"mediaType": SIGSTORE_ARTIFACT_TYPE, "signer": signer}), encoding="utf-8")
        command = [oras, "attach", f"{repository}@{digest}", "--artifact-type", SIGSTORE_ARTIFACT_TYPE]
        command += [*_oras_transport(parsed), bundle.name]
        completed = subprocess.run(command, cwd=scratch, capture_output=True, text=True, check=False, timeout=300)
    if completed.returncode != 0:
        raise AicrError("SERVICE_UNAVAILABLE", "failed to attach the signature", completed.stderr.strip())
