"""The resolved recipe: the RecipeResult document, the operator's expectations,
and aicr's rejection message.

aicr logs as a JSON record with ``--log-json`` or as ``[cli] msg: k=v ...``
text (0.11 wraps text lines in ANSI colour). A rejected query ends with
``command failed`` whose ``error`` is ``[CODE] message``, possibly wrapping
another ``[CODE] message``; the innermost one names the problem and, in 1.x,
the supported combinations.
"""

from __future__ import annotations

import io
import json
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from aicr_runner.errors import ExitCode, RecipeFormatError, RunnerError
from aicr_runner.settings.config import Criteria, RecipeExpectations, RunnerSettings
from aicr_runner.settings.criteria_catalog import SERVICE_ALIASES
from aicr_runner.settings.names import CRITERIA_DIMENSIONS

__all__ = [
    "ACCEPTED_API_VERSIONS",
    "LEGACY_API_VERSIONS",
    "Component",
    "RecipeSummary",
    "check_expectations",
    "component_table",
    "dropped_values",
    "inflate_recorded",
    "last_error",
    "load_recipe",
    "pack_overlay_criteria",
    "parse_recipe",
    "parse_rejection",
    "summary_text",
    "thin_resolution_warnings",
    "unknown_value",
    "unknown_value_refusal",
]

#: What aicr 1.x writes and reads (v1beta2 for profile-bearing recipes).
ACCEPTED_API_VERSIONS = ("aicr.run/v1", "aicr.run/v1beta2")
#: Older aicr releases a pin may still select; parsed, never written.
LEGACY_API_VERSIONS = ("aicr.nvidia.com/v1alpha1", "aicr.run/v1alpha2", "aicr.run/v1alpha3")
FAILURE_MESSAGE = "command failed"
#: Overlays every query gets; a recipe of only these matched nothing specific.
BASE_OVERLAYS = frozenset({"base", "monitoring-hpa"})
#: Every dimension but platform, which most clusters need not state.
_CORE_DIMENSIONS = tuple(name for name in CRITERIA_DIMENSIONS if name != "platform")

#: libyaml's safe loader parses the same documents several times faster.
_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CODE_PREFIX = re.compile(r"\[[A-Z][A-Z_]*\] ")
_COMBINATION = re.compile(r"\(([^()]*)\)")


@dataclass(frozen=True)
class Component:
    name: str
    namespace: str = ""
    chart: str = ""
    version: str = ""
    source: str = ""
    type: str = ""

    def as_row(self) -> dict[str, str]:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "chart": self.chart,
            "version": self.version,
            "source": self.source,
            "type": self.type,
        }


@dataclass(frozen=True)
class RecipeSummary:
    components: tuple[Component, ...]
    applied_overlays: tuple[str, ...] = ()
    criteria: Mapping[str, str] = field(default_factory=dict)
    api_version: str = ""
    deployment_order: tuple[str, ...] = ()
    constraints: Mapping[str, str] = field(default_factory=dict)
    #: The aicr that resolved it (``metadata.version``); "" when the recipe does not say.
    aicr_version: str = ""

    @property
    def component_names(self) -> list[str]:
        return [component.name for component in self.components]

    @property
    def legacy(self) -> bool:
        return self.api_version in LEGACY_API_VERSIONS

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, str]]) -> RecipeSummary:
        """Rebuild the component list from ``Component.as_row`` dicts (the run report)."""
        fields = ("namespace", "chart", "version", "source", "type")
        return cls(
            components=tuple(
                Component(name=str(row["name"]), **{key: str(row.get(key, "")) for key in fields}) for row in rows
            )
        )


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def parse_recipe(text: str, *, where: str = "recipe") -> RecipeSummary:
    """Parse a RecipeResult document (YAML or JSON)."""
    try:
        doc = yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506 - a safe loader, the C one when built
    except yaml.YAMLError as exc:
        raise RecipeFormatError(f"{where}: not valid YAML ({exc})") from exc
    if not isinstance(doc, dict):
        raise RecipeFormatError(f"{where}: expected a RecipeResult mapping, got {type(doc).__name__}")
    api_version = _text(doc.get("apiVersion"))
    if api_version not in ACCEPTED_API_VERSIONS + LEGACY_API_VERSIONS:
        raise RecipeFormatError(
            f"{where}: apiVersion {api_version!r} is not a recipe this runner reads "
            f"(expected {' or '.join(ACCEPTED_API_VERSIONS)})"
        )
    if doc.get("kind", "RecipeResult") != "RecipeResult":
        raise RecipeFormatError(f"{where}: kind {doc.get('kind')!r}, expected RecipeResult")
    refs = doc.get("componentRefs") or []
    if not isinstance(refs, list) or not all(isinstance(ref, dict) and ref.get("name") for ref in refs):
        raise RecipeFormatError(f"{where}: componentRefs must be a list of entries with a name")
    metadata = doc.get("metadata") or {}
    criteria = doc.get("criteria") or {}
    constraints = doc.get("constraints") or []
    return RecipeSummary(
        components=tuple(_component(ref) for ref in refs),
        applied_overlays=tuple(_text(name) for name in metadata.get("appliedOverlays") or []),
        criteria={_text(key): _text(value) for key, value in criteria.items()} if isinstance(criteria, dict) else {},
        api_version=api_version,
        deployment_order=tuple(_text(name) for name in doc.get("deploymentOrder") or []),
        constraints={
            _text(item.get("name")): _text(item.get("value")) for item in constraints if isinstance(item, dict)
        },
        aicr_version=_text(metadata.get("version")) if isinstance(metadata, dict) else "",
    )


def _component(ref: Mapping[str, Any]) -> Component:
    """One entry of a recipe's componentRefs."""
    return Component(
        name=_text(ref["name"]),
        namespace=_text(ref.get("namespace")),
        chart=_text(ref.get("chart")),
        version=_text(ref.get("version")),
        source=_text(ref.get("source")),
        type=_text(ref.get("type")),
    )


def recorded_criteria(path: Path) -> dict[str, str]:
    """The criteria a recorded recipe was resolved for (``any`` and empty left out);
    empty when the file is no recipe (the validate step says so, exit 2)."""
    try:
        criteria = parse_recipe(path.read_text(encoding="utf-8"), where=str(path)).criteria
    except (OSError, UnicodeDecodeError, RecipeFormatError):
        return {}
    return {k: v for k, v in criteria.items() if k in CRITERIA_DIMENSIONS and v and v != "any"}


#: The largest recorded recipe read, decompressed (a real one is tens of KiB): a
#: compression bomb stops here, not at the memory limit.
RECORDED_RECIPE_LIMIT = 16 * 1024 * 1024


def read_recorded(path: Path) -> bytes:
    """The recipe recorded at install: ``path``, or ``path``.gz (the recipe ConfigMap
    stores a large recipe gzip-compressed), at most ``RECORDED_RECIPE_LIMIT`` bytes
    decompressed. A missing, unreadable or oversized one is bad input (exit 2):
    validation never falls back to resolving the recipe again."""
    compressed = path.with_name(path.name + ".gz") if path.name else None
    try:
        if path.is_file():
            return _bounded_read(path, path.open("rb"))
        if compressed is not None and compressed.is_file():
            import gzip

            return _bounded_read(path, gzip.open(compressed, "rb"))
    except (OSError, EOFError, zlib.error) as exc:
        raise RunnerError(
            f"--recipe {path}: cannot read the recorded recipe: {exc}", exit_code=ExitCode.BAD_INPUT
        ) from exc
    raise RunnerError(
        f"--recipe {path}: no recorded recipe (nor {compressed.name if compressed else 'a .gz'}); validation "
        "needs the recipe an install recorded (the recipe ConfigMap, recipe.configMap): install first",
        exit_code=ExitCode.BAD_INPUT,
    )


def inflate_recorded(blob: bytes, where: str) -> bytes:
    """A recorded recipe the capture stored gzip-compressed, at most
    ``RECORDED_RECIPE_LIMIT`` bytes inflated; anything else is a RecipeFormatError."""
    import gzip

    try:
        with gzip.GzipFile(fileobj=io.BytesIO(blob)) as handle:
            raw = handle.read(RECORDED_RECIPE_LIMIT + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise RecipeFormatError(f"{where}: not a gzip-compressed recipe: {exc}") from exc
    if len(raw) > RECORDED_RECIPE_LIMIT:
        raise RecipeFormatError(f"{where}: over {RECORDED_RECIPE_LIMIT} bytes inflated: not a recipe")
    return raw


def _bounded_read(path: Path, handle: io.BufferedIOBase) -> bytes:
    with handle:
        raw = handle.read(RECORDED_RECIPE_LIMIT + 1)
    if len(raw) > RECORDED_RECIPE_LIMIT:
        raise RunnerError(
            f"--recipe {path}: the recorded recipe is over {RECORDED_RECIPE_LIMIT} bytes (decompressed): not a recipe",
            exit_code=ExitCode.BAD_INPUT,
        )
    return raw


def load_recipe(path: Path) -> RecipeSummary:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RecipeFormatError(f"cannot read the recipe {path}: {exc.strerror or exc}") from exc
    return parse_recipe(text, where=str(path))


# ---------------------------------------------------------------------------
# log lines
# ---------------------------------------------------------------------------


def _record(line: str) -> dict[str, Any] | None:
    """A log line as a flat record: a --log-json object, or text key=values."""
    text = _ANSI.sub("", line).strip()
    if text.startswith("{"):
        try:
            record = json.loads(text)
        except ValueError:
            return None
        return record if isinstance(record, dict) else None
    index = text.find(FAILURE_MESSAGE)
    if index == -1:
        return None
    # Text mode is "[cli] msg: k=v k=v"; --debug is slog's "... msg="msg" k=v".
    rest = text[index + len(FAILURE_MESSAGE) :].lstrip('": ')
    return {"msg": FAILURE_MESSAGE, **_key_values(rest)}


_KEY_VALUE = re.compile(r'(?:^|\s)([A-Za-z_][\w.]*)=("(?:[^"\\]|\\.)*"|.*?)(?=\s+[A-Za-z_][\w.]*=|$)')


def _key_values(text: str) -> dict[str, str]:
    """``k=v`` pairs; a value runs to the next `` key=`` (values may hold spaces,
    as ``componentNames=a, b`` does), or is a slog-quoted string."""
    pairs: dict[str, str] = {}
    for key, raw in _KEY_VALUE.findall(text):
        pairs[key] = json.loads(raw) if raw.startswith('"') and raw.endswith('"') and len(raw) > 1 else raw
    return pairs


def _failure_error(line: str) -> str | None:
    text = _ANSI.sub("", line).strip()
    record = _record(text)
    if record is None or record.get("msg") != FAILURE_MESSAGE:
        return None
    if not text.startswith("{"):
        # The error text may itself hold "k=v" pairs ("(service=aks)"): take all of
        # it up to the final exitCode.
        match = re.search(r"error=(.*?)(?:\s+exitCode=\d+)?$", text)
        if match:
            raw = match.group(1)
            return str(json.loads(raw)) if raw.startswith('"') and raw.endswith('"') else raw
    return _text(record.get("error"))


def last_error(log_lines: Sequence[str]) -> str:
    """The ``error`` of aicr's last ``command failed`` record, whole (every
    ``[CODE]`` kept); empty when there is none."""
    return next((found for line in reversed(log_lines) if (found := _failure_error(line)) is not None), "")


def with_supported(message: str, supported: Sequence[str]) -> str:
    """``message`` plus the supported combinations, unless it lists them already."""
    if not supported or "supported combinations:" in message:
        return message
    return f"{message}; supported combinations: {', '.join(supported)}"


_UNKNOWN_VALUE = re.compile(rf"invalid ({'|'.join(CRITERIA_DIMENSIONS)}) type: (\S+)", re.IGNORECASE)


def unknown_value(message: str) -> tuple[str, str] | None:
    """``(dimension, value)`` when aicr's rejection says it does not know a
    criteria value (``invalid service type: lke``); None otherwise."""
    match = _UNKNOWN_VALUE.search(message)
    return (match.group(1).lower(), match.group(2)) if match else None


def unknown_value_refusal(
    named: str, exit_code: int, message: str, *, dimension: str, value: str, known: Sequence[str]
) -> str:
    """The refusal of a criteria value ``named`` (an aicr) does not know, with
    the values its ``recipe --help`` lists (``known``), or that it lists none."""
    text = f"{named} does not know {dimension} '{value}' (aicr recipe exit {exit_code}: {message})"
    if known:
        return text + "; supported combinations: " + ", ".join(f"({dimension}={v})" for v in known)
    return text + f"; its recipe --help lists no {dimension} values"


def parse_rejection(log_lines: Sequence[str]) -> tuple[str, list[str]]:
    """aicr's reason for refusing a request and, when it lists them, the
    supported criteria combinations (each like ``service=cks, os=ubuntu``).

    Falls back to the last non-empty line when there is no ``command failed``
    record (a crash, a usage error).
    """
    error = next((found for line in reversed(log_lines) if (found := _failure_error(line)) is not None), None)
    if error is None:
        last = next((_ANSI.sub("", line).strip() for line in reversed(log_lines) if line.strip()), "")
        record = _record(last) if last.startswith("{") else None
        return (_text(record.get("msg")) if record else last), []
    pieces = _CODE_PREFIX.split(error)
    message = pieces[-1].strip() or error.strip()
    supported: list[str] = []
    if "supported combinations:" in message:
        listed = message.split("supported combinations:", 1)[1]
        supported = [combo.strip() for combo in _COMBINATION.findall(listed) if combo.strip()]
    elif match := re.search(r"requires (\w+) \(valid: ([^)]*)\)", message):
        dimension, values = match.groups()
        supported = [f"{dimension}={value.strip()}" for value in values.split(",") if value.strip()]
    return message, supported


# ---------------------------------------------------------------------------
# expectations
# ---------------------------------------------------------------------------


def _listing(names: Iterable[str]) -> str:
    return ", ".join(names) or "none"


def check_expectations(summary: RecipeSummary, expect: RecipeExpectations) -> list[str]:
    """One problem per unmet expectation, each naming what is missing and what
    resolved. Empty when the recipe meets them all."""
    names = summary.component_names
    problems: list[str] = []
    if expect.min_components and len(names) < expect.min_components:
        problems.append(
            f"resolved {len(names)} components, expected at least {expect.min_components} (resolved: {_listing(names)})"
        )
    missing = [name for name in expect.components if name not in names]
    if missing:
        problems.append(f"expected components missing: {_listing(missing)} (resolved: {_listing(names)})")
    absent = [name for name in expect.overlays if name not in summary.applied_overlays]
    if absent:
        problems.append(
            f"expected overlays not applied: {_listing(absent)} (applied: {_listing(summary.applied_overlays)})"
        )
    return problems


def _carries(overlay: str, dimension: str, value: str, known: Mapping[str, Mapping[str, str]]) -> bool:
    """Whether the applied ``overlay`` names ``dimension=value``: from its criteria
    when known (the catalog of the running aicr, the pack's overlays), otherwise
    from its name, which aicr composes of the values it carries (``h100-eks-training``)."""
    criteria = known.get(overlay)
    if criteria is not None:
        return criteria.get(dimension) == value
    return f"-{value}-" in f"-{overlay}-"


def dropped_values(
    summary: RecipeSummary, criteria: Criteria, known: Mapping[str, Mapping[str, str]] | None = None
) -> list[str]:
    """The stated criteria no applied overlay carries: aicr 0.11 resolves such a
    query without them (and echoes them back in the recipe's criteria)."""
    if not summary.applied_overlays:
        return []
    return [
        name
        for name, value in criteria.stated().items()
        if value != "any"
        and value not in SERVICE_ALIASES  # aicr maps them to another value: the echo check below says which
        and not any(_carries(o, name, value, known or {}) for o in summary.applied_overlays)
    ]


def thin_resolution_warnings(
    summary: RecipeSummary, criteria: Criteria, known: Mapping[str, Mapping[str, str]] | None = None
) -> list[str]:
    """Reasons to suspect the recipe is thinner than intended (a query that
    silently matched only generic overlays deploys the wrong stack): only base
    overlays applied, a stated value no applied overlay carries (``known``:
    overlay name -> its criteria, where known), a stated value that did not survive
    resolution, or core dimensions left unstated."""
    warnings: list[str] = []
    count = len(summary.components)
    overlays = _listing(summary.applied_overlays)
    if summary.applied_overlays and set(summary.applied_overlays) <= BASE_OVERLAYS:
        warnings.append(
            f"only base overlays applied ({overlays}): the criteria matched no specific overlay, {count} components"
        )
    dropped = dropped_values(summary, criteria, known)
    stated = criteria.stated()
    warnings += [
        f"{name}={stated[name]!r} was stated but no applied overlay carries it (applied: {overlays}): aicr "
        f"resolved a recipe without it ({count} components)"
        for name in dropped
    ]
    for name, value in stated.items():
        resolved = summary.criteria.get(name, "")
        if not summary.criteria or name in dropped:
            continue
        if resolved in ("", "any"):
            warnings.append(f"{name}={value!r} was stated but the recipe resolved {name}=any")
        elif resolved != value:
            warnings.append(f"{name}={value!r} resolved as {name}={resolved!r}")
    unstated = [name for name in _CORE_DIMENSIONS if not getattr(criteria, name) or getattr(criteria, name) == "any"]
    if unstated:
        warnings.append(
            f"criteria leave {', '.join(unstated)} as any: aicr resolves a thinner stack for under-specified "
            f"criteria ({count} components from overlays {overlays}); state them, or set recipe.expect "
            "to make a thin recipe an error"
        )
    return warnings


def pack_overlay_criteria(pack: Path | None) -> dict[str, dict[str, str]]:
    """Each overlay of a data pack (``overlays/**.yaml``) by name: its stated criteria."""
    found: dict[str, dict[str, str]] = {}
    overlays = pack / "overlays" if pack is not None else None
    if overlays is None or not overlays.is_dir():
        return found
    for path in sorted([*overlays.rglob("*.yaml"), *overlays.rglob("*.yml")]):
        try:
            doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)  # noqa: S506 - safe loader
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue  # aicr read the pack already; a file it could not read applied nothing
        if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict) and isinstance(doc.get("spec"), dict):
            raw = doc["spec"].get("criteria") or {}
            found[_text(doc["metadata"].get("name"))] = (
                {_text(k): _text(v) for k, v in raw.items() if _text(v) not in ("", "any")}
                if isinstance(raw, dict)
                else {}
            )
    return found


def summary_text(
    settings: RunnerSettings, *, pack: str | Path | None, completion_line: str, summary: RecipeSummary | None
) -> str:
    """The recipe ConfigMap's summary.txt: what was asked (criteria, flags, pack)
    and what was resolved (aicr's completion line, overlays, components)."""
    s = settings
    lines = [f"criteria: {s.criteria.summary()}"]
    if s.recipe.flags or s.recipe.args:
        lines.append(f"recipeFlags: {' '.join([*s.recipe.flags.split(), *s.recipe.args])}")
    if pack:
        lines.append(f"dataPack: {pack}")
    if completion_line:
        lines.append(completion_line)
    if summary is not None:
        lines.append(f"appliedOverlays: {', '.join(summary.applied_overlays)}")
        lines.append("")
        lines.append(component_table(summary))
    return "\n".join(lines) + "\n"


def component_table(summary: RecipeSummary) -> str:
    rows = [("NAME", "VERSION", "NAMESPACE", "CHART")]
    rows += [(c.name, c.version or "-", c.namespace or "-", c.chart or "-") for c in summary.components]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(col.ljust(widths[i]) for i, col in enumerate(r)).rstrip() for r in rows)
