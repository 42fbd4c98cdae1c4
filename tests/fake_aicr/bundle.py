"""``aicr bundle`` (helm deployer, 1.x layout) and ``aicr verify``.

Layout (contract section 7): README.md deploy.sh recipe.yaml checksums.txt
bundle-info.yaml, one ``NNN-<component>/`` folder per release with install.sh,
values.yaml, cluster-values.yaml and upstream.env, plus ``data/`` with --data.
checksums.txt lists every regular payload file (recipe.yaml included), sorted.
Files are 0600, scripts 0755. ``verify`` is closed-world (section 9).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from .catalog import EMBEDDED_VALUES_PREFIX, LEGACY_API_VERSION, RECIPE_API_VERSIONS, Catalog, deep_merge
from .log import VERSION, AicrError, Flag, Logger, UsageError, legacy, parse_flags

TEMPLATES = Path(__file__).with_name("templates")
SUPPORTED_DEPLOYERS = ("helm",)
KNOWN_DEPLOYERS = ("helm", "argocd", "argocd-helm", "flux", "helmfile")
_SET = re.compile(r"^([^:=\s]+):([^=\s]+)=(.*)$")
#: Files outside the inventory (contract section 7).
UNLISTED = (
    "checksums.txt",
    "attestation/bundle-attestation.sigstore.json",
    "attestation/aicr-attestation.sigstore.json",
)
TRUST_ORDER = ("unknown", "unverified", "attested", "verified")


def _invalid(message: str) -> AicrError:
    return AicrError("INVALID_REQUEST", f"invalid bundle command options: {message}")


@dataclass(frozen=True)
class SetOverride:
    component: str
    path: str
    value: Any

    @classmethod
    def parse(cls, text: str) -> SetOverride:
        match = _SET.match(text)
        if not match:
            raise _invalid(f'invalid --set format "{text}": expected component:path=value')
        component, path, raw = match.groups()
        return cls(component, path, _scalar(raw))


def _scalar(raw: str) -> Any:
    if raw in ("true", "false"):
        return raw == "true"
    if re.fullmatch(r"-?\d+", raw):
        return int(raw)
    return raw


def _set_path(values: dict[str, Any], dotted: str, value: Any) -> None:
    node = values
    keys = dotted.split(".")
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[keys[-1]] = value


def _get_path(values: dict[str, Any], dotted: str) -> Any:
    node: Any = values
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _write(path: Path, text: str, mode: int = 0o600) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 16), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_recipe(path_text: str, *, wrap: str | None = None) -> dict[str, Any]:
    """Read a RecipeResult; ``wrap`` names the command's option error (bundle
    reports a missing recipe as invalid options, exit 2)."""
    path = Path(path_text).resolve()
    if not path.is_file():
        missing = AicrError("NOT_FOUND", f"recipe file not found: {path}")
        if wrap:
            raise AicrError("INVALID_REQUEST", wrap, missing)
        raise missing
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise AicrError("INVALID_REQUEST", f"failed to parse recipe {path}", exc) from exc
    api_version = doc.get("apiVersion")
    accepted = (LEGACY_API_VERSION,) if legacy() else RECIPE_API_VERSIONS
    if api_version not in accepted:
        raise AicrError(
            "INVALID_REQUEST",
            f"unsupported recipe apiVersion {api_version!r}: expected {' or '.join(accepted)}",
        )
    if not doc.get("componentRefs"):
        raise AicrError("INVALID_REQUEST", "recipe must contain at least one component reference")
    return dict(doc)


def _component_values(ref: dict[str, Any], catalog: Catalog) -> dict[str, Any]:
    values: dict[str, Any] = {}
    values_file = ref.get("valuesFile")
    known = catalog.registry.get(ref["name"])
    if values_file:
        external = catalog.data_dir / values_file if catalog.data_dir else None
        if external is not None and external.is_file():
            values = yaml.safe_load(external.read_text(encoding="utf-8")) or {}
        elif known is not None and known.source == "embedded" and values_file.startswith(EMBEDDED_VALUES_PREFIX):
            values = dict(known.values)
        else:
            raise _invalid(
                f"values file {values_file} of component {ref['name']} not found "
                "(pass the same --data to bundle as to recipe)"
            )
    return deep_merge(values, ref.get("overrides") or {})


def _check_driver_ownership(values: dict[str, dict[str, Any]]) -> None:
    """The coherence gate the preinstalled-driver profile exists for (anchor R-11)."""
    gpu = values.get("gpu-operator")
    if gpu is None or _get_path(gpu, "driver.enabled") is not False:
        return
    dra = values.get("nvidia-dra-driver-gpu")
    if dra is not None and _get_path(dra, "nvidiaDriverRoot") == "/run/nvidia/driver":
        raise AicrError(
            "INVALID_REQUEST",
            "driver ownership coherence: gpu-operator driver.enabled=false (preinstalled driver) but "
            "nvidia-dra-driver-gpu nvidiaDriverRoot points at the operator container root "
            "/run/nvidia/driver; "
            "set --set dradriver:nvidiaDriverRoot=/",
        )
    sentinel = values.get("nvsentinel")
    if sentinel is not None and _get_path(sentinel, "labeler.assumeDriverInstalled") is not True:
        raise AicrError(
            "INVALID_REQUEST",
            "driver ownership coherence: gpu-operator driver.enabled=false (preinstalled driver) requires "
            "nvsentinel labeler.assumeDriverInstalled=true; "
            "set --set nvsentinel:labeler.assumeDriverInstalled=true",
        )


BUNDLE_FLAGS = [
    Flag(("recipe", "r")),
    Flag(("output", "o"), default="."),
    Flag(("deployer", "d"), default="helm"),
    Flag(("data",)),
    Flag(("set",), "list"),
    Flag(("storage-class",)),
    Flag(("shared-storage-class",)),
    Flag(("system-node-selector",), "list"),
    Flag(("system-node-toleration",), "list"),
    Flag(("accelerated-node-selector",), "list"),
    Flag(("accelerated-node-toleration",), "list"),
    Flag(("nodes",), "int"),
    Flag(("kubeconfig", "k")),
    Flag(("insecure-tls",), "bool", default=False),
    Flag(("plain-http",), "bool", default=False),
    Flag(("attest",), "bool", default=False),
]


#: Bundle flags 0.11.1 does not have (contract section 7: 1.x only).
LEGACY_MISSING_BUNDLE_FLAGS = ("storage-class", "shared-storage-class")


def bundle_flags() -> list[Flag]:
    return [f for f in BUNDLE_FLAGS if not (legacy() and f.names[0] in LEGACY_MISSING_BUNDLE_FLAGS)]


def cmd_bundle(args: list[str], log: Logger) -> int:
    started = time.monotonic()
    parsed = parse_flags(args, bundle_flags())
    if not parsed.get("recipe"):
        raise UsageError('Required flag "recipe" not set')
    deployer = str(parsed.get("deployer"))
    if deployer not in KNOWN_DEPLOYERS:
        raise _invalid(f'unsupported deployer "{deployer}": valid deployers are {", ".join(KNOWN_DEPLOYERS)}')
    if deployer not in SUPPORTED_DEPLOYERS:
        raise _invalid(f'deployer "{deployer}" is not implemented by the fake aicr (only helm)')
    overrides = [SetOverride.parse(text) for text in parsed.get("set")]
    for toleration in [*parsed.get("system-node-toleration"), *parsed.get("accelerated-node-toleration")]:
        if not re.fullmatch(r"[^=:\s]+(=[^:\s]*)?:(NoSchedule|PreferNoSchedule|NoExecute)", toleration):
            raise _invalid(f'invalid toleration format "{toleration}": expected key=value:effect or key:effect')
    output = str(parsed.get("output"))
    if output.startswith("oci://"):
        raise _invalid("the fake aicr does not push OCI bundles")
    if parsed.get("attest"):
        raise AicrError("NOT_FOUND", "aicr-attestation.sigstore.json not found next to the aicr binary")
    recipe_path = str(parsed.get("recipe"))
    log.info(
        "generating bundle",
        deployer=deployer,
        type="Helm per-component bundle",
        recipe=recipe_path,
        output=output,
        oci=False,
    )
    recipe = load_recipe(recipe_path, wrap="invalid bundle command options")
    catalog = Catalog.load(parsed.get("data"), log=log)
    refs = {ref["name"]: ref for ref in recipe["componentRefs"]}
    order = [name for name in recipe.get("deploymentOrder") or [] if name in refs]
    order += [name for name in refs if name not in order]
    values = _effective_values(
        order, refs, catalog=catalog, storage_class=parsed.get("storage-class"), overrides=overrides, log=log
    )
    _check_driver_ownership(values)

    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    write = _write_legacy_bundle if legacy() else _write_bundle
    folders = write(out, recipe_path=recipe_path, order=order, refs=refs, values=values, catalog=catalog)
    files = _write_legacy_checksums(out, order) if legacy() else _write_checksums(out)
    size = sum((out / rel).stat().st_size for rel in files)
    log.info(
        "bundle generated",
        type="Helm per-component bundle",
        files=len(files) + 1,
        size_bytes=size,
        duration_sec=round(time.monotonic() - started, 3),
        output_dir=str(out.resolve()),
    )
    if legacy():
        # 0.11.1 counts recipe.yaml and checksums.txt, which its checksums omit.
        sys.stdout.write(
            "\nHelm per-component bundle generated successfully!\n"
            f"Output directory: {out.resolve()}\n"
            f"Files generated: {len(files) + 2}\n"
            "\nTo deploy:\n"
            f"  1. cd {out.resolve()}\n"
            "  2. chmod +x deploy.sh\n"
            "  3. ./deploy.sh\n"
        )
        return 0
    sys.stdout.write(
        "\nhelm generated successfully!\n"
        f"Output directory: {out.resolve()}\n"
        f"Files generated: {len(files) + 1}\n"
        "\nTo deploy:\n"
        f"  1. cd {out.resolve()}\n"
        "  2. ./deploy.sh\n"
    )
    log.debug("bundle folders", folders=", ".join(folders))
    return 0


def _effective_values(
    order: list[str],
    refs: dict[str, dict[str, Any]],
    *,
    catalog: Catalog,
    storage_class: str | None,
    overrides: list[SetOverride],
    log: Logger,
) -> dict[str, dict[str, Any]]:
    """Values per release: registry/pack values, recipe overrides, storage
    class paths, then --set (which wins). ``enabled=false`` drops a release
    from ``order``."""
    values = {name: _component_values(refs[name], catalog) for name in order}
    if storage_class:
        for name in order:
            known = catalog.registry.get(name)
            for path in known.storage_class_paths if known else []:
                _set_path(values[name], path, storage_class)
    for override in overrides:
        target = _find_component(override.component, order, catalog)
        if target is None:
            log.warn("--set targets a component that is not in the recipe", component=override.component)
            continue
        if override.path == "enabled":
            if override.value is False:
                order.remove(target)
                values.pop(target)
            continue
        _set_path(values[target], override.path, override.value)
    return values


def _find_component(key: str, order: list[str], catalog: Catalog) -> str | None:
    if key in order:
        return key
    for name in order:
        known = catalog.registry.get(name)
        if known is not None and key in known.aliases:
            return name
    return None


def _write_bundle(
    out: Path,
    *,
    recipe_path: str,
    order: list[str],
    refs: dict[str, dict[str, Any]],
    values: dict[str, dict[str, Any]],
    catalog: Catalog,
) -> list[str]:
    install_template = (TEMPLATES / "install.sh").read_text(encoding="utf-8")
    folders: list[str] = []
    releases: list[dict[str, Any]] = []
    for index, name in enumerate(order, start=1):
        ref = refs[name]
        folder = f"{index:03d}-{name}"
        folders.append(folder)
        directory = out / folder
        script = (
            install_template.replace("__NAME__", name)
            .replace("__NAMESPACE__", ref["namespace"])
            .replace("__AICR_VERSION__", f"v{VERSION}")
        )
        _write(directory / "install.sh", script, 0o755)
        _write(
            directory / "values.yaml",
            yaml.safe_dump(values[name], sort_keys=False) if values[name] else "{}\n",
        )
        _write(directory / "cluster-values.yaml", "{}\n")
        env = {"CHART": ref["chart"], "REPO": ref["source"], "VERSION": ref["version"]}
        _write(directory / "upstream.env", "".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items()))
        releases.append({"name": name, "path": folder, "component": name, "namespace": ref["namespace"]})
    components = "\n".join(
        "  " + shlex.quote(f"{folder} {name} {refs[name]['namespace']}")
        for folder, name in zip(folders, order, strict=True)
    )
    deploy = (TEMPLATES / "deploy.sh").read_text(encoding="utf-8")
    deploy = deploy.replace("__COMPONENTS__", components).replace("__AICR_VERSION__", f"v{VERSION}")
    _write(out / "deploy.sh", deploy, 0o755)
    shutil.copyfile(recipe_path, out / "recipe.yaml")
    (out / "recipe.yaml").chmod(0o600)
    info = {
        "kind": "BundleInfo",
        "apiVersion": "aicr.run/v1",
        "metadata": {"version": f"v{VERSION}", "createdAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")},
        "deployer": "helm",
        "releases": releases,
    }
    _write(out / "bundle-info.yaml", yaml.safe_dump(info, sort_keys=False))
    readme = [
        "# AICR deployment bundle",
        "",
        "Run `./deploy.sh [--no-wait] [--best-effort] [--retries N]`.",
        "",
    ]
    readme += [f"- `{folder}`: {name}" for folder, name in zip(folders, order, strict=True)]
    _write(out / "README.md", "\n".join(readme) + "\n")
    if catalog.data_dir is not None:
        for source in sorted(catalog.data_dir.rglob("*")):
            if source.is_file():
                _write(out / "data" / source.relative_to(catalog.data_dir), source.read_text(encoding="utf-8"))
    return folders


def _write_legacy_bundle(
    out: Path,
    *,
    recipe_path: str,
    order: list[str],
    refs: dict[str, dict[str, Any]],
    values: dict[str, dict[str, Any]],
    catalog: Catalog,
) -> list[str]:
    """0.11.1's flat layout (contract section 7, checked against the real
    v0.11.1): ``<component>/values.yaml`` and ``README.md`` per component, then
    README.md, deploy.sh, undeploy.sh, recipe.yaml; ``data/`` with --data."""
    for name in order:
        ref = refs[name]
        _write(out / name / "values.yaml", yaml.safe_dump(values[name], sort_keys=False) if values[name] else "{}\n")
        _write(
            out / name / "README.md",
            f"# {name}\n\nChart: {ref['source']}/{ref['chart']}\nVersion: {ref['version']}\n"
            f"Namespace: {ref['namespace']}\n",
        )
        (out / name).chmod(0o755)
    entries = "\n".join(
        "  "
        + shlex.quote(
            f"{name} {refs[name]['namespace']} {refs[name]['chart']} {refs[name]['source']} {refs[name]['version']}"
        )
        for name in order
    )
    deploy = (TEMPLATES / "deploy-0.11.sh").read_text(encoding="utf-8")
    _write(out / "deploy.sh", deploy.replace("__COMPONENTS__", entries).replace("__AICR_VERSION__", VERSION), 0o755)
    releases = " ".join(shlex.quote(f"{name}:{refs[name]['namespace']}") for name in reversed(order))
    undeploy = (TEMPLATES / "undeploy-0.11.sh").read_text(encoding="utf-8")
    _write(out / "undeploy.sh", undeploy.replace("__RELEASES__", releases).replace("__AICR_VERSION__", VERSION), 0o755)
    rows = [f"| {name} | Helm | {refs[name]['version']} | {refs[name]['namespace']} |" for name in order]
    _write(out / "README.md", "# Cloud Native Stack Deployment\n\n" + "\n".join(rows) + "\n")
    shutil.copyfile(recipe_path, out / "recipe.yaml")
    (out / "recipe.yaml").chmod(0o600)
    if catalog.data_dir is not None:
        for source in sorted(catalog.data_dir.rglob("*")):
            if source.is_file():
                _write(out / "data" / source.relative_to(catalog.data_dir), source.read_text(encoding="utf-8"))
    return order


def _write_legacy_checksums(out: Path, order: list[str]) -> list[str]:
    """0.11.1's checksums.txt: component files in deployment order, then the
    scripts and README, then data/; recipe.yaml is not listed."""
    files = [f"{name}/{leaf}" for name in order for leaf in ("values.yaml", "README.md")]
    files += ["README.md", "deploy.sh", "undeploy.sh"]
    data = out / "data"
    files += sorted(p.relative_to(out).as_posix() for p in data.rglob("*") if p.is_file()) if data.is_dir() else []
    _write(out / "checksums.txt", "".join(f"{sha256_file(out / rel)}  {rel}\n" for rel in files))
    return files


def _payload_files(root: Path) -> list[str]:
    files = []
    for path in root.rglob("*"):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not path.is_symlink() and rel not in UNLISTED:
            files.append(rel)
    return sorted(files)


def _write_checksums(out: Path) -> list[str]:
    files = _payload_files(out)
    _write(out / "checksums.txt", "".join(f"{sha256_file(out / rel)}  {rel}\n" for rel in files))
    return files


# ---------------------------------------------------------------------------
# verify
# ---------------------------------------------------------------------------


def _inventory_errors(root: Path) -> tuple[list[str], int]:
    """Closed-world check: every payload file listed and matching, nothing extra."""
    listing = root / "checksums.txt"
    if not listing.is_file():
        return ["checksums.txt not found"], 0
    errors: list[str] = []
    listed: dict[str, str] = {}
    for number, line in enumerate(listing.read_text(encoding="utf-8").splitlines(), start=1):
        match = re.fullmatch(r"([0-9a-f]{64})  (.+)", line)
        if not match:
            errors.append(f"checksums.txt line {number}: malformed entry")
            continue
        listed[match.group(2)] = match.group(1)
    for rel, digest in listed.items():
        path = root / rel
        if not path.is_file() and legacy():
            absolute = path.absolute()
            errors.append(
                f"failed to read {rel}: [INTERNAL] failed to open file for digest: {absolute}: "
                f"open {absolute}: no such file or directory"
            )
        elif not path.is_file():
            errors.append(f"missing file: {rel}")
        elif (actual := sha256_file(path)) != digest:
            errors.append(f"checksum mismatch: {rel}" + (f" (expected {digest}, got {actual})" if legacy() else ""))
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            errors.append(f"unexpected symlink: {rel}")
        elif legacy():
            continue  # 0.11.1 is not closed-world: added files and directories pass
        elif path.is_file() and rel not in listed and rel not in UNLISTED:
            errors.append(f"unexpected file: {rel}")
        elif path.is_dir() and not any(name.startswith(rel + "/") for name in listed) and rel != "attestation":
            errors.append(f"unexpected directory: {rel}")
    return errors, len(listed)


def cmd_verify(args: list[str], log: Logger) -> int:
    parsed = parse_flags(
        args,
        [
            Flag(("min-trust-level",), default="max"),
            Flag(("require-creator",)),
            Flag(("cli-version-constraint",)),
            Flag(("certificate-identity-regexp",)),
            Flag(("format", "t"), default="text"),
        ],
    )
    if not parsed.positionals:
        raise AicrError("INVALID_REQUEST", "bundle directory is required: aicr verify <bundle-dir>")
    root = Path(parsed.positionals[0])
    if not root.is_dir():
        raise AicrError("NOT_FOUND", f"bundle directory not found: {root}")
    minimum = str(parsed.get("min-trust-level"))
    if minimum not in (*TRUST_ORDER, "max"):
        raise AicrError("INVALID_REQUEST", f'invalid --min-trust-level "{minimum}"')
    if legacy():
        log.info("verifying bundle", dir=str(root))
    errors, count = _inventory_errors(root)
    external = (root / "data").is_dir()
    level = "unknown" if errors else "unverified"
    reason = (
        "inventory failed verification"
        if errors
        else "no bundle attestation (bundle was not created with --attest)"
        + ("; external data present (data/): the bundle can reach at most attested" if external else "")
    )
    report = {
        "trustLevel": level,
        "trustReason": reason,
        "checksumsPassed": not errors,
        "checksumFiles": count,
        "bundleAttested": False,
        "binaryAttested": False,
        "identityPinned": False,
        "hasExternalData": external,
        "toolVersion": f"v{VERSION}",
        "errors": errors,
    }
    policy_failed = not errors and minimum != "max" and TRUST_ORDER.index(level) < TRUST_ORDER.index(minimum)
    passed = not errors and not policy_failed
    if parsed.get("format") == "json":
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        lines = []
        lines.append(f"  ✓ Checksums verified ({count} files)" if not errors else "  ✗ Checksum verification failed")
        lines.append(f"  Trust level: {level}")
        if not legacy():
            lines.append(f"    ↳ {reason}")  # 1.x only; 0.11.1 leaves a blank line instead
        else:
            lines.append("")
        if errors:
            lines.append("Details:")
            lines += [f"  - {error}" for error in errors]
            lines += [""] if legacy() else []
        lines.append(f"Bundle verification: {'PASSED' if passed else 'FAILED'}")
        sys.stdout.write("\n".join(lines) + "\n")
    if errors:
        raise AicrError("UNAUTHORIZED", f"bundle verification failed: {errors[0]}")
    if policy_failed:
        raise AicrError("INVALID_REQUEST", f'trust level "{level}" does not meet minimum "{minimum}"')
    log.info("bundle verified", trustLevel=level, files=count)
    return 0
