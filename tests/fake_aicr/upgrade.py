"""``aicr upgrade-check`` (1.x; present by v1.0.0; v0.11.1 has none).

From the aicr CLI contract (section 12, 1.x documentation and source only: no 1.x
binary runs here): ``--from/-f`` a recipe file, a bundle directory (its
``recipe.yaml``), ``cm://ns/name`` or ``cluster``; ``--to`` (required with
``--from cluster``); ``--deployer/-d`` (required with ``--from cluster``);
``--fail-on-error`` (default true); ``--format/-t`` (default table; json, yaml);
``--output/-o``. Exit 0 when every component is safe; 2 (CONFLICT ``upgrade check
failed: N component change(s) need attention``) otherwise, the report written
first. Log line ``upgrade check complete components=N failing=M``.

Not in the contract, so the fake's own: the JSON field names (``components[]`` of
``name``, ``from``, ``to``, ``verdict``, ``steps``, ``earliestFrom``,
``reference``), ``--omit --to`` re-resolution (refused here), ``cluster`` read
from ``FAKE_AICR_UPGRADE_CLUSTER`` (a recipe file standing for what is installed),
and ``cm://`` read from ``$FAKE_AICR_CONFIGMAP_DIR/<ns>/<name>/recipe.yaml``.

The transition records the real binary ships are a table a test sets:
``FAKE_AICR_UPGRADE_TRANSITIONS`` = JSON ``{"<component>": {"verdict": "blocked",
"earliestFrom": "v25.10.2", "reference": "...", "steps": [...]}}``; a key
``"<component>:<from>:<to>"`` matches that move only and wins. A component whose
version moved and has no record is ``unknown``; one with no installed version is
``unversioned``; an unchanged one is ``safe``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from .log import AicrError, Flag, Logger, parse_flags

UPGRADE_FLAGS = [
    Flag(("from", "f"), usage="source: recipe file, bundle directory, cm://namespace/name, or cluster"),
    Flag(("to",), usage="target recipe (omit to re-resolve --from's criteria)"),
    Flag(("deployer", "d"), usage="deployer (argocd, argocd-helm, flux, helm, helmfile)"),
    Flag(("scan-cluster",), "bool", default=False, usage="advisory cluster scan"),
    Flag(("fail-on-error",), "bool", default=True, usage="exit non-zero when a component needs attention"),
    Flag(("output", "o"), usage="output destination: file path or stdout"),
    Flag(("format", "t"), default="table", usage="output format (json, yaml, table)"),
    Flag(("kubeconfig", "k"), usage="Path to kubeconfig file"),
]
DEPLOYERS = ("argocd", "argocd-helm", "flux", "helm", "helmfile")
ATTENTION = ("manual", "blocked", "unknown", "unversioned")


def _recipe(source: str) -> dict[str, Any]:
    if source == "cluster":
        source = os.environ.get("FAKE_AICR_UPGRADE_CLUSTER", "")
        if not source:
            raise AicrError("UNAVAILABLE", "cannot read the cluster (the fake: FAKE_AICR_UPGRADE_CLUSTER is unset)")
    elif source.startswith("cm://"):
        namespace, _, name = source.removeprefix("cm://").partition("/")
        source = str(Path(os.environ.get("FAKE_AICR_CONFIGMAP_DIR", "")) / namespace / name / "recipe.yaml")
    path = Path(source)
    if path.is_dir():
        path = path / "recipe.yaml"
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AicrError("NOT_FOUND", f"failed to read {source}", exc) from exc
    if not isinstance(doc, dict) or doc.get("kind") != "RecipeResult":
        raise AicrError("INVALID_REQUEST", f"{source} is not a RecipeResult")
    return doc


def _versions(doc: dict[str, Any]) -> dict[str, str]:
    return {str(ref["name"]): str(ref.get("version") or "") for ref in doc.get("componentRefs") or []}


def _verdict(name: str, source: str, target: str, table: dict[str, Any]) -> dict[str, Any]:
    record = table.get(f"{name}:{source}:{target}") or table.get(name)
    if source == target:
        entry: dict[str, Any] = {"verdict": "safe"}
    elif not source:
        entry = {"verdict": "unversioned"}
    elif record is None:
        entry = {"verdict": "unknown"}
    else:
        entry = dict(record)
    return {"name": name, "from": source, "to": target, "steps": [], "earliestFrom": "", "reference": "", **entry}


def _render(report: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(report, indent=2) + "\n"
    if fmt == "yaml":
        return yaml.safe_dump(report, sort_keys=False)
    lines = [f"{'COMPONENT':<28} {'FROM':<14} {'TO':<14} VERDICT"]
    for c in report["components"]:
        lines.append(f"{c['name']:<28} {c['from'] or '-':<14} {c['to'] or '-':<14} {c['verdict']}")
    return "\n".join(lines) + "\n"


def cmd_upgrade_check(args: list[str], log: Logger) -> int:
    parsed = parse_flags(args, UPGRADE_FLAGS)
    source, target = parsed.get("from"), parsed.get("to")
    deployer, fmt = parsed.get("deployer"), str(parsed.get("format")).lower()
    if not source:
        raise AicrError("INVALID_REQUEST", "--from is required")
    if source == "cluster" and not (target and deployer):
        raise AicrError("INVALID_REQUEST", "--from cluster requires --to and --deployer")
    if not target:
        raise AicrError("INVALID_REQUEST", "the fake aicr cannot re-resolve --from's criteria: give --to")
    if deployer and deployer not in DEPLOYERS:
        raise AicrError("INVALID_REQUEST", f'unknown deployer: "{deployer}"')
    if fmt not in ("json", "yaml", "table"):
        raise AicrError("INVALID_REQUEST", f'unknown output format: "{fmt}", valid formats are: yaml, json, table')
    table = json.loads(os.environ.get("FAKE_AICR_UPGRADE_TRANSITIONS") or "{}")
    before, after = _versions(_recipe(source)), _versions(_recipe(target))
    components = [_verdict(name, before.get(name, ""), version, table) for name, version in after.items()]
    if any(c["verdict"] == "manual" for c in components) and not deployer:
        raise AicrError("INVALID_REQUEST", "--deployer is required when a component needs steps")
    failing = sum(1 for c in components if c["verdict"] in ATTENTION)
    report = {"from": source, "to": target, "components": components}
    text = _render(report, fmt)
    output = parsed.get("output")
    if output:
        Path(output).write_text(text, encoding="utf-8")
    else:
        print(text, end="")
    log.info("upgrade check complete", components=len(components), failing=failing)
    if failing and parsed.get("fail-on-error"):
        raise AicrError("CONFLICT", f"upgrade check failed: {failing} component change(s) need attention")
    return 0
