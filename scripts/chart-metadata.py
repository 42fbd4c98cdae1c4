#!/usr/bin/env python3
"""Keeps Chart.yaml's Artifact Hub metadata in step with values.yaml and the release.

* ``artifacthub.io/images`` is generated from ``image.repository``, ``image.tag``
  (empty: appVersion) and ``image.digest`` in values.yaml;
* ``artifacthub.io/prerelease`` follows the chart version (a SemVer pre-release
  such as ``0.5.0-rc.1`` is a prerelease).

Usage:
  scripts/chart-metadata.py            rewrite chart/Chart.yaml
  scripts/chart-metadata.py --check    fail when it is out of step (a test runs this)
  scripts/chart-metadata.py --chart DIR --image-digest sha256:...
      the release: write the digest it built into DIR's values.yaml (image.digest)
      and the images annotation, in the copy of the chart it packages.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
PLATFORMS = ("linux/amd64", "linux/arm64")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_IMAGES_BLOCK = re.compile(r"(  artifacthub\.io/images: \|\n)((?:    .*\n)*)")
_PRERELEASE = re.compile(r'(  artifacthub\.io/prerelease: )"(?:true|false)"')
_IMAGE_DIGEST = re.compile(r'(\nimage:\n(?:  .*\n)*?  digest: )"[^"\n]*"')


class MetadataError(Exception):
    pass


def image_reference(values: dict[str, Any], app_version: str) -> str:
    image = values["image"]
    tag = str(image.get("tag") or app_version)
    reference = f"{image['repository']}:{tag}"
    return f"{reference}@{image['digest']}" if image.get("digest") else reference


def images_block(values: dict[str, Any], app_version: str) -> str:
    lines = ["- name: aicr-runner", f"  image: {image_reference(values, app_version)}", "  platforms:"]
    lines += [f"    - {platform}" for platform in PLATFORMS]
    return "".join(f"    {line}\n" for line in lines)


def is_prerelease(version: str) -> bool:
    return "-" in version.split("+", 1)[0]


def synced(chart_yaml: str, values_yaml: str) -> str:
    chart = yaml.safe_load(chart_yaml)
    values = yaml.safe_load(values_yaml)
    if not _IMAGES_BLOCK.search(chart_yaml):
        raise MetadataError("Chart.yaml has no 'artifacthub.io/images: |' annotation block")
    if not _PRERELEASE.search(chart_yaml):
        raise MetadataError("Chart.yaml has no artifacthub.io/prerelease annotation")
    block = images_block(values, str(chart["appVersion"]))
    text = _IMAGES_BLOCK.sub(lambda m: m.group(1) + block, chart_yaml, count=1)
    flag = "true" if is_prerelease(str(chart["version"])) else "false"
    return _PRERELEASE.sub(lambda m: f'{m.group(1)}"{flag}"', text, count=1)


def with_digest(values_yaml: str, digest: str) -> str:
    if not _DIGEST.match(digest):
        raise MetadataError(f"--image-digest {digest!r}: expected sha256: and 64 lowercase hex characters")
    if not _IMAGE_DIGEST.search(values_yaml):
        raise MetadataError("values.yaml has no image.digest key")
    return _IMAGE_DIGEST.sub(lambda m: f'{m.group(1)}"{digest}"', values_yaml, count=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chart", type=Path, default=ROOT / "chart")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--image-digest", default="")
    args = parser.parse_args()
    chart_path, values_path = args.chart / "Chart.yaml", args.chart / "values.yaml"
    try:
        values_yaml = values_path.read_text()
        if args.image_digest:
            values_yaml = with_digest(values_yaml, args.image_digest)
        current = chart_path.read_text()
        updated = synced(current, values_yaml)
    except (OSError, MetadataError) as exc:
        print(f"chart-metadata: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if updated != current:
            print(f"chart-metadata: {chart_path} is out of step: run scripts/chart-metadata.py", file=sys.stderr)
            return 1
        return 0
    if args.image_digest:
        values_path.write_text(values_yaml)
    chart_path.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
