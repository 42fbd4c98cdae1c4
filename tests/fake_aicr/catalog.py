"""Recipe data of the fake aicr: the embedded overlay set plus ``--data`` packs.

Resolution follows the contract (section 5, 1.x): an overlay applies when every
concrete value in its criteria equals the stated value of that dimension
(``any``/absent is a wildcard); the applied set is the matches plus their
``spec.base`` chains, ``base`` always first. 1.x strictness: every stated
dimension must be carried by at least one applied overlay, else INVALID_REQUEST
(exit 2) with the supported combinations.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .log import VERSION, AicrError, Logger, legacy

DIMENSIONS = ("service", "accelerator", "intent", "os", "platform")
#: How 0.11.1's criteria parser names each dimension in its errors.
_GO_NAMES = {"service": "service", "accelerator": "accelerator", "intent": "intent", "os": "OS", "platform": "platform"}
GO_KEYS = {
    "service": "Service",
    "accelerator": "Accelerator",
    "intent": "Intent",
    "os": "OS",
    "platform": "Platform",
}
OVERLAY_API_VERSIONS = ("aicr.run/v1beta1", "aicr.run/v1beta2")
REGISTRY_API_VERSION = "aicr.run/v1beta1"
RECIPE_API_VERSIONS = ("aicr.run/v1", "aicr.run/v1beta2")
#: aicr 0.11.1 (FAKE_AICR_VERSION=0.x), as the real v0.11.1 does it: its headers,
#: its hard-coded criteria values (pack overlays cannot add any) and its service
#: aliases, which mean ``any``.
LEGACY_API_VERSION = "aicr.nvidia.com/v1alpha1"
LEGACY_VALID = {
    "service": ["aks", "eks", "gke", "kind", "oke"],
    "accelerator": ["a100", "b200", "gb200", "h100", "l40"],
    "intent": ["inference", "training"],
    "os": ["amazonlinux", "cos", "rhel", "ubuntu"],
    "platform": ["dynamo", "kubeflow"],
}
LEGACY_ALIASES = {"self-managed": "any", "self": "any", "vanilla": "any"}
EMBEDDED_FILE = Path(__file__).with_name("embedded.yaml")
EMBEDDED_VALUES_PREFIX = "components/"
#: libyaml when present: the embedded set is read on every invocation.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class ComponentDef:
    name: str
    namespace: str
    chart: str
    repository: str
    version: str
    aliases: list[str]
    values: dict[str, Any]
    storage_class_paths: list[str]
    source: str  # embedded | external


@dataclass
class Overlay:
    name: str
    criteria: dict[str, str]
    base: str | None
    component_refs: list[dict[str, Any]]
    constraints: list[dict[str, Any]]
    validation: dict[str, list[str]]
    source: str = "embedded"

    @property
    def specificity(self) -> int:
        return len(self.criteria)


@dataclass
class Resolution:
    criteria: dict[str, str]
    applied: list[Overlay]
    components: list[dict[str, Any]]
    deployment_order: list[str]
    constraints: list[dict[str, Any]]
    validation: dict[str, list[str]]

    def document(self, nodes: int | None = None) -> dict[str, Any]:
        criteria: dict[str, Any] = dict(self.criteria)
        if nodes is not None:
            criteria["nodes"] = nodes
        return {
            "kind": "RecipeResult",
            "apiVersion": LEGACY_API_VERSION if legacy() else "aicr.run/v1",
            "metadata": {
                "version": VERSION if legacy() else f"v{VERSION}",
                "appliedOverlays": [overlay.name for overlay in self.applied],
            },
            "criteria": criteria,
            "constraints": self.constraints,
            "componentRefs": self.components,
            "deploymentOrder": self.deployment_order,
            "validation": {phase: {"checks": checks} for phase, checks in self.validation.items()},
        }


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Objects deep-merge, everything else (lists included) replaces."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _criteria(raw: Any, where: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise AicrError("INVALID_REQUEST", f"{where}: spec.criteria must be a mapping")
    out: dict[str, str] = {}
    for key, value in raw.items():
        if key not in DIMENSIONS:
            raise AicrError("INVALID_REQUEST", f"{where}: unknown criteria field {key!r}")
        text = str(value).strip().lower()
        if text and text != "any":
            out[key] = text
    return out


def _validation(raw: Any) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for phase, body in (raw or {}).items():
        checks = body.get("checks", []) if isinstance(body, dict) else body
        out[str(phase)] = [str(check) for check in checks or []]
    return out


def _component_def(entry: dict[str, Any], source: str, where: str) -> ComponentDef:
    name = entry.get("name")
    if not name:
        raise AicrError("INVALID_REQUEST", f"{where}: component without a name")
    helm = entry.get("helm") or {}
    return ComponentDef(
        name=str(name),
        namespace=str(helm.get("defaultNamespace") or name),
        chart=str(helm.get("defaultChart") or name),
        repository=str(helm.get("defaultRepository") or ""),
        version=str(helm.get("defaultVersion") or ""),
        aliases=[str(alias) for alias in entry.get("valueOverrideKeys") or []],
        values=dict(entry.get("values") or {}),
        storage_class_paths=[str(path) for path in entry.get("storageClassPaths") or []],
        source=source,
    )


def _read_yaml(path: Path, where: str) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise AicrError("INVALID_REQUEST", f"failed to parse {where}", exc) from exc


@dataclass
class Catalog:
    registry: dict[str, ComponentDef]
    overlays: dict[str, Overlay]
    valid: dict[str, list[str]]
    aliases: dict[str, str]
    data_dir: Path | None = None
    external_components: int = 0
    embedded_components: int = 0
    warnings: list[str] = field(default_factory=list)

    # -- loading -----------------------------------------------------------

    @classmethod
    def load(cls, data_dir: str | None = None, *, strict: bool = False, log: Logger | None = None) -> Catalog:
        embedded = yaml.load(EMBEDDED_FILE.read_text(encoding="utf-8"), Loader=_LOADER)  # noqa: S506 - safe loader
        registry = {
            entry["name"]: _component_def(entry, "embedded", "embedded registry")
            for entry in embedded["registry"]["components"]
        }
        # Test knob: serve every embedded chart from one (local) repository.
        chart_repo = os.environ.get("FAKE_AICR_CHART_REPO", "").strip()
        if chart_repo:
            for component in registry.values():
                component.repository = chart_repo
        overlays: dict[str, Overlay] = {}
        for raw in embedded["overlays"]:
            overlays[raw["name"]] = Overlay(
                name=raw["name"],
                criteria=_criteria(raw.get("criteria"), raw["name"]),
                base=raw.get("base") or (None if raw["name"] == "base" else "base"),
                component_refs=[dict(ref) for ref in raw.get("componentRefs") or []],
                constraints=list(raw.get("constraints") or []),
                validation={phase: list(checks) for phase, checks in (raw.get("validation") or {}).items()},
            )
        valid = LEGACY_VALID if legacy() else embedded["criteria"]
        catalog = cls(
            registry=registry,
            overlays=overlays,
            valid={dim: list(values) for dim, values in valid.items()},
            aliases=dict(LEGACY_ALIASES if legacy() else embedded.get("serviceAliases") or {}),
            embedded_components=len(registry),
        )
        if data_dir is not None:
            catalog._load_pack(Path(data_dir), strict=strict, log=log)
        return catalog

    def _load_pack(self, root: Path, *, strict: bool, log: Logger | None) -> None:
        if not root.is_dir():
            raise AicrError("NOT_FOUND", f"external data directory not found: {root}")
        if log:
            log.info("initializing external data provider", path=str(root))
        registry_file = root / "registry.yaml"
        if not registry_file.is_file():
            raise AicrError("INVALID_REQUEST", "registry.yaml is required in external data directory")
        for path in sorted(root.rglob("*")):
            if path.is_symlink():
                raise AicrError(
                    "INVALID_REQUEST", f"symlinks are not allowed in external data: {path.relative_to(root)}"
                )
        doc = _read_yaml(registry_file, "registry.yaml") or {}
        expected = LEGACY_API_VERSION if legacy() else REGISTRY_API_VERSION
        if doc.get("apiVersion") != expected or doc.get("kind") != "ComponentRegistry":
            raise AicrError(
                "INVALID_REQUEST",
                f"registry.yaml: expected apiVersion {expected} kind ComponentRegistry, "
                f"got apiVersion {doc.get('apiVersion')!r} kind {doc.get('kind')!r}",
            )
        external = [_component_def(entry, "external", "registry.yaml") for entry in doc.get("components") or []]
        for component in external:
            # An external entry replaces the embedded one wholesale.
            self.registry[component.name] = component
        self.external_components = len(external)
        self._load_pack_overlays(root, strict=strict)
        for overlay in self.overlays.values():
            if overlay.base and overlay.base not in self.overlays:
                raise AicrError("INVALID_REQUEST", f"overlay {overlay.name!r}: base {overlay.base!r} not found")
        self.data_dir = root
        if log:
            log.info(
                "merged component registries",
                embedded_components=self.embedded_components,
                external_components=self.external_components,
                merged_components=len(self.registry),
            )

    def _load_pack_overlays(self, root: Path, *, strict: bool) -> None:
        overlay_dir = root / "overlays"
        files = sorted([*overlay_dir.rglob("*.yaml"), *overlay_dir.rglob("*.yml")]) if overlay_dir.is_dir() else []
        for path in files:
            rel = path.relative_to(root).as_posix()
            doc = _read_yaml(path, rel) or {}
            accepted = (LEGACY_API_VERSION,) if legacy() else OVERLAY_API_VERSIONS
            if doc.get("kind") != "RecipeMetadata" or doc.get("apiVersion") not in accepted:
                raise AicrError(
                    "INVALID_REQUEST",
                    f"{rel}: expected kind RecipeMetadata with apiVersion "
                    f"{' or '.join(accepted)}, "
                    f"got apiVersion {doc.get('apiVersion')!r} kind {doc.get('kind')!r}",
                )
            name = (doc.get("metadata") or {}).get("name")
            if not name:
                raise AicrError("INVALID_REQUEST", f"{rel}: metadata.name is required")
            spec = doc.get("spec") or {}
            criteria = _criteria(spec.get("criteria"), rel)
            self.overlays[name] = Overlay(
                name=str(name),
                criteria=criteria,
                base=spec.get("base") or (None if name == "base" else "base"),
                component_refs=[dict(ref) for ref in spec.get("componentRefs") or []],
                constraints=list(spec.get("constraints") or []),
                validation=_validation(spec.get("validation")),
                source="external",
            )
            if not strict and not legacy():
                # 1.x: a pack registers new criteria values for this run (0.11 cannot).
                for dim, value in criteria.items():
                    if value not in self.valid[dim]:
                        self.valid[dim].append(value)

    # -- criteria ------------------------------------------------------------

    def normalise(self, raw: dict[str, str | None]) -> dict[str, str]:
        """Map aliases, lower-case, check values. Returns all five dimensions."""
        out: dict[str, str] = {}
        for dim in DIMENSIONS:
            value = (raw.get(dim) or "").strip().lower()
            if dim == "service":
                value = self.aliases.get(value, value)
            if not value or value == "any":
                out[dim] = "any"
                continue
            if value not in self.valid[dim]:
                invalid = AicrError("INVALID_REQUEST", f"invalid {dim} type: {value}")
                if legacy():
                    # 0.11.1's chain, every level wrapped; the outermost INTERNAL makes it exit 8.
                    parse = AicrError("INVALID_REQUEST", f"failed to parse {_GO_NAMES[dim]} type", invalid)
                    option = AicrError("INVALID_REQUEST", "failed to apply criteria option", parse)
                    criteria = AicrError("INVALID_REQUEST", "error parsing criteria", option)
                    raise AicrError("INTERNAL", "error building recipe", criteria)
                raise invalid
            out[dim] = value
        return out

    # -- resolution ----------------------------------------------------------

    def _chain(self, overlay: Overlay) -> list[Overlay]:
        chain: list[Overlay] = []
        seen: set[str] = set()
        current: Overlay | None = overlay
        while current is not None and current.name not in seen:
            chain.append(current)
            seen.add(current.name)
            current = self.overlays.get(current.base) if current.base else None
        return chain

    def resolve(self, criteria: dict[str, str]) -> Resolution:
        stated = {dim: value for dim, value in criteria.items() if value != "any"}
        if not stated:
            more = ", --nodes, --criteria, or use --snapshot to load from a snapshot file" if legacy() else ""
            refused = AicrError(
                "INVALID_REQUEST",
                "no criteria provided: specify at least one of --service, --accelerator, --intent, --os, "
                f"--platform{more}",
            )
            raise AicrError("INTERNAL", "error building recipe", refused) if legacy() else refused
        matched = [
            overlay
            for overlay in self.overlays.values()
            if all(stated.get(dim) == value for dim, value in overlay.criteria.items())
        ]
        applied_by_name: dict[str, Overlay] = {}
        for overlay in matched:
            for member in self._chain(overlay):
                applied_by_name[member.name] = member
        applied = sorted(applied_by_name.values(), key=lambda o: (o.name != "base", o.specificity, o.name))
        for dim in DIMENSIONS:
            # 1.x refuses a stated value no applied overlay carries; 0.11 resolves without it.
            if dim in stated and not legacy() and not any(o.criteria.get(dim) == stated[dim] for o in applied):
                raise AicrError("INVALID_REQUEST", self._uncarried_message(dim, stated))
        components, order = self._merge_components(applied)
        constraints: dict[str, dict[str, Any]] = {}
        validation: dict[str, list[str]] = {}
        for overlay in applied:
            for constraint in overlay.constraints:
                constraints[str(constraint["name"])] = dict(constraint)
            for phase, checks in overlay.validation.items():
                bucket = validation.setdefault(phase, [])
                bucket.extend(check for check in checks if check not in bucket)
        return Resolution(
            criteria=dict(criteria),
            applied=applied,
            components=components,
            deployment_order=order,
            constraints=list(constraints.values()),
            validation=validation,
        )

    def _uncarried_message(self, dim: str, stated: dict[str, str]) -> str:
        value = stated[dim]
        carriers = [o for o in self.overlays.values() if o.criteria.get(dim) == value]
        if not carriers:
            return f"no recipe provides {dim} '{value}'"
        combos: list[dict[str, str]] = []
        for overlay in carriers:
            combo = {d: v for d, v in overlay.criteria.items() if d != dim}
            if combo not in combos:
                combos.append(combo)
        minimal = [
            combo for combo in combos if not any(other != combo and other.items() <= combo.items() for other in combos)
        ]
        text = ", ".join(sorted("(" + ", ".join(f"{d}={c[d]}" for d in DIMENSIONS if d in c) + ")" for c in minimal))
        compatible = any(
            all(stated.get(d) in (None, v) for d, v in overlay.criteria.items() if d != dim) for overlay in carriers
        )
        if compatible:
            return f"{dim} '{value}' requires additional criteria; supported combinations: {text}"
        others = ", ".join(f"{d}={stated[d]}" for d in DIMENSIONS if d in stated and d != dim)
        return f"no recipe provides {dim} '{value}' with {others}; supported combinations: {text}"

    def _merge_components(self, applied: list[Overlay]) -> tuple[list[dict[str, Any]], list[str]]:
        refs: dict[str, dict[str, Any]] = {}
        for overlay in applied:
            for ref in overlay.component_refs:
                name = str(ref["name"])
                if ref.get("enabled") is False:
                    refs.pop(name, None)
                    continue
                _merge_ref(refs.setdefault(name, {"name": name}), ref)
        components = [self._complete_ref(name, ref) for name, ref in refs.items()]
        return components, _topological(components)

    def _complete_ref(self, name: str, ref: dict[str, Any]) -> dict[str, Any]:
        """Fill chart coordinates from the registry; a version is mandatory."""
        known = self.registry.get(name)
        if known is None and not ref.get("source"):
            raise AicrError("INVALID_REQUEST", f'component "{name}" is not in the component registry')
        version = str(ref.get("version") or (known.version if known else ""))
        if not version:
            raise AicrError(
                "INVALID_REQUEST",
                f'component "{name}" has no effective chart version: set helm.defaultVersion in '
                "registry.yaml or version in the componentRef",
            )
        out: dict[str, Any] = {
            "name": name,
            "namespace": str(ref.get("namespace") or (known.namespace if known else name)),
            "chart": str(ref.get("chart") or (known.chart if known else name)),
            "type": str(ref.get("type") or "Helm"),
            "source": str(ref.get("source") or (known.repository if known else "")),
            "version": version,
        }
        if ref.get("valuesFile"):
            out["valuesFile"] = str(ref["valuesFile"])
        elif known is not None and known.source == "embedded":
            out["valuesFile"] = f"{EMBEDDED_VALUES_PREFIX}{name}/values.yaml"
        if ref.get("overrides"):
            out["overrides"] = ref["overrides"]
        if ref.get("dependencyRefs"):
            out["dependencyRefs"] = list(ref["dependencyRefs"])
        return out

    # -- recipe list ---------------------------------------------------------

    def is_leaf(self, overlay: Overlay) -> bool:
        if overlay.name == "base":
            return False
        for other in self.overlays.values():
            if other is overlay:
                continue
            if other.base == overlay.name:
                return False
            if overlay.criteria.items() < other.criteria.items():
                return False
        return True

    def list_entries(self, filters: dict[str, str], *, health: bool) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = []
        for overlay in sorted(self.overlays.values(), key=lambda o: o.name):
            if any(overlay.criteria.get(dim, "any") not in (value, "any") for dim, value in filters.items()):
                continue
            entry: dict[str, Any] = {
                "name": overlay.name,
                "criteria": {GO_KEYS[dim]: overlay.criteria.get(dim, "any") for dim in DIMENSIONS},
                "is_leaf": self.is_leaf(overlay),
                "source": overlay.source,
            }
            if health:
                entry["health"] = _health(self, overlay)
            entries.append(entry)
        return entries


def _health(catalog: Catalog, overlay: Overlay) -> dict[str, str]:
    """Resolve the overlay's own criteria: a leaf that does not resolve fails."""
    if not overlay.criteria:
        return {"status": "unknown", "coverage": "-"}
    criteria = {dim: overlay.criteria.get(dim, "any") for dim in DIMENSIONS}
    try:
        resolution = catalog.resolve(criteria)
    except AicrError:
        return {"status": "fail", "coverage": "-"}
    checks = resolution.validation
    coverage = "R:{} D:{} P:{} C:{}".format(
        len(resolution.constraints),
        len(checks.get("deployment", [])),
        len(checks.get("performance", [])),
        len(checks.get("conformance", [])),
    )
    return {"status": "pass", "coverage": coverage}


def _merge_ref(current: dict[str, Any], ref: dict[str, Any]) -> None:
    """A later overlay's ref refines an earlier one: overrides deep-merge,
    dependencies accumulate, other fields replace."""
    for key, value in ref.items():
        if key == "overrides":
            current["overrides"] = deep_merge(current.get("overrides", {}), value or {})
        elif key == "dependencyRefs":
            deps = current.setdefault("dependencyRefs", [])
            deps.extend(dep for dep in value or [] if dep not in deps)
        elif key != "enabled":
            current[key] = value


def _topological(components: list[dict[str, Any]]) -> list[str]:
    names = [component["name"] for component in components]
    deps = {
        component["name"]: [dep for dep in component.get("dependencyRefs", []) if dep in names]
        for component in components
    }
    order: list[str] = []
    remaining = list(names)
    while remaining:
        ready = [name for name in remaining if all(dep in order for dep in deps[name])]
        if not ready:
            raise AicrError("INVALID_REQUEST", f"dependency cycle among components: {', '.join(remaining)}")
        order.append(ready[0])
        remaining.remove(ready[0])
    return order
