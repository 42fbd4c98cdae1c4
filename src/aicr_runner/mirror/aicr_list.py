"""aicr's own ``aicr mirror list`` (aicr 1.x; v0.11.1 has none), beside our list.

Where the aicr in use lists the command in ``aicr --help``, it is run on the same
recipe (``aicr mirror list --recipe FILE --format json``) and every image or
chart that one list has and the other lacks is reported. Our list stays the
one printed: it also covers the runner, the pack, aicr's release and the
operand images operators start (aicr's list has no node-OS driver tags, for one).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from aicr_runner.aicr.capabilities import HelpProbe
from aicr_runner.mirror.images import normalize
from aicr_runner.mirror.items import Item, Kind
from aicr_runner.mirror.tool_call import last_line
from aicr_runner.settings.config import RunnerSettings

__all__ = ["differences", "parse_aicr_list"]

_TIMEOUT_SECONDS = 300.0


def _binary(settings: RunnerSettings) -> Path:
    return Path(settings.aicr.binary) if settings.aicr.binary else settings.work_path / "aicr-release" / "aicr"


def _run(argv: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=_TIMEOUT_SECONDS, check=False)


def has_mirror_list(binary: Path, cwd: Path) -> bool:
    result = _run([str(binary), "--help"], cwd)
    return result.returncode == 0 and "mirror" in HelpProbe.read(result.stdout, {}).commands


def parse_aicr_list(text: str) -> tuple[set[str], set[tuple[str, str]]]:
    """Images (normalised) and charts (name, version) of ``aicr mirror list --format json``."""
    doc = json.loads(text)
    images = {normalize(_image_name(entry)) for entry in doc.get("images") or () if _image_name(entry)}
    charts = {
        (str(entry.get("name", "")), str(entry.get("version", "")))
        for entry in doc.get("charts") or ()
        if isinstance(entry, dict)
    }
    return images, charts


def _image_name(entry: Any) -> str:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict):
        return str(entry.get("image") or entry.get("ref") or entry.get("name") or "")
    return ""


def differences(settings: RunnerSettings, items: Sequence[Item]) -> list[str]:
    """One line per difference; none when the aicr has no ``mirror list``."""
    binary, work = _binary(settings), settings.work_path
    if not binary.is_file() or not has_mirror_list(binary, work):
        return []
    result = _run([str(binary), "mirror", "list", "--recipe", str(work / "recipe.yaml"), "--format", "json"], work)
    if result.returncode != 0:
        return [f"aicr mirror list failed (exit {result.returncode}): {last_line(result.stderr, 300)}; not compared"]
    try:
        theirs_images, theirs_charts = parse_aicr_list(result.stdout)
    except (ValueError, AttributeError) as exc:
        return [f"aicr mirror list printed no JSON list ({exc}); not compared"]
    return compare(items, theirs_images, theirs_charts)


def compare(items: Iterable[Item], theirs_images: set[str], theirs_charts: set[tuple[str, str]]) -> list[str]:
    ours = list(items)
    our_images = {i.reference: i for i in ours if i.kind is Kind.IMAGE}
    our_charts = {(i.chart_name, i.version): i for i in ours if i.kind is Kind.CHART}
    lines = [
        f"aicr mirror list names image {ref}; our list does not" for ref in sorted(theirs_images - our_images.keys())
    ]
    lines += [
        f"our list names image {ref} ({our_images[ref].needed_by[0]}); aicr mirror list does not"
        for ref in sorted(our_images.keys() - theirs_images)
    ]
    lines += [
        f"aicr mirror list names chart {n} {v}; our list does not" for n, v in sorted(theirs_charts - our_charts.keys())
    ]
    lines += [
        f"our list names chart {n} {v}; aicr mirror list does not" for n, v in sorted(our_charts.keys() - theirs_charts)
    ]
    return lines
