"""``aicr snapshot`` (the v0.11.1 contract, reference aicr-snapshot-validate.md section 1).

The real CLI always deploys an agent Job and reads its ConfigMap back; here the
"agent" is simulated: the snapshot is written straight to the output, a document
in v0.11.1's schema (``kind: Snapshot``, ``aicr.nvidia.com/v1alpha1``, five
measurement types). Readings come from ``FAKE_AICR_SNAPSHOT_FACTS`` (a JSON
object ``{"Type.subtype.key": value}`` over the defaults below), so a test can
change the cluster between two runs.

Outputs: a file (created or truncated first, as aicr does: a failed run leaves a
0-byte file), ``cm://ns/name`` written as ``$FAKE_AICR_CONFIGMAP_DIR/<ns>/<name>/``
``snapshot.yaml`` (no API server here; without the variable: refused), or stdout.
``FAKE_AICR_SNAPSHOT_RESULT``: ``ok`` (default), ``job-failed`` (exit 8, the agent
Job failed), ``unauthorized`` (exit 4, the RBAC pre-flight denied).
"""

from __future__ import annotations

import json
import os
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from .log import VERSION, AicrError, Flag, Logger, parse_flags

#: ``aicr snapshot --help`` v0.11.1's flags (the contract test compares the names).
SNAPSHOT_FLAGS = [
    Flag(("image",), default="ghcr.io/nvidia/aicr:v0.11.1", usage="Container image for agent Job"),
    Flag(("image-pull-secret",), "list", usage="Secret name for pulling images from private registries"),
    Flag(("job-name",), default="aicr", usage="Override default Job name"),
    Flag(("namespace", "n"), default="default", usage="Kubernetes namespace for agent deployment"),
    Flag(("no-cleanup",), "bool", default=False, usage="Skip removal of Job and RBAC resources on completion"),
    Flag(("node-selector",), "list", usage="Node selector for Job scheduling (format: key=value, can be repeated)"),
    Flag(("privileged",), "bool", default=True, usage="Run agent in privileged mode"),
    Flag(("require-gpu",), "bool", default=False, usage="Require GPU detection"),
    Flag(("runtime-class",), usage="Set runtimeClassName on the agent pod"),
    Flag(("service-account-name",), default="aicr", usage="Override default ServiceAccount name"),
    Flag(("timeout",), default="5m0s", usage="Timeout for waiting for Job completion"),
    Flag(("toleration",), "list", usage="Toleration for Job scheduling (format: key=value:effect)"),
    Flag(("kubeconfig", "k"), usage="Path to kubeconfig file"),
    Flag(("format", "t"), default="yaml", usage="output format (json, yaml, table)"),
    Flag(("max-nodes-per-entry",), "int", default=0, usage="Maximum node names per taint/label entry"),
    Flag(("output", "o"), usage="output destination: file path, ConfigMap URI (cm://namespace/name), or stdout"),
    Flag(("template",), usage="Path to Go template file for custom output formatting (requires YAML format)"),
]

#: What a healthy simulated GPU cluster reads.
DEFAULT_READINGS: dict[str, Any] = {
    "K8s.server.version": "v1.33.5",
    "K8s.server.platform": "linux/amd64",
    "K8s.node.kernel-version": "6.8.0-1015-aws",
    "K8s.node.os-image": "Ubuntu 24.04.1 LTS",
    "K8s.node.kubelet-version": "v1.33.5",
    "GPU.smi.gpu-count": 8,
    "GPU.smi.driver": "560.35.03",
    "GPU.smi.cuda-version": "12.6",
    "GPU.smi.gpu.model": "NVIDIA H100 80GB HBM3",
    "OS.release.ID": "ubuntu",
    "OS.release.VERSION_ID": "24.04",
    "OS.release.PRETTY_NAME": "Ubuntu 24.04.1 LTS",
    "OS.sysctl./proc/sys/kernel/osrelease": "6.8.0-1015-aws",
    "NodeTopology.summary.node-count": 3,
}
_SELECTOR = re.compile(r"[^=\s]+=[^=\s]*")
_TOLERATION = re.compile(r"[^=:\s]+(=[^=:\s]*)?:(NoSchedule|PreferNoSchedule|NoExecute)")


def cmd_snapshot(args: list[str], log: Logger) -> int:
    parsed = parse_flags(args, SNAPSHOT_FLAGS)
    _check(parsed.get("node-selector"), parsed.get("toleration"), parsed)
    output = str(parsed.get("output") or "")
    target = _target(output)
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"")  # aicr truncates the file before the run
    result = os.environ.get("FAKE_AICR_SNAPSHOT_RESULT", "ok")
    if result == "unauthorized":
        raise AicrError("UNAUTHORIZED", "insufficient permissions to deploy agent")
    if result == "job-failed":
        raise AicrError("INTERNAL", "job failed", "[INTERNAL] job failed")
    text = yaml.safe_dump(_document(), sort_keys=False)
    if target is None:
        sys.stdout.write(text + "\n")
    else:
        target.write_text(text, encoding="utf-8")
    saved = "snapshot saved to ConfigMap" if output.startswith("cm://") else "snapshot saved to file"
    log.info(saved, output=output, namespace=parsed.get("namespace"), image=parsed.get("image"))
    return 0


def _check(selectors: list[str], tolerations: list[str], parsed: Any) -> None:
    for selector in selectors:
        if not _SELECTOR.fullmatch(selector):
            cause = f'[INVALID_REQUEST] invalid format "{selector}", expected key=value'
            raise AicrError("INVALID_REQUEST", "invalid node-selector", cause)
    for toleration in tolerations:
        if not _TOLERATION.fullmatch(toleration):
            cause = f'[INVALID_REQUEST] invalid format "{toleration}", expected key=value:effect or key:effect'
            raise AicrError("INVALID_REQUEST", "invalid toleration", cause)
    if parsed.get("require-gpu") and parsed.get("runtime-class"):
        raise AicrError(
            "INVALID_REQUEST",
            "--require-gpu and --runtime-class are mutually exclusive; prefer --runtime-class, which provides "
            "nvidia-smi access via the container runtime without consuming a GPU allocation",
        )


def _target(output: str) -> Path | None:
    if output in ("", "-", "stdout"):
        return None
    if not output.startswith("cm://"):
        return Path(output)
    root = os.environ.get("FAKE_AICR_CONFIGMAP_DIR")
    namespace, _, name = output.removeprefix("cm://").partition("/")
    if not root or not namespace or not name:
        raise AicrError("INVALID_REQUEST", f"the fake aicr cannot write {output} (no FAKE_AICR_CONFIGMAP_DIR)")
    return Path(root) / namespace / name / "snapshot.yaml"


def _document() -> dict[str, Any]:
    readings = {**DEFAULT_READINGS, **json.loads(os.environ.get("FAKE_AICR_SNAPSHOT_FACTS") or "{}")}
    by_type: dict[str, dict[str, dict[str, Any]]] = {}
    for path, value in readings.items():
        kind, subtype, key = path.split(".", 2)
        if value is not None:  # null: that collector read nothing
            by_type.setdefault(kind, {}).setdefault(subtype, {})[key] = value
    measurements: list[dict[str, Any]] = [
        {"type": kind, "subtypes": [{"subtype": sub, "data": data} for sub, data in subs.items()]}
        for kind, subs in by_type.items()
    ]
    measurements.append({"type": "SystemD"})  # no D-Bus: the type with no subtypes
    return {
        "kind": "Snapshot",
        "apiVersion": "aicr.nvidia.com/v1alpha1",
        "metadata": {
            "source-node": os.environ.get("NODE_NAME", "fake-gpu-node"),
            "timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "version": VERSION,
        },
        "measurements": measurements,
    }
