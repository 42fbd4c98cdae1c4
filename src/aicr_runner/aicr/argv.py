"""argv builders for every aicr and deploy.sh call. Pure: settings in, list out.

Order follows the bash chart this runner replaces (docs/migration.md) for every
call it made (recipe, bundle, deploy.sh, validate, publish): the runner's own
flags first, then the legacy ``*Flags`` string split on whitespace, then the
``*Args`` list, so a user's flag comes last and wins where the CLI lets a
later flag override an earlier one.

``*Flags`` strings are split with ``str.split()`` only: no quote handling and,
unlike the bash chart's unquoted shell expansion, no glob expansion. Anything that
needs spaces or quotes belongs in ``*Args``, which is passed verbatim.

Every aicr call starts with the global ``--log-json``: the runner relays each
line to the pod log and parses some of them (the recipe completion line, the
final ``command failed`` record). JSON records parse the same in aicr 0.11 and
1.x, carry no ANSI colour (0.11 colours every text line, TTY or not), and keep
values with spaces (``componentNames=a, b``) unambiguous. The pod log shows
them re-rendered as ``msg k=v`` (see ``logs.format_relayed_line``).
"""

from __future__ import annotations

from pathlib import Path

from aicr_runner.settings.config import PublishMode, RunnerSettings

__all__ = [
    "AICR_GLOBAL_FLAGS",
    "PREINSTALLED_DRIVER_SETS",
    "SNAPSHOT_AGENT_NAME",
    "bundle_argv",
    "deploy_argv",
    "publish_argv",
    "recipe_argv",
    "snapshot_argv",
    "split_flags",
    "validate_argv",
    "verify_argv",
]

AICR_GLOBAL_FLAGS: tuple[str, ...] = ("--log-json",)

#: The snapshot agent's Job and ServiceAccount (aicr deletes both, and a Role of that
#: name, when it is done): the runner's own, so it never removes another caller's
#: ``aicr`` agent nor the runner's ServiceAccount.
SNAPSHOT_AGENT_NAME = "aicr-runner-snapshot"

#: environment.preinstalledDriver (the bash chart's bundle sets): all three are needed for aicr's
#: driver-ownership coherence gate.
PREINSTALLED_DRIVER_SETS: tuple[str, ...] = (
    "gpuoperator:driver.enabled=false",
    "dradriver:nvidiaDriverRoot=/",
    "nvsentinel:labeler.assumeDriverInstalled=true",
)


def split_flags(flags: str) -> list[str]:
    """A legacy flags string as argv words: whitespace-split, nothing else."""
    return flags.split()


def _aicr(aicr: Path | str, *subcommand: str) -> list[str]:
    return [str(aicr), *AICR_GLOBAL_FLAGS, *subcommand]


def _data(pack: Path | None) -> list[str]:
    return ["--data", str(pack)] if pack is not None else []


def recipe_argv(settings: RunnerSettings, aicr: Path | str, pack: Path | None, output: Path) -> list[str]:
    """``aicr recipe``: stated criteria in the anchor's order, ``--data``, output,
    then recipe flags and args."""
    argv = _aicr(aicr, "recipe")
    for name, value in settings.criteria.stated().items():
        argv += [f"--{name}", value]
    argv += _data(pack)
    argv += ["--output", str(output)]
    return argv + split_flags(settings.recipe.flags) + list(settings.recipe.args)


def bundle_argv(settings: RunnerSettings, aicr: Path | str, recipe: Path, output: Path, pack: Path | None) -> list[str]:
    """``aicr bundle``: the preinstalled-driver profile goes before the user's
    flags so a user ``--set`` for the same path wins."""
    argv = _aicr(aicr, "bundle", "--recipe", str(recipe), "--deployer", "helm", "--output", str(output))
    if settings.bundle.storage_class:
        argv += ["--storage-class", settings.bundle.storage_class]
    argv += _data(pack)
    if settings.environment.preinstalled_driver:
        for override in PREINSTALLED_DRIVER_SETS:
            argv += ["--set", override]
    return argv + split_flags(settings.bundle.flags) + list(settings.bundle.args)


def verify_argv(settings: RunnerSettings, aicr: Path | str, bundle_dir: Path) -> list[str]:
    """``aicr verify``: the closed-world checksum gate the bash chart ran before deploying."""
    return _aicr(aicr, "verify", str(bundle_dir))


def deploy_argv(settings: RunnerSettings, bundle_dir: Path) -> list[str]:
    """``bash <bundle>/deploy.sh`` with deploy flags and args, as the bash chart ran it."""
    argv = ["bash", str(bundle_dir / "deploy.sh")]
    return argv + split_flags(settings.deploy.flags) + list(settings.deploy.args)


def snapshot_argv(settings: RunnerSettings, aicr: Path | str, output: str, aicr_version: str) -> list[str]:
    """``aicr snapshot``: the agent Job in ``snapshot.namespace``, under the runner's own
    Job and ServiceAccount names; ``output`` is ``cm://<ns>/<name>`` or a ``*.yaml`` file
    (aicr picks a reader by the extension)."""
    snap = settings.snapshot
    argv = _aicr(aicr, "snapshot", "--namespace", snap.namespace, "--image", snap.agent_image(aicr_version))
    argv += ["--job-name", SNAPSHOT_AGENT_NAME, "--service-account-name", SNAPSHOT_AGENT_NAME]
    argv.append(f"--privileged={'true' if snap.privileged else 'false'}")
    argv += ["--timeout", f"{snap.timeout_seconds}s"]
    for selector in snap.node_selector:
        argv += ["--node-selector", selector]
    for toleration in snap.tolerations:
        argv += ["--toleration", toleration]
    return [*argv, "--output", output]


def validate_argv(  # noqa: PLR0917 - same positional shape as the other builders
    settings: RunnerSettings,
    aicr: Path | str,
    recipe: Path,
    pack: Path | None,
    ctrf: Path,
    evidence_dir: Path,
    *,
    snapshot: str = "",
) -> list[str]:
    """``aicr validate``: one ``--phase`` per phase (an empty list would mean all
    phases to aicr; the settings refuse it), evidence only when asked for; with the
    run's ``snapshot`` (``cm://`` or a file) aicr starts no agent of its own."""
    validate = settings.validate
    argv = _aicr(aicr, "validate", "--recipe", str(recipe))
    if snapshot:
        argv += ["--snapshot", snapshot]
    for phase in validate.phases:
        argv += ["--phase", phase.value]
    argv += _data(pack)
    if validate.emit_evidence:
        argv += ["--emit-attestation", str(evidence_dir)]
    argv += ["--output", str(ctrf)]
    return argv + split_flags(validate.flags) + list(validate.args)


def publish_argv(settings: RunnerSettings, aicr: Path | str, evidence_dir: Path) -> list[str]:
    """``aicr evidence publish``. Credentials never go on the command line
    (argv shows in /proc and logs): the token and registry config reach aicr
    through ``child_env`` as COSIGN_IDENTITY_TOKEN and DOCKER_CONFIG."""
    publish = settings.validate.publish
    argv = _aicr(aicr, "evidence", "publish", str(evidence_dir), "--push", publish.ref, "--yes")
    if publish.mode is PublishMode.UNSIGNED:
        argv.append("--no-sign")
    if publish.insecure_tls:
        argv.append("--insecure-tls")
    if publish.plain_http:
        argv.append("--plain-http")
    return argv
