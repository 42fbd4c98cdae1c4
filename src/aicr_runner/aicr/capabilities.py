"""What each aicr version can do, in one table, and what a binary says it is.

The runner is pinned to aicr v1.2.0, but users run what they have (a preinstalled
binary, a mirror with another tag). Instead of letting an older aicr fail on a
flag it lacks ("unexpected exit 1") or succeed in a way the runner misreads
("0/0 installed"), the runner asks the binary its version after the fetch and
looks it up here:

- ``FEATURES``: the settings and commands each needs, with the first version that
  has them and what ``--help`` shows when a binary has them. A setting the
  binary lacks is refused (exit 2) before any step uses it.
- ``BEHAVIOURS``: per version range, what the output looks like (the recipe
  completion line, deploy.sh's per-component markers) and what ``verify`` checks.

A binary that names no release version (a source build prints ``aicr version
dev``) is not taken for the pin: its capabilities are detected from the flags
its ``--help`` lists (``HelpProbe``), and it is given the behaviour of the oldest
release that has them all.

Facts come from the aicr CLI contract: 0.11.1 was observed running (the tests run
a real v0.11.1); the 1.x entries come from the 1.x documentation and source.
Releases between 0.11.1 and 1.0.0 were not checked, so features documented as
1.x ask for 1.0.0.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from aicr_runner.settings.config import ENV_PREFIX, RunnerSettings
from aicr_runner.settings.criteria_catalog import version_guards
from aicr_runner.settings.names import CRITERIA_DIMENSIONS

__all__ = [
    "BEHAVIOURS",
    "FEATURES",
    "AicrVersion",
    "Behaviour",
    "Feature",
    "HelpProbe",
    "behaviour_of",
    "criteria_refusals",
    "has_upgrade_check",
    "unsupported",
]

_VERSION_LINE = re.compile(r"aicr version v?(\d+)\.(\d+)\.(\d+)([-+][0-9A-Za-z.-]+)?")
#: A flag of a ``--help`` line (urfave/cli), with its aliases: ``--accelerator string, --gpu string``.
_HELP_FLAG = re.compile(r"(?:^|, )--([a-z][a-z0-9-]*)")
#: A criteria flag whose usage lists the values aicr accepts: ``--os string  ... (e.g. cos, rhel, ubuntu)``.
_HELP_VALUES = re.compile(r"^\s*--([a-z]+)\b[^(]*\(e\.g\. ([^)]*)\)")
#: ``aicr --help``: a command under ``COMMANDS:``, ``     recipe    Create ...``.
_HELP_COMMAND = re.compile(r"^ {3,}([a-z][a-z-]*)(?:, [a-z-]+)* {2,}\S")

Version = tuple[int, int, int]


def _v(text: str) -> Version:
    major, minor, patch = text.split(".")
    return int(major), int(minor), int(patch)


@dataclass(frozen=True)
class HelpProbe:
    """What a binary's ``--help`` says it has: its commands, each subcommand's
    flags, and the criteria values ``recipe --help`` lists (0.11 prints the
    accepted values in each criteria flag's usage, from the same lists its parser
    checks)."""

    commands: frozenset[str]
    flags: Mapping[str, frozenset[str]]
    values: Mapping[str, tuple[str, ...]]

    #: The subcommands whose ``--help`` the probe reads (besides ``aicr --help``).
    SUBCOMMANDS: ClassVar[tuple[str, ...]] = ("recipe", "bundle", "validate")

    @classmethod
    def read(cls, root_help: str, subcommand_help: Mapping[str, str]) -> HelpProbe:
        """Parse ``aicr --help`` and the ``aicr <sub> --help`` outputs."""
        listing = root_help.split("COMMANDS:", 1)[1].split("OPTIONS:", 1)[0] if "COMMANDS:" in root_help else ""
        commands = frozenset(m.group(1) for line in listing.splitlines() if (m := _HELP_COMMAND.match(line)))
        flags = {
            sub: frozenset(name for line in text.splitlines() for name in _HELP_FLAG.findall(line.strip()))
            for sub, text in subcommand_help.items()
        }
        return cls(commands=commands, flags=flags, values=listed_values(subcommand_help.get("recipe", "")))

    def has(self, needs: tuple[str, ...]) -> bool:
        """``("evidence",)`` a command; ``("bundle", "--storage-class")`` a flag;
        ``("recipe", "--service", "k0s")`` a criteria value (when ``recipe --help``
        lists no values for that flag, aicr itself decides: True)."""
        if len(needs) == 1:
            return needs[0] in self.commands
        if len(needs) == 2:
            return needs[1].removeprefix("--") in self.flags.get(needs[0], frozenset())
        listed = self.values.get(needs[1].removeprefix("--"))
        return listed is None or needs[2] in listed


def listed_values(recipe_help: str) -> dict[str, tuple[str, ...]]:
    """The values each criteria flag's usage lists in ``aicr recipe --help``."""
    values: dict[str, tuple[str, ...]] = {}
    for line in recipe_help.splitlines():
        if (match := _HELP_VALUES.match(line)) and match.group(1) in CRITERIA_DIMENSIONS:
            values[match.group(1)] = tuple(v.strip() for v in match.group(2).split(",") if v.strip())
    return values


@dataclass(frozen=True)
class AicrVersion:
    numbers: Version
    #: As the binary printed it, e.g. ``aicr version 0.11.1 (commit: abc1234, date: ...)``.
    line: str
    #: Set when the binary named no release version: what its ``--help`` showed.
    #: ``numbers`` is then the oldest release with every capability found.
    probe: HelpProbe | None = None

    @property
    def detected_from_flags(self) -> bool:
        return self.probe is not None

    @property
    def text(self) -> str:
        numbers = "v" + ".".join(str(n) for n in self.numbers)
        if self.probe is None:
            return numbers
        has = [f.needs for f in FEATURES if self.probe.has(f.probe)]
        lacks = [f.needs for f in FEATURES if not self.probe.has(f.probe)]
        parts = [f"with {', '.join(has)}" if has else "", f"without {', '.join(lacks)}" if lacks else ""]
        return f"unknown version ({self.line!r}), capabilities detected from flags: {'; '.join(p for p in parts if p)}"

    @classmethod
    def detected(cls, printed: str, probe: HelpProbe) -> AicrVersion:
        """A binary without a release version, known by what its ``--help`` lists."""
        floor = max((f.since for f in FEATURES if probe.has(f.probe)), default=(0, 0, 0))
        return cls(floor, printed.strip()[:120], probe=probe)

    @classmethod
    def parse(cls, output: str) -> AicrVersion | None:
        """The version from ``aicr --version`` output; None when it has none."""
        for raw in output.splitlines():
            line = raw.strip()
            if match := _VERSION_LINE.search(line):
                major, minor, patch = (int(g) for g in match.groups()[:3])
                return cls((major, minor, patch), line)
        return None


@dataclass(frozen=True)
class Feature:
    """A setting (or command) the runner passes on, and the first aicr that has it."""

    #: The setting as the user wrote it: environment variable and chart value.
    setting: str
    #: What it makes the runner pass to aicr.
    needs: str
    since: Version
    used: Callable[[RunnerSettings], bool]
    #: What ``--help`` shows when a binary has it (see ``HelpProbe.has``).
    probe: tuple[str, ...]


FEATURES: tuple[Feature, ...] = (
    Feature(
        f"{ENV_PREFIX}BUNDLE__STORAGE_CLASS (bundle.storageClass)",
        "aicr bundle --storage-class",
        _v("1.0.0"),
        lambda s: bool(s.bundle.storage_class) and s.deploy.enabled,
        ("bundle", "--storage-class"),
    ),
    Feature(
        f"{ENV_PREFIX}VALIDATE__EMIT_EVIDENCE (validate.emitEvidence)",
        "aicr validate --emit-attestation",
        _v("1.0.0"),
        lambda s: s.validate.enabled and s.validate.emit_evidence,
        ("validate", "--emit-attestation"),
    ),
    Feature(
        f"{ENV_PREFIX}VALIDATE__PUBLISH__ENABLED (validate.publish.enabled)",
        "aicr evidence publish",
        _v("1.0.0"),
        lambda s: s.validate.enabled and s.validate.publish.enabled,
        ("evidence",),
    ),
    Feature(
        f"{ENV_PREFIX}CRITERIA__SERVICE=k0s (service)",
        "aicr recipe --service k0s",
        _v("0.22.0"),
        lambda s: s.criteria.service == "k0s",
        ("recipe", "--service", "k0s"),
    ),
)


@dataclass(frozen=True)
class Behaviour:
    """How an aicr version range talks, for the parts the runner reads."""

    #: First version of the range (inclusive); the next entry's ``since`` ends it.
    since: Version
    #: deploy.sh prints one result line per component (``└─ ✓ <name> installed``);
    #: 0.11 prints only ``Installing <name> (<ns>)...`` and ``Deployment complete.``
    per_component_results: bool
    #: The message of the recipe completion line (``output=``, ``components=``,
    #: ``overlays=``; 1.x adds ``componentNames=``).
    completion_message: str
    #: What a passing ``aicr verify`` established, for the verify step's reason.
    verify_checks: str
    #: ``aicr upgrade-check`` exists (1.x documentation: present by v1.0.0; v0.11.1 has none).
    upgrade_check: bool = False


BEHAVIOURS: tuple[Behaviour, ...] = (
    Behaviour(
        since=_v("0.0.0"),
        per_component_results=False,
        completion_message="recipe generation completed",
        verify_checks=(
            "bundle verified: every file listed in checksums.txt is present and matches "
            "(this aicr's verify is not closed-world: files added to the bundle are not detected)"
        ),
    ),
    Behaviour(
        since=_v("1.0.0"),
        per_component_results=True,
        completion_message="recipe generation completed",
        verify_checks="bundle verified: every file listed and matching, and nothing unlisted (closed-world)",
        upgrade_check=True,
    ),
)


def behaviour_of(version: Version) -> Behaviour:
    return [b for b in BEHAVIOURS if b.since <= version][-1]


def has_upgrade_check(version: AicrVersion) -> bool:
    """Whether ``version`` can assess a crossing: by its release number, or, for a
    binary without one, by the commands its ``--help`` lists."""
    if version.probe is not None:
        return version.probe.has(("upgrade-check",))
    return behaviour_of(version.numbers).upgrade_check


def unsupported(settings: RunnerSettings, version: AicrVersion) -> list[str]:
    """One line per setting in use that ``version`` does not support: by its
    release number, or, for a binary without one, by what its ``--help`` lists."""
    lines: list[str] = []
    for f in FEATURES:
        if not f.used(settings):
            continue
        minimum = "v" + ".".join(map(str, f.since))
        if version.probe is not None and not version.probe.has(f.probe):
            lines.append(
                f"{f.setting} needs {f.needs}, which this aicr does not have: it names no release version "
                f"({version.line!r}) and its --help lists no {' '.join(f.probe)} (aicr has it since {minimum}); "
                "unset it or use an aicr that has it"
            )
        elif version.probe is None and version.numbers < f.since:
            lines.append(
                f"{f.setting} needs {f.needs}, which aicr {version.text} does not have "
                f"(minimum version {minimum}); unset it or use a newer aicr"
            )
    return lines


def criteria_refusals(settings: RunnerSettings, version: AicrVersion) -> list[str]:
    """The criteria guards whose wording depends on the aicr that runs, for a
    preinstalled binary (settings cannot know its version; a release's tag is
    checked when the settings load)."""
    label = "this aicr (no release version)" if version.probe is not None else f"aicr {version.text}"
    return [problem.line for problem in version_guards(settings.criteria.stated(), version.numbers, label)]
