"""What each aicr version can do, in one table, and the version a binary reports.

The runner is pinned to aicr v1.2.0, but users run what they have (a preinstalled
binary, a mirror with another tag). Instead of letting an older aicr fail on a
flag it lacks ("unexpected exit 1") or succeed in a way the runner misreads
("0/0 installed"), the runner asks the binary its version after the fetch and
looks it up here:

- ``FEATURES``: the settings and commands each needs, with the first version that
  has them. A setting the detected version lacks is refused (exit 2) before any
  step uses it.
- ``BEHAVIOURS``: per version range, what the output looks like (the recipe
  completion line, deploy.sh's per-component markers) and what ``verify`` checks.

Facts come from the aicr CLI contract: 0.11.1 was observed running; the 1.x
entries come from the 1.x documentation and source. Releases between 0.11.1 and
1.0.0 were not checked, so features documented as 1.x ask for 1.0.0.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aicr_runner import logs
from aicr_runner.config import ENV_PREFIX, RunnerSettings

__all__ = [
    "BEHAVIOURS",
    "FEATURES",
    "AicrVersion",
    "Behaviour",
    "Feature",
    "behaviour_of",
    "reported_version",
    "unsupported",
]

_VERSION_LINE = re.compile(r"aicr version v?(\d+)\.(\d+)\.(\d+)([-+][0-9A-Za-z.-]+)?")

Version = tuple[int, int, int]


@dataclass(frozen=True)
class AicrVersion:
    numbers: Version
    #: As the binary printed it, e.g. ``aicr version 0.11.1 (commit: abc1234, date: ...)``.
    line: str
    #: The binary named no release version (a source build without release
    #: version data prints ``aicr version dev``): the pinned version is assumed.
    assumed: bool = False

    @property
    def text(self) -> str:
        numbers = "v" + ".".join(str(n) for n in self.numbers)
        return f"{numbers} (assumed: aicr printed {self.line!r})" if self.assumed else numbers

    @classmethod
    def assume(cls, pinned: str, printed: str) -> AicrVersion:
        found = cls.parse(f"aicr version {pinned}")
        return cls(found.numbers if found else (0, 0, 0), printed.strip()[:120], assumed=True)

    @classmethod
    def parse(cls, output: str) -> AicrVersion | None:
        """The version from ``aicr --version`` output; None when it has none."""
        for raw in output.splitlines():
            line = raw.strip()
            if match := _VERSION_LINE.search(line):
                major, minor, patch = (int(g) for g in match.groups()[:3])
                return cls((major, minor, patch), line)
        return None


def reported_version(printed: Sequence[str], pinned: str) -> AicrVersion:
    """The version in what ``aicr --version`` printed; when it names none (a build
    without release version data), the ``pinned`` version, marked assumed."""
    version = AicrVersion.parse("\n".join(printed))
    if version is not None:
        return version
    return AicrVersion.assume(pinned, logs.redact(" ".join(printed)))


def _v(text: str) -> Version:
    major, minor, patch = text.split(".")
    return int(major), int(minor), int(patch)


@dataclass(frozen=True)
class Feature:
    """A setting (or command) the runner passes on, and the first aicr that has it."""

    #: The setting as the user wrote it: environment variable and chart value.
    setting: str
    #: What it makes the runner pass to aicr.
    needs: str
    since: Version
    used: Callable[[RunnerSettings], bool]


FEATURES: tuple[Feature, ...] = (
    Feature(
        f"{ENV_PREFIX}BUNDLE__STORAGE_CLASS (storageClass)",
        "aicr bundle --storage-class",
        _v("1.0.0"),
        lambda s: bool(s.bundle.storage_class) and s.deploy.enabled,
    ),
    Feature(
        f"{ENV_PREFIX}VALIDATE__EMIT_EVIDENCE (validate.emitEvidence)",
        "aicr validate --emit-attestation",
        _v("1.0.0"),
        lambda s: s.validate.enabled and s.validate.emit_evidence,
    ),
    Feature(
        f"{ENV_PREFIX}VALIDATE__PUBLISH__ENABLED (validate.publish.enabled)",
        "aicr evidence publish",
        _v("1.0.0"),
        lambda s: s.validate.enabled and s.validate.publish.enabled,
    ),
    Feature(
        f"{ENV_PREFIX}CRITERIA__SERVICE=k0s (service)",
        "aicr recipe --service k0s",
        _v("0.22.0"),
        lambda s: s.criteria.service == "k0s",
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
    ),
)


def behaviour_of(version: Version) -> Behaviour:
    return [b for b in BEHAVIOURS if b.since <= version][-1]


def unsupported(settings: RunnerSettings, version: AicrVersion) -> list[str]:
    """One line per setting in use that ``version`` does not support."""
    return [
        f"{f.setting} needs {f.needs}, which aicr {version.text} does not have "
        f"(minimum version v{'.'.join(map(str, f.since))}); unset it or use a newer aicr"
        for f in FEATURES
        if f.used(settings) and version.numbers < f.since
    ]
