"""Chart values to runtime settings, for ``aicr-runner plan --values``.

Users try the same values file they will give ``helm install``. This maps the keys
that mean something outside a cluster onto the ``AICR_RUNNER_*`` environment the
chart renders; a test renders every example through the real chart and checks the
two agree. Cluster-only keys (``CLUSTER_ONLY_VALUES``: Secrets, image, the Job's
pod and scheduling, RBAC, the install Lease) are accepted and ignored: a local plan
runs no pod and takes credentials from the environment
(``AICR_RUNNER_PACK__CREDENTIALS_FILE``). A test holds every key of the chart's
values.yaml to one of the two lists, so a new chart value must be classified.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from aicr_runner.errors import ConfigError
from aicr_runner.settings.config import ENV_PREFIX

__all__ = [
    "CHART_ONLY_RENAMED",
    "CLUSTER_ONLY_VALUES",
    "Renamed",
    "env_from_values",
    "load_values_file",
    "not_null",
    "regrouped",
    "renamed_values",
    "value_to_env",
]

#: Chart values (a key and everything under it) that mean something only in a
#: cluster; ``plan --values`` accepts and ignores them.
CLUSTER_ONLY_VALUES: frozenset[str] = frozenset(
    {
        "global",  # imageRegistry, imagePullSecrets: the pod's image
        "image",
        "imagePullSecrets",
        "serviceAccount",
        "rbac",
        "job",  # the Job and its pod: scheduling, resources, labels, volumes, extraEnv; rerun names a new Job
        "lease",  # the install Lease serialises runs in a cluster; plan deploys nothing
        "revalidate",  # the CronJob of scheduled re-validations; plan validates nothing
        "snapshot",  # aicr snapshot runs an agent Job in a cluster; plan snapshots nothing
        "reports",  # the verdict report is written to a cluster's API; plan writes none
        "monitoring",  # kube-state-metrics config, PrometheusRule, dashboard: cluster objects
        "criteria.preflight",  # the chart's render-time check; plan runs its own (catalog.refusal)
        "pack.secret",  # Secrets: plan reads AICR_RUNNER_PACK__CREDENTIALS_FILE instead
        "pack.auth",
        "validate.publish.identityTokenSecret",
        "validate.publish.registrySecret",
        "nameOverride",  # object names and the app.kubernetes.io/name label; plan names no object
        "fullnameOverride",
    }
)


def _cluster_only(path: str) -> bool:
    return any(path == key or path.startswith(key + ".") for key in CLUSTER_ONLY_VALUES)


@functools.cache
def value_to_env() -> dict[str, str]:
    """Chart value path -> runtime variable (without the prefix), from each setting's
    ``chart=`` (``settings.groups.setting``), but the cluster-only ones."""
    from aicr_runner.settings.model import chart_facts
    from aicr_runner.settings.runner import leaves

    found = ((chart_facts(field).get("chart"), name) for name, field in leaves())
    return {path: name for path, name in found if path and not _cluster_only(path)}


@dataclass(frozen=True)
class Renamed:
    """A chart value that moved into a group: its earlier path ``old`` (``setting``'s
    ``legacy=``), still honoured, its path ``new`` and the chart's default there.
    ``secret``: the value is a credential, which a refusal never shows."""

    old: str
    new: str
    default: Any
    secret: bool = False


#: Chart values the chart alone reads whose null no template renders as meant: the
#: image's repository (the pod's image would read ``<nil>``), the ServiceAccount's
#: and RBAC's switches (true by default: a null would silently turn them off).
CHART_ONLY_NOT_NULL = ("image.repository", "serviceAccount.create", "rbac.create", "rbac.clusterAdmin")


@functools.cache
def _null_renders() -> dict[str, str | None]:
    """Each setting's chart value -> what the chart renders for its null: ``false`` for
    a boolean, ``[]`` for a list; None for every other, whose null C-20 refuses (Helm's
    null removes the key and its default with it, and ``toString``/``int64`` would turn
    it into ``<nil>`` or 0)."""
    import typing

    from aicr_runner.settings.model import chart_facts
    from aicr_runner.settings.runner import leaves

    renders: dict[str, str | None] = {}
    for _, field in leaves():
        path = chart_facts(field).get("chart")
        if path:
            kind = field.annotation
            renders[path] = "false" if kind is bool else "[]" if typing.get_origin(kind) is list else None
    return renders


def not_null() -> tuple[str, ...]:
    """The chart values a null is refused for (guard C-20, chart/templates/_validate-nulls.tpl)."""
    refused = {path for path, rendered in _null_renders().items() if rendered is None}
    return tuple(sorted(refused | set(CHART_ONLY_NOT_NULL)))


def _check_nulls(document: Mapping[str, Any], where: str) -> None:
    """C-20: a null (on the value or on a map above it) for a value ``not_null`` names."""
    for path in not_null():
        parts = path.split(".")
        prefixes = (".".join(parts[: n + 1]) for n in range(len(parts)))
        if any(_lookup(document, prefix) == (True, None) for prefix in prefixes):
            raise ConfigError(
                [
                    f"{where}: {path}=null: a null removes the chart's default with the key, and this value "
                    f"cannot be rendered without one. Leave {path} out to keep the default, or set the value "
                    "you mean."
                ]
            )


#: The renamed chart values that are no setting (the chart alone reads them), each
#: defined here once as ``legacy=`` defines a setting's; their defaults are
#: values.yaml's (scripts/gen-settings.py --check compares them).
CHART_ONLY_RENAMED: tuple[Renamed, ...] = (
    Renamed("criteriaPreflight", "criteria.preflight", True),
    Renamed("dataPackSecret", "pack.secret", ""),
    Renamed("dataPackAuth.dockerconfigjson", "pack.auth.dockerconfigjson", "", secret=True),
    Renamed("rerun", "job.rerun", ""),
)


@functools.cache
def renamed_values() -> tuple[Renamed, ...]:
    """Every renamed chart value: the settings model's, in its order, then ``CHART_ONLY_RENAMED``."""
    from aicr_runner.settings.model import chart_default, chart_facts
    from aicr_runner.settings.runner import leaves

    found = ((chart_facts(field), field) for _name, field in leaves())
    settings = tuple(
        Renamed(facts["legacy"], facts["chart"], _chart_value(chart_default(field)))
        for facts, field in found
        if "legacy" in facts
    )
    return settings + CHART_ONLY_RENAMED


def _chart_value(value: Any) -> Any:
    """A default as values.yaml writes it: enums by value, whole seconds as integers."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def regrouped(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``values`` with each renamed value's old key moved to its new one, by the chart's
    rule (chart/templates/_compat.tpl): the new key absent or at its default takes the
    old key's value; both set to different values is refused (C-18)."""
    document = copy.deepcopy(dict(values))
    for renamed in renamed_values():
        present, old = _lookup(document, renamed.old)
        if not present:
            continue
        _drop(document, renamed.old)
        found, new = _lookup(document, renamed.new)
        if found and new not in (renamed.default, old):
            from aicr_runner.settings.values_schema import NOT_SHOWN

            old_text, new_text = (NOT_SHOWN, NOT_SHOWN) if renamed.secret else (_json(old), _json(new))
            raise ConfigError(
                [
                    f"{where}: {renamed.old}={old_text} and {renamed.new}={new_text} are both set: "
                    f"{renamed.old} is the earlier name of {renamed.new} (docs/configuration.md "
                    f'"Renamed values"). Keep one: delete {renamed.old}, or set it to the same value.'
                ]
            )
        _put(document, renamed.new, old)
    return document


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _drop(document: dict[str, Any], dotted: str) -> None:
    """Deletes ``dotted`` and the maps it leaves empty."""
    *parents, leaf = dotted.split(".")
    nodes = [document]
    for part in parents:
        nodes.append(nodes[-1][part])
    del nodes[-1][leaf]
    for node, part in zip(reversed(nodes[:-1]), reversed(parents), strict=True):
        if node[part] == {}:
            del node[part]


def _put(document: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = document
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[leaf] = value


def __getattr__(name: str) -> Any:
    """``VALUE_TO_ENV``: ``value_to_env()``, read from the settings model (with pydantic) when first asked for."""
    if name == "VALUE_TO_ENV":
        return value_to_env()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _lookup(values: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = values
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _move(item: Any) -> Any:
    """An ``upgradeCheck.acknowledge`` entry as the runtime takes it: ``component:from:to``
    (the chart's ``nvidia-aicr.acknowledgedMoves``); anything else as it is, for the check to refuse."""
    if isinstance(item, Mapping) and set(item) == {"component", "from", "to"}:
        return f"{item['component']}:{item['from']}:{item['to']}"
    return item


def _as_env(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, list):
        # The chart drops empty phases (anchor V-17); lists are JSON arrays.
        return json.dumps([item for item in value if item != ""])
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        # Helm renders a whole float as an integer (`1e1` -> 10), as Go's %v does.
        return str(int(value))
    return str(value)


def env_from_values(values: Mapping[str, Any]) -> dict[str, str]:
    """The ``AICR_RUNNER_*`` variables for the keys ``values`` sets, each under its
    new name: ``load_values_file`` moved the earlier names there (``regrouped``)."""
    env: dict[str, str] = {}
    for dotted, name in value_to_env().items():
        present, value = _lookup(values, dotted)
        if present and value is None:  # a boolean or a list: C-20 refused any other null
            env[ENV_PREFIX + name] = _null_renders().get(dotted) or ""
        elif present:
            env[ENV_PREFIX + name] = _as_env([_move(v) for v in value] if name.endswith("ACKNOWLEDGE") else value)
    return env


#: A values file is a few KiB; more than this is not one (``/dev/zero``, a log).
MAX_VALUES_BYTES = 1024 * 1024
#: Values after YAML aliases are expanded: an alias bomb stops here, not at 226 MB.
MAX_VALUES_NODES = 100_000
#: Longest cut of a parser's message that is printed.
_MESSAGE_CHARS = 300


def _helm_loader() -> type[Any]:
    """PyYAML's safe loader reading numbers as Helm's YAML library does: ``1e3``
    is a number there (YAML 1.2), a string in PyYAML's YAML 1.1."""
    import re

    import yaml

    class HelmLoader(yaml.SafeLoader):
        # A copy: add_implicit_resolver must not change PyYAML's own SafeLoader.
        yaml_implicit_resolvers = {  # noqa: RUF012 - PyYAML keeps its resolvers in a class attribute
            key: list(value) for key, value in yaml.SafeLoader.yaml_implicit_resolvers.items()
        }

    HelmLoader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)[eE][-+]?[0-9]+$"),
        list("-+0123456789."),
    )
    return HelmLoader


def _expanded_size(document: Any, budget: int) -> int:
    """How many values ``document`` holds with every alias expanded, counting up
    to ``budget`` + 1 (a cycle or a bomb stops there)."""
    stack, count = [document], 0
    while stack and count <= budget:
        node = stack.pop()
        count += 1
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_CHARS else text[:_MESSAGE_CHARS] + "..."


def _masked(text: str) -> str:
    """A parser's message without a user or password: each quoted token masked
    (``masking``), and the whole message when an '@' is left outside them."""
    import re

    from aicr_runner.masking import has_userinfo, mask_userinfo

    if has_userinfo(re.sub(r"'[^']*'", "''", text)):
        return "a problem with a value, not quoted: it may hold a user or password"
    return re.sub(r"'([^']{2,})'", lambda m: f"'{mask_userinfo(m.group(1))}'", text)


def _yaml_problem(exc: Exception) -> str:
    """What PyYAML found and where, without its snippet of the document (the
    line it quotes may hold a password)."""
    parts = [getattr(exc, "context", None), getattr(exc, "problem", None)]
    said = ", ".join(str(part) for part in parts if part) or type(exc).__name__
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return _masked(_cut(said)) + at


def load_values_file(path: Path) -> dict[str, Any]:
    """The chart values in ``path``, checked against the chart's schema as
    ``helm install -f`` checks them, each renamed value under its new key
    (``regrouped``). Raises ``ConfigError``: one line for a file
    that is not a values document, Helm's schema report otherwise."""
    import yaml

    from aicr_runner.masking import mask_userinfo
    from aicr_runner.settings.config import escaped

    where = f"--values {escaped(mask_userinfo(str(path)), 200)}"
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_VALUES_BYTES + 1)
    except OSError as exc:
        raise ConfigError([f"{where}: {exc.strerror or exc}"]) from exc
    if len(raw) > MAX_VALUES_BYTES:
        raise ConfigError([f"{where}: larger than {MAX_VALUES_BYTES} bytes; a chart values file is a few KiB"])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            [f"{where}: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save it as UTF-8"]
        ) from None
    try:
        document = yaml.load(text, Loader=_helm_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError([f"{where}: not valid YAML ({_yaml_problem(exc)})"]) from None
    except RecursionError:
        raise ConfigError([f"{where}: nested too deeply to be chart values"]) from None
    except (ValueError, OverflowError) as exc:  # a value PyYAML cannot build (an integer of 5,000 digits)
        raise ConfigError([f"{where}: a value cannot be read ({_masked(_cut(str(exc)))})"]) from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ConfigError([f"{where}: must be a mapping of chart values, found {type(document).__name__}"])
    if _expanded_size(document, MAX_VALUES_NODES) > MAX_VALUES_NODES:
        raise ConfigError(
            [f"{where}: more than {MAX_VALUES_NODES} values once YAML aliases are expanded (an alias bomb?)"]
        )
    _check_schema(document, where)
    document = regrouped(document, where)
    _check_guards(document, where)
    return document


def _check_guards(document: dict[str, Any], where: str) -> None:
    """The chart's template guards on values plan otherwise ignores (``helm template``
    fails on them, so plan refuses them too, in the chart's words)."""
    _check_nulls(document, where)
    _check_names(document, where)
    _check_release_source(document, where)
    snapshot = document.get("snapshot")
    tolerations = snapshot.get("tolerations") if isinstance(snapshot, dict) else None
    for index, toleration in enumerate(tolerations if isinstance(tolerations, list) else []):
        # C-13: a toleration aicr cannot express is refused, never rendered as another one.
        if not isinstance(toleration, dict) or str(toleration.get("operator") or "Equal") != "Exists":
            continue
        value = toleration.get("value")
        if value not in (None, ""):
            raise ConfigError(
                [
                    f"{where}: snapshot.tolerations[{index}] has operator Exists and value {_go_quoted(value)}: "
                    f"Exists matches any value of the taint {toleration.get('key') or ''}, so it takes none. "
                    "Drop the value, or use operator Equal."
                ]
            )


#: A DNS label (RFC 1123), as the chart's _validate-names.tpl matches it.
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
#: value -> (longest, what the chart says of it): C-15 and C-16.
_NAME_RULES: dict[str, tuple[int, str, str]] = {
    "fullnameOverride": (
        44,
        "it starts the name of every object the chart renders",
        "the Job is named <fullnameOverride>-install-<10 hex>, and the Job controller puts that name in its pod's "
        "job-name label, which holds at most 63 characters",
    ),
    "nameOverride": (
        63,
        "it follows the release name in the name of every object the chart renders",
        "it is the app.kubernetes.io/name label of every object the chart renders, and a label value holds at most "
        "63 characters",
    ),
}


def _check_names(document: dict[str, Any], where: str) -> None:
    """C-15 and C-16 (chart/templates/_validate-names.tpl): the name overrides are
    DNS labels short enough for what the chart appends to them."""
    import re

    for key, (longest, role, why) in _NAME_RULES.items():
        value = document.get(key)
        name = value if isinstance(value, str) else ""  # the schema refused any other type already
        if name and not re.fullmatch(_DNS_LABEL, name):
            raise ConfigError(
                [
                    f"{where}: {key}={_go_quoted(name)} is not a DNS label: {role}, so it may hold lowercase letters, "
                    "digits and '-', starting and ending with a letter or digit (e.g. gpu-stack)."
                ]
            )
        if len(name.encode()) > longest:
            raise ConfigError(
                [
                    f"{where}: {key}={_go_quoted(name)} is {len(name.encode())} characters, at most {longest}: "
                    f"{why}. Shorten it."
                ]
            )


def _check_release_source(document: dict[str, Any], where: str) -> None:
    """G-17d and C-17 (chart/templates/_validate-pack.tpl): the pack's transport
    settings need a pull from a registry; the aicr release comes from a registry
    (aicr.releaseRef) or an HTTP folder (aicr.releaseBaseUrl), not both."""
    from aicr_runner.settings.checks import DEFAULT_RELEASE_BASE_URL

    aicr, pack = (group if isinstance(group, dict) else {} for group in (document.get("aicr"), document.get("pack")))
    ref, base = aicr.get("releaseRef"), aicr.get("releaseBaseUrl")
    transport = any(pack.get(key) for key in ("secret", "plainHTTP", "insecureTLS"))
    if transport and not pack.get("ref") and not ref:  # G-17d
        raise ConfigError(
            [
                f"{where}: pack.secret / pack.plainHTTP / pack.insecureTLS are set but pack.ref and "
                "aicr.releaseRef are empty: these settings only apply to a pull from a registry. Set pack.ref to the "
                "pack's OCI reference (or aicr.releaseRef to the aicr release's), or drop them."
            ]
        )
    if ref and base is not None and str(base) != DEFAULT_RELEASE_BASE_URL:
        raise ConfigError(
            [
                f"{where}: aicr.releaseRef={ref} and aicr.releaseBaseUrl={base} are both set: the aicr release comes "
                "from one place. Unset aicr.releaseBaseUrl to fetch it from the registry, or aicr.releaseRef to fetch "
                "it over HTTP."
            ]
        )


def _go_quoted(value: Any) -> str:
    return json.dumps(_as_env(value), ensure_ascii=False)


def _check_schema(document: dict[str, Any], where: str) -> None:
    from aicr_runner.settings import values_schema as valueschema

    try:
        found = valueschema.problems(document)
    except ValueError as exc:  # what JSON cannot hold: Helm refuses to parse the file
        raise ConfigError([f"{where}: {exc}"]) from None
    except RecursionError:
        raise ConfigError([f"{where}: nested too deeply to be chart values"]) from None
    if found:
        lines = valueschema.render(found)
        raise ConfigError([f"{where}: {lines[0]}", *lines[1:]], report=True)
