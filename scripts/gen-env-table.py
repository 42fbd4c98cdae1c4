#!/usr/bin/env python3
"""Writes the environment table of docs/configuration.md from the runtime's settings model.

Every variable the runtime reads must have a description here; `--check` fails
when the page or this list drift from `aicr_runner.settings.config.env_var_names()`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aicr_runner.settings.config import RunnerSettings, env_var_names

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- env-table:start -->", "<!-- env-table:end -->"
TARGET = ROOT / "docs" / "configuration.md"

DESCRIPTIONS = {
    "CRITERIA__SERVICE": "recipe `--service` (aks, eks, gke, k0s, ..., a pack-registered value, or `any`); empty leaves the flag out",
    "CRITERIA__ACCELERATOR": "recipe `--accelerator` (h100, h200, gb200, ...); `any` is refused",
    "CRITERIA__INTENT": "recipe `--intent` (training, inference); needs a concrete service",
    "CRITERIA__OS": "recipe `--os` (ubuntu, rhel, rocky, cos, ...)",
    "CRITERIA__PLATFORM": "recipe `--platform` (kubeflow, dynamo, nim, ...)",
    "PACK__REF": "OCI reference of the org data pack, without scheme (`host/repo:tag` or `@sha256:` digest, which is then enforced)",
    "PACK__CREDENTIALS_FILE": "path of a dockerconfigjson file for the pack pull; the only credential the pull uses",
    "PACK__PLAIN_HTTP": "pull the pack over plain HTTP (lab registries)",
    "PACK__INSECURE_TLS": "skip TLS verification for the pack registry (lab registries)",
    "PACK__PULL_BUDGET_SECONDS": "wall-clock bound on the whole pack pull, however slowly the registry answers (exit 22 past it)",
    "AICR__VERSION": "pinned aicr release tag; the leading `v` is optional",
    "AICR__ARCH": "release architecture, `amd64` or `arm64`; empty or unset: this machine's",
    "AICR__SHA256__AMD64": "strict sha256 pin of the amd64 release tarball (the checksums file is verified regardless)",
    "AICR__SHA256__ARM64": "strict sha256 pin of the arm64 release tarball; never inherits the amd64 pin",
    "AICR__RELEASE_BASE_URL": "where releases are served: `<base>/<tag>/aicr_<ver>_linux_<arch>.tar.gz` (a mirror for air-gapped clusters); http(s), no user or password in it",
    "AICR__BINARY": "use this preinstalled aicr instead of downloading one",
    "AICR__BINARY_SHA256": "sha256 the preinstalled binary must match",
    "AICR__DOWNLOAD_ATTEMPTS": "download attempts for transient failures (timeouts, resets, 408/429/5xx)",
    "AICR__DOWNLOAD_TIMEOUT_SECONDS": "per-request timeout",
    "AICR__DOWNLOAD_BUDGET_SECONDS": "wall-clock bound on the whole download (retries, back-off, slow bodies, stalled TLS and redirects included; exit 20 past it)",
    "AICR__PROVENANCE__MODE": "aicr's Sigstore provenance: `require` (exit 29 unless it verifies), `warn` or `off`; a preinstalled binary without an attestation needs `warn` or `off`",
    "AICR__PROVENANCE__IDENTITY": "exact signer identity (certificate SAN); empty: `https://github.com/NVIDIA/aicr/.github/workflows/on-tag.yaml@refs/tags/<aicr version>`; `{version}` is replaced by the pinned tag",
    "AICR__PROVENANCE__ISSUER": "OIDC issuer of the signing certificate",
    "AICR__PROVENANCE__TRUSTED_ROOT": "Sigstore `trusted_root.json` (private Sigstore or a refreshed root); empty: the shipped public-good root",
    "RECIPE__FLAGS": "legacy extra `aicr recipe` flags, split on whitespace only (no quotes, no globs)",
    "RECIPE__ARGS": "extra `aicr recipe` arguments as a JSON array, one argv entry each, after the flags",
    "RECIPE__CONFIGMAP": "ConfigMap for `summary.txt` and `recipe.yaml`; empty turns the capture off",
    "RECIPE__EXPECT__MIN_COMPONENTS": "stop before bundle when fewer components resolve (0: no check)",
    "RECIPE__EXPECT__COMPONENTS": "JSON array of component names that must resolve",
    "RECIPE__EXPECT__OVERLAYS": "JSON array of overlay names that must be applied",
    "BUNDLE__FLAGS": "legacy extra `aicr bundle` flags, split on whitespace only",
    "BUNDLE__ARGS": "extra `aicr bundle` arguments (JSON array), after the flags and the driver profile",
    "BUNDLE__STORAGE_CLASS": "`aicr bundle --storage-class`",
    "DEPLOY__FLAGS": "legacy `deploy.sh` flags, split on whitespace only",
    "DEPLOY__ARGS": "extra `deploy.sh` arguments (JSON array), after the flags",
    "DEPLOY__ENABLED": "`false` gives an assert-only run: no bundle, verify or deploy",
    "DEPLOY__FAIL_ON_COMPONENT_FAILURE": "fail the run (exit 1, after validation and capture) when deploy.sh reported failed components; `false`: such a run exits 0 with phase `SucceededWithFailures`",
    "ENVIRONMENT__PREINSTALLED_DRIVER": "nodes have a host driver: adds the three driver-ownership `--set` overrides before user flags",
    "VALIDATE__FLAGS": "legacy extra `aicr validate` flags, split on whitespace only",
    "VALIDATE__ARGS": "extra `aicr validate` arguments (JSON array)",
    "VALIDATE__ENABLED": "run `aicr validate` after the install (or alone, assert-only)",
    "VALIDATE__PHASES": "JSON array of phases: deployment, performance, conformance; never empty",
    "VALIDATE__FAIL_ON_ERROR": "a failed validation fails the Job, and one that ran no check fails it with exit 32 (after the verdict is captured); `false`: the latter exits 0 with phase `SucceededInconclusive`",
    "VALIDATE__EMIT_EVIDENCE": "`--emit-attestation`: build the evidence bundle",
    "VALIDATE__RESULT_CONFIGMAP": "ConfigMap for the CTRF verdict (`ctrf.json`)",
    "VALIDATE__HISTORY_LIMIT": "validations the verdict history (`<resultConfigMap>-history`) keeps",
    "VALIDATE__EVIDENCE_CONFIGMAP": "ConfigMap for `evidence.tgz` and `pointer.yaml`",
    "VALIDATE__PUBLISH__ENABLED": "push the evidence bundle with `aicr evidence publish`",
    "VALIDATE__PUBLISH__MODE": "`signed` (keyless, needs a token) or `unsigned` (`--no-sign`)",
    "VALIDATE__PUBLISH__REF": "OCI push target for the evidence",
    "VALIDATE__PUBLISH__FAIL_ON_ERROR": "a failed publish fails the Job",
    "VALIDATE__PUBLISH__INSECURE_TLS": "publish with `--insecure-tls`",
    "VALIDATE__PUBLISH__PLAIN_HTTP": "publish with `--plain-http`",
    "VALIDATE__PUBLISH__REGISTRY_CONFIG_DIR": "directory holding a dockerconfigjson `config.json`; `DOCKER_CONFIG` for the publish call only",
    "VALIDATE__PUBLISH__IDENTITY_TOKEN_FILE": "file holding the OIDC token for signed mode; read at publish time, given to the publish call only",
    "REPORTS__API": "which report the verdict is written to (docs/reports.md): `auto` (OpenReports `Report`, else wgpolicyk8s `PolicyReport`, found by discovery), `openreports`, `wgpolicy` or `none`",
    "REPORTS__NAME": "the report's name, one per release (the chart: `aicr-<release>`); replaced each run",
    "REPORTS__RELEASE": "the chart release, as the report's `aicr.nvidia.com/release` label; empty: no label",
    "SNAPSHOT__ENABLED": "run `aicr snapshot` before deploy and before each re-validation, pass it to validate (`--snapshot cm://`), compare it with the previous one (docs/continuous-assurance.md, Snapshots); advisory",
    "SNAPSHOT__IMAGE": "the snapshot agent's image (`--image`); empty: `ghcr.io/nvidia/aicr:v<AICR__VERSION>`",
    "SNAPSHOT__PRIVILEGED": "`aicr snapshot --privileged`: the node's OS release and systemd units (true) or a restricted pod (false)",
    "SNAPSHOT__NODE_SELECTOR": "JSON list of `key=value` (`--node-selector` each); empty: any node",
    "SNAPSHOT__TOLERATIONS": "JSON list of `key=value:Effect` or `key:Effect` (`--toleration` each); empty: aicr's tolerate-all",
    "SNAPSHOT__TIMEOUT_SECONDS": "how long aicr waits for the agent Job (`--timeout`), 10 to 3600",
    "SNAPSHOT__NAMESPACE": "namespace of the agent Job and the ConfigMap `aicr-runner-snapshot` it writes",
    "SNAPSHOT__CONFIGMAP": "ConfigMap (the runner's namespace) keeping this snapshot and the previous one; empty: not kept, not compared",
    "MIRROR__REGISTRY": "registry (`host[:port][/prefix]`) holding the mirrored charts: the recipe's chart sources become `oci://<registry>/<source host>/<source path>` before `aicr bundle` (docs/air-gap.md); empty: no rewrite",
    "MIRROR__CHART_REPOSITORY": "an `http(s)://` chart repository for the charts the recipe takes from chart repositories (instead of OCI charts in the registry); alone it redirects only those",
    "UPGRADE_CHECK__ACKNOWLEDGE": "JSON array of acknowledged manual moves, `component:from:to` each, matched exactly; a blocked component is never acknowledged",
    "UPGRADE_CHECK__ON_UNKNOWN": "`stop` (exit 35) or `warn` for a component `aicr upgrade-check` cannot judge (unknown, unversioned)",
    "UPGRADE_CHECK__REQUIRE_ASSESSMENT": "stop (exit 35) a crossing the running aicr cannot assess (no `upgrade-check`: aicr 0.x); false: warn and go on",
    "STATUS_CONFIGMAP": "ConfigMap with the live run report (`report.json`, `summary.txt`); empty turns it off",
    "NAMESPACE": "namespace of the result ConfigMaps (default: the pod's); a DNS-1123 label",
    "WORK_DIR": "absolute work directory (downloads, recipe, bundle, per-step logs); created, and checked writable before any step",
    "LOG_FORMAT": "`console` (readable) or `json`",
    "TERMINATION_MESSAGE_PATH": (
        "where the one-line outcome (printable, at most 4096 bytes) is written for the pod status; the chart sets "
        "`/dev/termination-log`; empty: not written (a local run writes only under its work and results directories)"
    ),
    "KUBE_WRITE_BUDGET_SECONDS": "how long one Kubernetes API call (a result ConfigMap write, a read) may take, retries of 429, 5xx, connection errors and unanswered requests included, honouring Retry-After; each request is also bounded on its own (15 s); once a call ran out of this budget, later calls get 15 s until one gets through; after SIGTERM every call gets at most 5 s",
    "SHUTDOWN_GRACE_SECONDS": "after SIGTERM, how long a running child (helm in deploy.sh) may finish before it is stopped; "
    "deploy.sh is stopped earlier, as soon as no helm operation is in flight",
    "LEASE__NAME": "the install Lease (`coordination.k8s.io/v1`) taken before deploy; empty runs without one (local runs)",
    "LEASE__POD_NAME": "this pod's name; with the Job name it is the Lease holder identity",
    "LEASE__JOB_NAME": "this pod's Job name (holder identity); a failed run reads this Job's labels to find the Flux HelmRelease that rendered it and records a Warning Event there",
    "LEASE__DURATION_SECONDS": "a holder that stops renewing loses the Lease after this many seconds",
    "LEASE__WAIT_SECONDS": "how long a run waits for another run's Lease before it gives up with exit 31",
}


def _default(name: str) -> str:
    node: object = RunnerSettings.model_construct()
    for part in name.split("__"):
        node = getattr(node, part.lower())
    if name == "AICR__ARCH":
        return "host arch"
    value = getattr(node, "value", node)
    if isinstance(value, bool):
        value = str(value).lower()
    if isinstance(value, list):
        value = "[" + ", ".join(f'"{getattr(v, "value", v)}"' for v in value) + "]"
    return f"`{value}`" if value not in ("", None) else '`""`'


def table() -> str:
    names = [n.removeprefix("AICR_RUNNER_") for n in env_var_names()]
    missing = sorted(set(names) - set(DESCRIPTIONS))
    extra = sorted(set(DESCRIPTIONS) - set(names))
    if missing or extra:
        raise SystemExit(f"gen-env-table: descriptions out of step: missing {missing}, unknown {extra}")
    rows = ["| Variable | Default | Meaning |", "|---|---|---|"]
    rows += [f"| `AICR_RUNNER_{n}` | {_default(n)} | {DESCRIPTIONS[n]} |" for n in names]
    return "\n".join(rows)


def splice(document: str, generated: str) -> str:
    head, _, rest = document.partition(START)
    _, _, tail = rest.partition(END)
    if not rest or END not in rest:
        raise SystemExit(f"gen-env-table: {TARGET.relative_to(ROOT)} needs the markers {START} / {END}")
    return f"{head}{START}\n{generated}\n{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if docs/configuration.md is out of date")
    args = parser.parse_args()
    text = TARGET.read_text()
    updated = splice(text, table())
    if args.check:
        if updated != text:
            print(
                f"{TARGET.relative_to(ROOT)} environment table is stale: run scripts/gen-env-table.py", file=sys.stderr
            )
            return 1
        return 0
    TARGET.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
