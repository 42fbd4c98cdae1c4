"""The places the run's settings name, checked against the file system before any step.

Every directory the run writes (the work directory, a results directory and the
subdirectory each result takes in it) exists or is created now and takes a file,
and a Sigstore trusted root that is given is a file: a run never reports success
with results that went nowhere, nor fails after its work for a path it was given.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from aicr_runner.errors import ConfigError, InputProblem
from aicr_runner.settings.checks import Invalid, absolute_path, problem_line
from aicr_runner.settings.names import ENV_PREFIX

if TYPE_CHECKING:
    from aicr_runner.settings.config import RunnerSettings

__all__ = ["check_places"]


def check_places(settings: RunnerSettings, output: Path | None, flag: str) -> None:
    """Every directory the run writes exists or is created now, and takes a file:
    the work directory and ``output``, the results directory ``flag`` named (None:
    results go to ConfigMaps). Raises ``ConfigError`` with one line per problem."""
    places: list[tuple[str, str]] = [(f"{ENV_PREFIX}WORK_DIR", settings.work_dir)]
    if output is not None:
        places.append((flag, str(output)))
    problems: list[InputProblem] = []
    for name, place in places:
        try:
            _writable_directory(place)
        except Invalid as exc:
            problems.append(InputProblem(problem_line(name, place, exc), name))
    if output is not None and not problems:
        problems.extend(_result_places(settings, flag, output))
    problems.extend(_trusted_root_problem(settings))
    if problems:
        raise ConfigError(problems)


def _result_places(settings: RunnerSettings, flag: str, output: Path) -> list[InputProblem]:
    """The results directory's subdirectories (one per result, named as its
    ConfigMap would be): one already there must be a directory that takes a
    file, or the run would end without its report after all its work."""
    results = {
        "STATUS_CONFIGMAP": settings.status_configmap,
        "RECIPE__CONFIGMAP": settings.recipe.configmap,
        "VALIDATE__RESULT_CONFIGMAP": settings.validate.result_configmap,
        "VALIDATE__EVIDENCE_CONFIGMAP": settings.validate.evidence_configmap,
    }
    problems: list[InputProblem] = []
    for setting, name in results.items():
        place = output / name
        if not name or not (place.exists() or place.is_symlink()):
            continue  # created when the result is written; the results directory takes files
        try:
            _writable_directory(str(place))
        except Invalid as exc:
            why = (
                f"{name}/ in it {exc.reason}; the results {ENV_PREFIX}{setting} names go there: remove it or "
                f"choose another {flag}"
            )
            problems.append(InputProblem(problem_line(flag, str(output), Invalid(why)), flag))
    return problems


def _trusted_root_problem(settings: RunnerSettings) -> list[InputProblem]:
    """A Sigstore trusted root that is given must be a file (when provenance is checked at all)."""
    provenance = settings.aicr.provenance
    path = Path(provenance.trusted_root)
    if not provenance.trusted_root or provenance.mode.value == "off" or path.is_file():
        return []
    state = "is a directory" if path.is_dir() else "exists but is not a file" if path.exists() else "does not exist"
    reason = f"{state}; give a Sigstore trusted_root.json file, or leave it empty for the shipped public-good root"
    name = f"{ENV_PREFIX}AICR__PROVENANCE__TRUSTED_ROOT"
    return [InputProblem(problem_line(name, provenance.trusted_root, Invalid(reason)), name)]


def _writable_directory(place: str) -> None:
    """``place`` is (now) a directory this process can create files in; raises ``Invalid``."""
    absolute_path(required=True)(place)  # UTF-8, no control characters, absolute
    path = Path(place)
    try:
        if path.exists() and not path.is_dir():
            raise Invalid("exists and is not a directory")
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise Invalid(f"cannot be created ({exc.strerror or exc})") from None
    try:
        handle, probe = tempfile.mkstemp(dir=path, prefix=".aicr-runner-probe-")
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        raise Invalid(_not_writable(exc)) from None


def _not_writable(exc: OSError) -> str:
    """Why a directory takes no file, in words that fit the errno: /proc answers
    "No such file or directory" for a directory that is there."""
    said = exc.strerror or str(exc)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"is not writable by this process ({said})"
    if exc.errno == errno.EROFS:
        return f"is on a read-only file system ({said})"
    if exc.errno == errno.ENOENT:
        return f"takes no file: creating one failed with '{said}', as in /proc and other special file systems"
    return f"takes no file ({said})"
