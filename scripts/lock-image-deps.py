#!/usr/bin/env python3
"""Locks the image's Python dependencies: requirements.lock, every package pinned
with the sha256 of each of its published files (all platforms, so the linux/amd64
and linux/arm64 builds install from one lock with ``pip install --require-hashes``).

The lock is made by uv (the version pinned in tools/versions.env, installed into
.tools/uv on first use) from pyproject.toml's ``[project].dependencies`` plus pip
(the image's installer, run from its locked wheel: the base has no pip), and its
first line records a digest of those dependencies and ``requires-python``.
``--check`` (CI, offline) fails when pyproject.toml changed since the lock was made
or when a pin no longer satisfies its requirement; regenerate with no argument
(this needs PyPI). uv keeps the versions already pinned where they still fit, so a
run with an unchanged pyproject.toml changes nothing.

Usage: scripts/lock-image-deps.py [--check] [--lock PATH] [--pyproject PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
PYPROJECT = ROOT / "pyproject.toml"
#: The first line of the lock; the digest ties it to pyproject.toml.
DIGEST_LINE = re.compile(r"^# pyproject\.toml dependencies sha256: (?P<digest>[0-9a-f]{64})$")
COMMAND = "scripts/lock-image-deps.py"
#: Locked besides the runtime's dependencies: what the image installs them with.
INSTALLER = "pip"


def pins() -> dict[str, str]:
    text = (ROOT / "tools" / "versions.env").read_text()
    return dict(re.findall(r"^([A-Z0-9_]+)=\"?([^\"\n]*)\"?$", text, re.M))


def dependencies_digest(pyproject: Path) -> str:
    """sha256 of what the lock is made from: the runtime dependencies and requires-python."""
    project = tomllib.loads(pyproject.read_text())["project"]
    inputs = {"dependencies": sorted(project["dependencies"]), "requires-python": project["requires-python"]}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_versions(lock_text: str) -> dict[str, str]:
    """name -> pinned version, from lines ``name==version \\``."""
    found = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", lock_text, re.M)
    return {_normalise(name): version for name, version in found}


def problems(lock: Path, pyproject: Path) -> list[str]:
    """Why the lock does not match pyproject.toml (empty: it does)."""
    from packaging.requirements import Requirement

    regenerate = f"run {COMMAND} (needs PyPI) and commit {lock.name}"
    if not lock.is_file():
        return [f"{lock.name} is missing: {regenerate}"]
    text = lock.read_text()
    first = text.splitlines()[0] if text else ""
    match = DIGEST_LINE.fullmatch(first)
    if match is None:
        return [f"{lock.name} has no '# pyproject.toml dependencies sha256: <hex>' first line: {regenerate}"]
    found: list[str] = []
    if match["digest"] != dependencies_digest(pyproject):
        found.append(f"{lock.name} is stale: pyproject.toml's dependencies changed since it was made; {regenerate}")
    versions = locked_versions(text)
    if INSTALLER not in versions:
        found.append(f"{INSTALLER} (the image's installer) is not pinned in {lock.name}: {regenerate}")
    for line in tomllib.loads(pyproject.read_text())["project"]["dependencies"]:
        requirement = Requirement(line)
        version = versions.get(_normalise(requirement.name))
        if version is None:
            found.append(f"{requirement.name} (pyproject.toml) is not pinned in {lock.name}: {regenerate}")
        elif not requirement.specifier.contains(version, prereleases=True):
            found.append(f"{requirement.name}=={version} in {lock.name} does not satisfy '{requirement}': {regenerate}")
    # Each pin's block runs to the next pin: it must carry at least one sha256.
    blocks = re.split(r"^(?=[A-Za-z0-9])", text, flags=re.M)
    found += [
        f"{block.split('==')[0]} has no --hash=sha256 in {lock.name}: {regenerate}"
        for block in blocks
        if "==" in block.split("\n")[0] and "--hash=sha256:" not in block
    ]
    return found


def uv() -> Path:
    """uv at the pinned version, in a venv of its own under .tools (not the test venv)."""
    version = pins()["UV_VERSION"]
    home = ROOT / ".tools" / "uv"
    binary = home / "bin" / "uv"
    stamp = home / ".version"
    if not (binary.is_file() and stamp.is_file() and stamp.read_text() == version):
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(home)], check=True)
        pip = [str(home / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, f"uv=={version}"], check=True)
        stamp.write_text(version)
    return binary


def regenerate(lock: Path, pyproject: Path) -> None:
    body = lock.with_suffix(".uv")
    installer = lock.with_suffix(".in")
    installer.write_text(f"{INSTALLER}\n")
    if lock.is_file():  # uv keeps the versions of an existing output file where they still fit
        body.write_text(lock.read_text())
    try:
        compile_ = [str(uv()), "pip", "compile", str(pyproject), str(installer), "--universal", "--generate-hashes"]
        options = ["--quiet", "--no-progress", "--custom-compile-command", COMMAND, "--output-file", str(body)]
        subprocess.run([*compile_, *options], check=True, cwd=pyproject.parent)
        text = body.read_text()
    finally:
        body.unlink(missing_ok=True)
        installer.unlink(missing_ok=True)
    lines = [line for line in text.splitlines() if not DIGEST_LINE.fullmatch(line)]
    header = f"# pyproject.toml dependencies sha256: {dependencies_digest(pyproject)}"
    lock.write_text("\n".join([header, *lines]) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail when the lock does not match pyproject.toml")
    parser.add_argument("--lock", type=Path, default=LOCK)
    parser.add_argument("--pyproject", type=Path, default=PYPROJECT)
    args = parser.parse_args(argv)
    if not args.check:
        regenerate(args.lock, args.pyproject)
    found = problems(args.lock, args.pyproject)
    for problem in found:
        print(f"lock-image-deps: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
