"""``aicr mirror list`` (1.x; contract §13: an image and chart list, formats yaml|json|hauler|zarf).

The real command renders each enabled component with ``helm template``; the fake
lists the recipe's charts (``componentRefs`` with a chart and a source) and the
images ``FAKE_AICR_MIRROR_IMAGES`` names (comma-separated), so tests decide where
aicr's list and the runner's differ. Only ``--format json`` and ``yaml`` are
produced; the JSON shape (``images[].image``, ``charts[].{name,repository,version}``)
is the fake's, as the contract does not give the real one.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from .log import AicrError, Logger, UsageError


def _flags(args: list[str]) -> dict[str, str]:
    out: dict[str, str] = {"format": "yaml"}
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        key = name.lstrip("-")
        if key in ("recipe", "r", "format", "t", "output", "o") and name.startswith("-"):
            if not eq:
                i += 1
                if i >= len(args):
                    raise UsageError(f"flag needs an argument: {name}")
                value = args[i]
            out[{"r": "recipe", "t": "format", "o": "output"}.get(key, key)] = value
        else:
            raise UsageError(f"flag provided but not defined: -{key}")
        i += 1
    return out


def cmd_mirror(args: list[str], log: Logger) -> int:
    if args[:1] != ["list"]:
        raise UsageError("mirror: only 'list' is a subcommand")
    flags = _flags(args[1:])
    if "recipe" not in flags:
        raise AicrError("INVALID_REQUEST", "--recipe is required")
    if flags["format"] not in ("yaml", "json", "hauler", "zarf"):
        raise AicrError("INVALID_REQUEST", f"unknown format {flags['format']!r}")
    recipe = yaml.safe_load(Path(flags["recipe"]).read_text()) or {}
    listing: dict[str, Any] = {
        "images": [{"image": ref} for ref in os.environ.get("FAKE_AICR_MIRROR_IMAGES", "").split(",") if ref],
        "charts": [
            {"name": ref["chart"], "repository": ref["source"], "version": str(ref.get("version", ""))}
            for ref in recipe.get("componentRefs") or ()
            if ref.get("chart") and ref.get("source")
        ],
    }
    text = json.dumps(listing, indent=2) if flags["format"] == "json" else yaml.safe_dump(listing)
    if "output" in flags:
        Path(flags["output"]).write_text(text)
    else:
        sys.stdout.write(text + "\n")
    log.info("mirror list complete", images=len(listing["images"]), charts=len(listing["charts"]))
    return 0
